package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every command's -h names each flag's value by one word (string,
// duration, ...): the flag package takes back-quoted text in a usage as
// that name, so "a running `agentd serve`" printed "-connect agentd serve".
func TestHelpNamesEachFlagValueByOneWord(t *testing.T) {
	home := t.TempDir()
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := New(strings.NewReader(""), &out, &errOut, getenv).Run(context.Background(), []string{c.name, "-h"}); code != ExitOK {
				t.Fatalf("agentd %s -h: exit %d\n%s", c.name, code, errOut.String())
			}
			lines := strings.Split(errOut.String(), "\n")
			if len(lines) < 2 {
				t.Fatalf("agentd %s -h printed no flags:\n%s", c.name, errOut.String())
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "  -") {
					continue
				}
				// A one-letter bool flag has its usage on its line, after a tab.
				name, _, _ := strings.Cut(l, "\t")
				if f := strings.Fields(name); len(f) > 2 {
					t.Errorf("agentd %s -h: %q names the value of %s by more than one word", c.name, l, f[0])
				}
			}
		})
	}
}
