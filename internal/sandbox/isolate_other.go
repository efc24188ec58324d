//go:build !linux

package sandbox

import (
	"fmt"
	"io"
)

// ProbeIsolation reports that only Linux has the namespaces confined
// commands run in.
func ProbeIsolation(string) error {
	return fmt.Errorf("isolating commands needs Linux namespaces")
}

func probeMain(stderr io.Writer) int {
	fmt.Fprintln(stderr, "isolating commands needs Linux namespaces")
	return 1
}

func runIsolated(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "agentd sandbox: isolating commands needs Linux namespaces; the command was not run")
	return ExitRefused
}

func initMain(_ Policy, _ []string, stderr io.Writer) int { return runIsolated(nil, stderr) }

func readInitArgs() ([]string, error) {
	return nil, fmt.Errorf("isolating commands needs Linux namespaces")
}
