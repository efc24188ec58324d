package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/proclimit"
)

// standInCommand makes the test binary play agentd for the tests that
// kill agentd: it runs one bash command under a supervisor and stays
// there until it is killed.
const standInCommand = "__test_agentd"

// standInMain runs args[2] as a bash command in directory args[1],
// supervised with (args[0] == "cgroup") or without a cgroup, or not
// supervised ("direct"); or ("tool-procs=N") as the model's bash tool,
// supervised with a limit of N processes, printing the result and
// exiting.
func standInMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: __test_agentd cgroup|nocgroup|direct DIR COMMAND")
		return 2
	}
	if procs, ok := strings.CutPrefix(args[0], "tool-procs="); ok {
		return standInTool(procs, args[1], args[2])
	}
	var sup []string
	if args[0] != "direct" {
		var err error
		if sup, err = supervisorArgv(args[0] == "cgroup"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	env := Env{Cwd: args[1], TempDir: args[1], Environ: []string{"PATH=" + os.Getenv("PATH"), raceNoExitSleep}, Supervisor: sup, Scope: NewScope()}
	run := RunBash(context.Background(), env, args[2], 0, nil)
	fmt.Fprintf(os.Stderr, "stand-in: the command returned: %+v\n", run)
	time.Sleep(time.Hour)
	return 0
}

// raceNoExitSleep keeps the race detector of a supervisor (the test
// binary) from sleeping at exit, which Scope.Close would wait for.
const raceNoExitSleep = "GORACE=atexit_sleep_ms=0"

func supervisorArgv(cgroup bool) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := []string{exe, SuperviseCommand}
	if !cgroup {
		argv = append(argv, NoCgroupFlag)
	}
	return argv, nil
}

// supervisedEnv is testEnv with the test binary as supervisor and a Scope
// the caller closes.
func supervisedEnv(t *testing.T, cgroup bool) Env {
	t.Helper()
	env := testEnv(t)
	sup, err := supervisorArgv(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	env.Supervisor, env.Scope = sup, NewScope()
	// A supervisor built with -race would otherwise sleep a second at exit.
	env.Environ = append(env.Environ, raceNoExitSleep)
	return env
}

// standInTool runs command with the bash tool under a limit of procs
// processes, writes the result's text to stdout and returns.
func standInTool(procs, dir, command string) int {
	n, err := strconv.Atoi(procs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sup, err := supervisorArgv(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sup = append(sup, proclimit.Limits{Procs: n}.Args()...)
	env := Env{Cwd: dir, TempDir: dir, Environ: []string{"PATH=" + os.Getenv("PATH"), raceNoExitSleep}, Supervisor: sup, Scope: NewScope()}
	defer env.Scope.Close()
	args, _ := json.Marshal(map[string]string{"command": command})
	r := NewBash(env).Execute(context.Background(), Call{ID: "c", Name: "bash", Args: args}, nil)
	fmt.Print(textOf(r))
	return 0
}
