package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/config"
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

// Every command's -h says how it is called, what it does and how it is
// used before its flags; a command that reads no configuration does not
// list the shared flags it would ignore.
func TestEveryCommandHasHelp(t *testing.T) {
	home := t.TempDir()
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, help := cliRun(t, home, nil, c.name, "-h")
			if code != ExitOK || stdout != "" {
				t.Fatalf("exit %d, stdout %q", code, stdout)
			}
			h := helpOf(c.name)
			if len(h.synopsis) == 0 || h.about == "" || len(h.examples) == 0 || len(h.examples) > 3 {
				t.Fatalf("%s has %d synopses, %d examples, about %q", c.name, len(h.synopsis), len(h.examples), h.about)
			}
			if !strings.HasPrefix(help, "Usage: agentd "+c.name) {
				t.Errorf("help does not start with the synopsis:\n%s", help)
			}
			examples := strings.Index(help, "\nExamples:\n  ")
			flags := strings.Index(help, "  -")
			if examples < 0 || flags >= 0 && flags < examples || !strings.Contains(help[examples:], "agentd "+c.name) {
				t.Errorf("no examples before the flags:\n%s", help)
			}
			if got, want := strings.Contains(help, "-data-dir"), !c.own && c.shared == nil; got != want {
				t.Errorf("-data-dir listed: %v, want %v:\n%s", got, want, help)
			}
			for _, name := range c.shared {
				if i := strings.Index(help, "\nShared flags:\n"); i < 0 || !strings.Contains(help[i:], "\n  -"+name+" ") {
					t.Errorf("shared flag -%s not listed:\n%s", name, help)
				}
			}
		})
	}
	if !strings.Contains(helpOf("ask").synopsis[0], "<prompt") {
		t.Errorf("ask's synopsis does not say the prompt is an argument: %q", helpOf("ask").synopsis)
	}
}

// serve -h lists its flags under headings in config.ServeFlagGroups'
// order, each flag once; every flag the table names is one serve has,
// and every flag serve has is named in the table.
func TestServeHelpGroupsFlags(t *testing.T) {
	_, _, help := cliRun(t, t.TempDir(), nil, "serve", "-h")
	fs := serveFlags(t)
	at := 0
	for _, g := range config.ServeFlagGroups() {
		i := strings.Index(help[at:], "\n"+g.Title+":\n")
		if i < 0 {
			t.Fatalf("no heading %q after offset %d:\n%s", g.Title, at, help)
		}
		at += i + 1
		for _, n := range g.Names {
			if fs.Lookup(n) == nil {
				t.Errorf("group %q names %q, which is no flag of serve", g.Title, n)
			}
		}
	}
	grouped := map[string]bool{}
	for _, g := range config.ServeFlagGroups() {
		for _, n := range g.Names {
			grouped[n] = true
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(help, "\n  -"+f.Name+" ") + strings.Count(help, "\n  -"+f.Name+"\n"); n != 1 {
			t.Errorf("--%s is listed %d times", f.Name, n)
		}
		// The fallback under the last heading keeps a new flag visible;
		// it still belongs under the heading a person would look in.
		if !grouped[f.Name] {
			t.Errorf("--%s is in none of config.ServeFlagGroups: add it to the group it belongs to", f.Name)
		}
	})
	// The defaults shown are the registered ones.
	if !strings.Contains(help, "-port int\n    \tport to listen on") || !strings.Contains(help, `(default "127.0.0.1")`) {
		t.Errorf("the flags lost their format or defaults:\n%s", help)
	}
}

// serveFlags is serve's real flag set, as completion collects it.
func serveFlags(t *testing.T) *flag.FlagSet {
	t.Helper()
	for _, c := range commands() {
		if c.name == "serve" {
			cfg := config.Defaults(func(string) string { return "" })
			fs := newFlagSet(c, &cfg)
			if err := c.run(New(nil, io.Discard, io.Discard, cfg.Getenv), context.Background(), &cfg, fs, []string{"-h"}); !isHelp(err) {
				t.Fatal(err)
			}
			return fs
		}
	}
	t.Fatal("no serve command")
	return nil
}

// A mistake on the command line prints the mistake, first, and one line
// saying where the help is: not the whole flag list after it.
func TestUsageErrorIsShort(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "agentd serve: flag provided but not defined: -bogus"},
		{[]string{"serve", "--port", "x"}, `agentd serve: invalid value "x" for flag -port`},
		{[]string{"ask"}, "agentd ask: no prompt"},
		{[]string{"models", "extra"}, "agentd models: unexpected arguments: extra"},
		{[]string{"token", "--data-dir", "/tmp"}, "agentd token: flag provided but not defined: -data-dir"},
		{[]string{"version", "now"}, "agentd version: unexpected arguments: now"},
		{[]string{"completion"}, "agentd completion: name one shell"},
		{[]string{"completion", "tcsh"}, `agentd completion: shell "tcsh": want bash, zsh or fish`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := cliRun(t, t.TempDir(), nil, tt.args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			hint := "Run 'agentd " + tt.args[0] + " -h' for its usage and flags."
			if code != ExitUsage || stdout != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], tt.want) || lines[1] != hint {
				t.Fatalf("exit %d (want %d), stdout %q\nstderr:\n%s\nwant %q, then %q", code, ExitUsage, stdout, stderr, tt.want, hint)
			}
		})
	}
	code, _, stderr := cliRun(t, t.TempDir(), nil, "frobnicate")
	if code != ExitUsage || stderr != "agentd: unknown command \"frobnicate\"\nRun 'agentd help' for the commands.\n" {
		t.Fatalf("unknown command: exit %d\n%s", code, stderr)
	}
}

// A command's description keeps up with what it gained: each help names
// the flags and features a person would otherwise only find in the list.
func TestHelpNamesTheNewerFeatures(t *testing.T) {
	home := t.TempDir()
	for _, tt := range []struct {
		cmd  string
		want []string
	}{
		{"rpc", []string{"--mode", "set_mode", "get_commands", "--no-subagents", "revert_turn", "agentd rpc --mode plan"}},
		{"acp", []string{"mode", "commands", "--connect"}},
		{"serve", []string{"modes", "subagents", "checkpoints", "\n  -no-subagents\n", "\n  -no-skills\n", "\n  -no-prompt-templates\n", "\nContext files, skills, prompt templates and subagents:\n"}},
		{"bench", []string{"--baseline", "--cluster-nodes", "--face rest"}},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			for _, args := range [][]string{{tt.cmd, "-h"}, {"help", tt.cmd}} {
				code, _, help := cliRun(t, home, nil, args...)
				if code != ExitOK {
					t.Fatalf("%v: exit %d", args, code)
				}
				for _, w := range tt.want {
					if !strings.Contains(help, w) {
						t.Errorf("%v does not say %q:\n%s", args, w, help)
					}
				}
			}
		})
	}
}
