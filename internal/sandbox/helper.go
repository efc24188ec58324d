package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Command is the hidden subcommand that runs a command under a policy:
// `agentd __sandbox-exec --mode <mode> [--net] [--write <dir>]...
// [--show <dir>]... [--hide <path>]... [--no-isolation] -- <argv>`.
// Only agentd starts it (see Wrap).
const Command = "__sandbox-exec"

// initFlag, first after Command, marks the helper's second stage: the
// first process of the command's own PID namespace (see isolate_linux.go).
const initFlag = "--init"

// probeFlag, first after Command, makes the helper only check that it
// can isolate a command here (see ProbeIsolation).
const probeFlag = "--probe"

// Wrap returns the argv that runs argv under p through the helper, the
// executable at exe (agentd itself: /proc/self/exe). A policy that
// confines nothing returns argv unchanged.
func (p Policy) Wrap(exe string, argv []string) []string {
	if !p.Confined() {
		return argv
	}
	out := []string{exe, Command, "--mode", string(p.Mode)}
	if p.Network {
		out = append(out, "--net")
	}
	// Writable directories stay visible in every mode; only
	// workspace-write may write them.
	flag := "--show"
	if p.Mode == WorkspaceWrite {
		flag = "--write"
	}
	for _, d := range p.Writable {
		out = append(out, flag, d)
	}
	for _, h := range p.Hidden {
		out = append(out, "--hide", h)
	}
	if p.NoIsolation {
		out = append(out, "--no-isolation")
	}
	out = append(out, "--")
	return append(out, argv...)
}

// parseArgs reads what Wrap wrote. Directories given with --show come
// back in Writable, marked visible only: a read-only policy ignores
// Writable for writes.
func parseArgs(args []string) (Policy, []string, error) {
	var p Policy
	var shown []string
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		switch a {
		case "--":
			if len(args) == 0 {
				return p, nil, errors.New("no command after --")
			}
			if p.Mode == "" {
				return p, nil, errors.New("no --mode")
			}
			if p.Mode != WorkspaceWrite {
				p.Writable = append(p.Writable, shown...)
			} else if len(shown) > 0 {
				return p, nil, errors.New("--show is for modes that write nothing")
			}
			return p, args, nil
		case "--net":
			p.Network = true
		case "--no-isolation":
			p.NoIsolation = true
		case "--mode", "--write", "--show", "--hide":
			if len(args) == 0 {
				return p, nil, fmt.Errorf("%s needs a value", a)
			}
			v := args[0]
			args = args[1:]
			switch a {
			case "--write":
				p.Writable = append(p.Writable, v)
			case "--show":
				shown = append(shown, v)
			case "--hide":
				p.Hidden = append(p.Hidden, v)
			default:
				m, err := ParseMode(v)
				if err != nil {
					return p, nil, err
				}
				p.Mode = m
			}
		default:
			return p, nil, fmt.Errorf("unknown argument %q", a)
		}
	}
	return p, nil, errors.New("no -- before the command")
}

// ExitRefused is the helper's exit code when it could not confine the
// command, which then never runs.
const ExitRefused = 126

// Main is the helper: args are what followed Command. It applies the
// policy and executes the command: in this process's place, or, when the
// policy isolates, as the child of a process that starts the command in
// namespaces of its own (see isolate_linux.go). It returns only when that
// fails or the command is done, with the exit code to use.
func Main(args []string, stderr io.Writer) int {
	stage := ""
	if len(args) > 0 && (args[0] == initFlag || args[0] == probeFlag) {
		stage, args = args[0], args[1:]
	}
	if stage == probeFlag {
		return probeMain(stderr)
	}
	if stage == initFlag {
		var err error
		if args, err = readInitArgs(); err != nil || os.Getpid() != 1 {
			fmt.Fprintf(stderr, "agentd %s: the second stage runs only as agentd starts it (%v)\n", Command, err)
			return 2
		}
	}
	p, argv, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "agentd %s: %v (only agentd runs this)\n", Command, err)
		return 2
	}
	switch {
	case stage == initFlag:
		return initMain(p, argv, stderr)
	case p.Confined() && !p.NoIsolation:
		return runIsolated(args, stderr)
	}
	if err := Restrict(p); err != nil {
		// Never run the command unconfined when confinement was asked for.
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	err = execve(argv[0], argv, os.Environ())
	fmt.Fprintf(stderr, "agentd sandbox: cannot run %s: %v\n", strings.Join(argv[:1], ""), err)
	return ExitRefused
}
