package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// A piped prompt to agentd rpc, run in a nested project directory,
// reaches the provider (at the wire) with the AGENTS.md files of agentd's
// and pi's global directories and of every directory down to cwd, in
// that order; get_state lists them; --no-context-files leaves them out.
func TestRPCContextFilesReachTheProvider(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	home := t.TempDir()
	writeModels(t, home, map[string]any{"providers": map[string]any{"mock": map[string]any{
		"baseUrl": srv.AnthropicURL(), "api": "anthropic-messages", "apiKey": "k",
		"models": []any{map[string]any{"id": "m1"}},
	}}})
	proj := t.TempDir()
	cwd := filepath.Join(proj, "pkg", "inner")
	writeFileAll(t, filepath.Join(home, ".agentd", "AGENTS.md"), "RULE-AGENTD-GLOBAL")
	writeFileAll(t, filepath.Join(home, ".pi", "agent", "AGENTS.md"), "RULE-PI-GLOBAL")
	writeFileAll(t, filepath.Join(proj, "AGENTS.md"), "RULE-PROJECT")
	writeFileAll(t, filepath.Join(proj, "pkg", "CLAUDE.md"), "RULE-PKG-CLAUDE")
	writeFileAll(t, filepath.Join(cwd, "AGENTS.md"), "RULE-INNER")
	input := `{"type":"prompt","message":"hi"}` + "\n" + `{"type":"get_state","id":"st"}` + "\n"

	for _, tt := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{name: "loaded", want: []string{"RULE-AGENTD-GLOBAL", "RULE-PI-GLOBAL", "RULE-PROJECT", "RULE-PKG-CLAUDE", "RULE-INNER"}},
		{name: "off", flags: []string{"--no-context-files"}},
	} {
		srv.Enqueue(wiremock.Script{Text: []string{"done"}})
		args := append([]string{"rpc", "--no-session", "--model", "mock/m1"}, tt.flags...)
		r := runIn(t, cwd, home, nil, input, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", tt.name, r.code, r.stdout, r.stderr)
		}
		body := string(srv.LastRequest(t).Body)
		at := 0
		for _, w := range tt.want {
			i := strings.Index(body[at:], w)
			if i < 0 {
				t.Fatalf("%s: %q missing or out of order in the request:\n%s", tt.name, w, body)
			}
			at += i + len(w)
		}
		if len(tt.want) == 0 && (strings.Contains(body, "RULE-") || strings.Contains(body, "Project Context")) {
			t.Fatalf("%s: context files in the request:\n%s", tt.name, body)
		}
		var state any
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			v, err := e2eParse([]byte(l))
			if err != nil {
				t.Fatalf("stdout line is not JSON: %q", l)
			}
			if (e2eLine{raw: l, v: v}).isResponse("st") {
				state = v
			}
		}
		if state == nil {
			t.Fatalf("%s: no get_state response in\n%s", tt.name, r.stdout)
		}
		// No files: the field is left out, as pi's get_state has none.
		files, ok := e2eAt(state, "data", "contextFiles").([]any)
		if len(tt.want) == 0 && e2eAt(state, "data", "contextFiles") == nil {
			ok = true
		}
		if !ok || len(files) != len(tt.want) {
			t.Fatalf("%s: contextFiles %v, want %d files", tt.name, e2eAt(state, "data", "contextFiles"), len(tt.want))
		}
		wantPaths := []string{filepath.Join(home, ".agentd", "AGENTS.md"), filepath.Join(home, ".pi", "agent", "AGENTS.md"),
			filepath.Join(proj, "AGENTS.md"), filepath.Join(proj, "pkg", "CLAUDE.md"), filepath.Join(cwd, "AGENTS.md")}
		for i, f := range files {
			if e2eStr(f, "path") != wantPaths[i] || e2eStr(f, "kind") != "context" || e2eAt(f, "truncated") != nil {
				t.Errorf("%s: contextFiles[%d] = %v, want %s", tt.name, i, f, wantPaths[i])
			}
		}
	}
}

// writeFileAll writes path, making its directories.
func writeFileAll(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, content)
}

// agentd serve reports the files a session's prompt was built from on
// pi-server's get_state and in REST's conversation config, and sends
// their text to the provider.
func TestServeReportsContextFiles(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	global := filepath.Join(e.home, ".agentd", "AGENTS.md")
	project := filepath.Join(e.cwd, "AGENTS.md")
	writeFileAll(t, global, "SERVE-GLOBAL-RULE")
	writeFileAll(t, project, "SERVE-PROJECT-RULE")
	s := svStartInProc(t, e)
	want := []string{global, project}
	check := func(what string, files []any) {
		t.Helper()
		if len(files) != len(want) {
			t.Fatalf("%s: %v, want %v", what, files, want)
		}
		for i, f := range files {
			if svStr(f, "path") != want[i] || svStr(f, "kind") != "context" {
				t.Errorf("%s[%d] = %v, want %s", what, i, f, want[i])
			}
		}
	}

	c := s.dial("a")
	svCreate(c, "ctx")
	st := c.must("get_state", svM{"sessionId": "ctx"})
	check("get_state contextFiles", svArr(st.m, "data", "contextFiles"))
	svPrompt(c, "ctx", "hello")
	c.waitEvent("ctx", "agent_end")
	body := string(e.mock.LastRequest(t).Body)
	if g, p := strings.Index(body, "SERVE-GLOBAL-RULE"), strings.Index(body, "SERVE-PROJECT-RULE"); g < 0 || p < g {
		t.Fatalf("the request lacks the rules in order:\n%s", body)
	}

	rsOK(t, s, "PUT", rsConvPath("ctxrest"), map[string]any{})
	cfg := rsOK(t, s, "GET", rsConvPath("ctxrest")+"/config", nil)
	files, _ := cfg.m["context_files"].([]any)
	check("REST config context_files", files)
}
