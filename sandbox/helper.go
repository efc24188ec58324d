package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Command is the hidden subcommand that runs a command under a policy:
// `agentd __sandbox-exec --mode <mode> [--net] [--write <dir>]... -- <argv>`.
// Only agentd starts it (see Wrap).
const Command = "__sandbox-exec"

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
	if p.Mode == WorkspaceWrite {
		for _, d := range p.Writable {
			out = append(out, "--write", d)
		}
	}
	out = append(out, "--")
	return append(out, argv...)
}

// parseArgs reads what Wrap wrote.
func parseArgs(args []string) (Policy, []string, error) {
	var p Policy
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
			return p, args, nil
		case "--net":
			p.Network = true
		case "--mode", "--write":
			if len(args) == 0 {
				return p, nil, fmt.Errorf("%s needs a value", a)
			}
			v := args[0]
			args = args[1:]
			if a == "--write" {
				p.Writable = append(p.Writable, v)
				continue
			}
			m, err := ParseMode(v)
			if err != nil {
				return p, nil, err
			}
			p.Mode = m
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
// policy to this process and executes the command in its place; it
// returns only when that fails, with the exit code to use.
func Main(args []string, stderr io.Writer) int {
	p, argv, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "agentd %s: %v (only agentd runs this)\n", Command, err)
		return 2
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
