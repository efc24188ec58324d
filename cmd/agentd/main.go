// Command agentd hosts LLM coding-agent sessions. See the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentd-dev/agentd/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := cli.New(os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	code := m.Run(ctx, os.Args[1:])
	_ = m.Close()
	stop()
	os.Exit(code)
}
