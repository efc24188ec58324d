// Command agentd hosts LLM coding-agent sessions. See the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentd-dev/agentd/internal/cli"
	"golang.org/x/sys/unix"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := cli.New(os.Stdin, os.Stdout, os.Stderr, os.Getenv).StderrIsTerminal(isTerminal(os.Stderr))
	code := m.Run(ctx, os.Args[1:])
	_ = m.Close()
	stop()
	os.Exit(code)
}

// isTerminal reports whether f is a terminal: only a terminal answers
// the window-size request.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil
}
