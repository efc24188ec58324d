package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The bash script parses, names every command, and completes commands,
// a command's flags (taken from its real flag set) and completion's
// shells when bash runs it.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	code, script, stderr := cliRun(t, t.TempDir(), nil, "completion", "bash")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	path := filepath.Join(t.TempDir(), "agentd.bash")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, c := range commands() {
		if !strings.Contains(script, "    "+c.name+") flags=") {
			t.Errorf("the script has no case for %s", c.name)
		}
	}
	complete := func(words ...string) []string {
		t.Helper()
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + path + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_agentd\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	has := func(got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("completions %v lack %s", got, w)
			}
		}
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	has(complete("agentd", ""), append(names, "help")...)
	has(complete("agentd", "se"), "serve")
	has(complete("agentd", "serve", "--"), "--port", "--host", "--token", "--cluster", "--sandbox", "--mcp-config", "--data-dir")
	has(complete("agentd", "serve", "--port", "80", "--clu"), "--cluster", "--cluster-key")
	has(complete("agentd", "ask", "--"), "--model", "--tools", "--quiet")
	has(complete("agentd", "rpc", "--no"), "--no-session", "--no-tools")
	// Flags added with modes, skills, templates, subagents and bench's
	// baseline come from the same flag sets.
	has(complete("agentd", "rpc", "--"), "--mode", "--no-subagents", "--no-skills", "--no-prompt-templates", "--nc")
	has(complete("agentd", "serve", "--no-"), "--no-subagents", "--no-skills", "--no-prompt-templates", "--no-context-files")
	has(complete("agentd", "acp", "--no-"), "--no-subagents", "--no-skills")
	has(complete("agentd", "bench", "--base"), "--baseline", "--baseline-rounds")
	has(complete("agentd", "completion", ""), "bash", "zsh", "fish")
	has(complete("agentd", "help", "s"), "serve")
	if got := complete("agentd", "token", "--"); len(got) != 0 {
		t.Errorf("token takes no flags, completed %v", got)
	}
	if got := complete("agentd", "serve", "--ui"); len(got) != 0 {
		t.Errorf("the deprecated --ui-timeout is offered: %v", got)
	}
}

// zsh and fish get every command and the same flags; each shell checks
// the syntax where it is installed.
func TestZshAndFishCompletion(t *testing.T) {
	home := t.TempDir()
	for _, sh := range []struct{ name, flag, cmd string }{
		{"zsh", "'*--port[port to listen on]:port:_default'", "'serve:"},
		{"fish", "-l port -r -F -d 'port to listen on'", "-a serve -d"},
	} {
		t.Run(sh.name, func(t *testing.T) {
			code, script, stderr := cliRun(t, home, nil, "completion", sh.name)
			if code != ExitOK {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			if !strings.Contains(script, sh.flag) || !strings.Contains(script, sh.cmd) {
				t.Errorf("no %s or %s in\n%s", sh.flag, sh.cmd, script)
			}
			for _, c := range commands() {
				if !strings.Contains(script, c.name) {
					t.Errorf("%s is not named", c.name)
				}
			}
			bin, err := exec.LookPath(sh.name)
			if err != nil {
				t.Logf("no %s here: syntax not checked", sh.name)
				return
			}
			path := filepath.Join(t.TempDir(), "agentd."+sh.name)
			if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "-n", path).CombinedOutput(); err != nil {
				t.Fatalf("%s -n: %v\n%s", sh.name, err, out)
			}
		})
	}
}
