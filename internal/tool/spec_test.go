package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestSpecs pins the parameter names, types and required lists to pi's
// schemas: models and transcripts depend on them.
func TestSpecs(t *testing.T) {
	want := map[string]struct {
		props    map[string]string
		required []string
		closed   bool
	}{
		"read":  {map[string]string{"path": "string", "offset": "number", "limit": "number"}, []string{"path"}, false},
		"write": {map[string]string{"path": "string", "content": "string"}, []string{"path", "content"}, false},
		"edit":  {map[string]string{"path": "string", "edits": "array"}, []string{"path", "edits"}, true},
		// background is agentd's: pi's bash has no way to keep a process.
		"bash": {map[string]string{"command": "string", "timeout": "number", "background": "boolean"}, []string{"command"}, false},
		"grep": {map[string]string{"pattern": "string", "path": "string", "glob": "string", "ignoreCase": "boolean",
			"literal": "boolean", "context": "number", "limit": "number"}, []string{"pattern"}, false},
		"find": {map[string]string{"pattern": "string", "path": "string", "limit": "number"}, []string{"pattern"}, false},
		"ls":   {map[string]string{"path": "string", "limit": "number"}, nil, false},
	}
	tools := Builtins(testEnv(t))
	var names []string
	for _, tl := range tools {
		s := tl.Spec()
		names = append(names, s.Name)
		var schema struct {
			Type       string `json:"type"`
			Properties map[string]struct {
				Type        string          `json:"type"`
				Description string          `json:"description"`
				Items       json.RawMessage `json:"items"`
			} `json:"properties"`
			Required             []string `json:"required"`
			AdditionalProperties *bool    `json:"additionalProperties"`
		}
		if err := json.Unmarshal(s.Parameters, &schema); err != nil {
			t.Fatalf("%s: schema is not JSON: %v", s.Name, err)
		}
		w := want[s.Name]
		got := map[string]string{}
		for k, v := range schema.Properties {
			got[k] = v.Type
			if v.Description == "" {
				t.Errorf("%s.%s has no description", s.Name, k)
			}
		}
		if schema.Type != "object" || !reflect.DeepEqual(got, w.props) || !reflect.DeepEqual(schema.Required, w.required) {
			t.Errorf("%s: schema %s", s.Name, s.Parameters)
		}
		if w.closed != (schema.AdditionalProperties != nil && !*schema.AdditionalProperties) {
			t.Errorf("%s: additionalProperties", s.Name)
		}
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
		// Callers may modify what Spec returns.
		s.Parameters[0] = 'X'
		if tl.Spec().Parameters[0] != '{' {
			t.Errorf("%s: Spec shares its schema bytes", s.Name)
		}
	}
	if !reflect.DeepEqual(names, BuiltinNames) {
		t.Fatalf("order %v", names)
	}
	var items struct {
		Properties struct {
			Edits struct {
				Items struct {
					Properties map[string]any `json:"properties"`
					Required   []string       `json:"required"`
				} `json:"items"`
			} `json:"edits"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(NewEdit(Env{}).Spec().Parameters, &items)
	keys := []string{}
	for k := range items.Properties.Edits.Items.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"newText", "oldText"}) || !reflect.DeepEqual(items.Properties.Edits.Items.Required, []string{"oldText", "newText"}) {
		t.Fatalf("edit items %v %v", keys, items.Properties.Edits.Items.Required)
	}
	if _, err := New("nope", Env{}); err == nil || !strings.Contains(err.Error(), "read, bash") {
		t.Fatalf("New(nope) = %v", err)
	}
	if tl, err := New("grep", Env{}); err != nil || tl.Spec().Name != "grep" {
		t.Fatalf("New(grep) = %v, %v", tl, err)
	}
}

func TestEnvDefaults(t *testing.T) {
	e := Env{Cwd: "rel", Home: "/home/u"}.normalize()
	if !filepath.IsAbs(e.Cwd) || e.Locks == nil || e.TempDir != "/tmp" || e.Shell == "" {
		t.Fatalf("defaults %+v", e)
	}
	if !reflect.DeepEqual(e.Environ, []string{"PATH=" + defaultPath, "HOME=/home/u"}) {
		t.Fatalf("environ %v", e.Environ)
	}
	p, err := (&Env{Cwd: "/work", Home: "/home/u"}).resolve("~")
	if err != nil || p != "/home/u" {
		t.Fatalf("~ = %q %v", p, err)
	}
	p, _ = (&Env{Cwd: "/work"}).resolve("~/x")
	if p != "/work/~/x" {
		t.Fatalf("~ without Home = %q", p)
	}
	p, _ = (&Env{Cwd: "/work"}).resolve("../etc/./passwd")
	if p != "/etc/passwd" {
		t.Fatalf("relative = %q", p)
	}
}

// TestBashEscapedProcess: a process that leaves the process group (setsid)
// cannot be killed with it, but it must not keep Execute from returning
// even though it holds the output pipe.
func TestBashEscapedProcess(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	if lookPath("setsid", env.Environ) == "" {
		t.Skip("no setsid")
	}
	pidFile := filepath.Join(env.Cwd, "pid")
	cmd := fmt.Sprintf("setsid sh -c 'echo $$ > %q; exec sleep 30' & wait", pidFile)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		readPids(t, pidFile, 1)
		cancel()
	}()
	r := runBash(t, ctx, NewBash(env), map[string]any{"command": cmd}, nil)
	pids := readPids(t, pidFile, 1)
	killAtCleanup(t, pids...)
	mustErr(t, r.res, "Command aborted")
}

// fakeTool installs an executable script named name in a new directory and
// returns an environment whose PATH is only that directory (plus the
// system's, for the script's own commands).
func fakeTool(t *testing.T, env Env, name, script string) Env {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	env.Environ = []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	env.UseExternal = true
	return env
}

// TestExternalRipgrep drives the rg integration with a stand-in that
// replays ripgrep's --json output, so the parsing and formatting are
// tested without ripgrep installed.
func TestExternalRipgrep(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "a.txt"), "x\n")
	events := []string{
		`{"type":"begin","data":{"path":{"text":"` + env.Cwd + `/src/a.go"}}}`,
		`{"type":"context","data":{"path":{"text":"` + env.Cwd + `/src/a.go"},"lines":{"text":"before\n"},"line_number":1}}`,
		`{"type":"match","data":{"path":{"text":"` + env.Cwd + `/src/a.go"},"lines":{"text":"needle\r\n"},"line_number":2}}`,
		`{"type":"end","data":{}}`,
		`{"type":"begin","data":{"path":{"text":"` + env.Cwd + `/b.txt"}}}`,
		`{"type":"match","data":{"path":{"text":"` + env.Cwd + `/b.txt"},"lines":{"bytes":"bmVlZGxlIGI="},"line_number":7}}`,
		`{"type":"end","data":{}}`,
		`{"type":"summary","data":{}}`,
	}
	script := "cat <<'EOF'\n" + strings.Join(events, "\n") + "\nEOF\n"
	g := NewGrep(fakeTool(t, env, "rg", script))
	got := mustOK(t, run(t, g, map[string]any{"pattern": "needle", "context": 1}))
	if got != "src/a.go-1- before\nsrc/a.go:2: needle\nb.txt:7: needle b" {
		t.Fatalf("got %q", got)
	}
	got = mustOK(t, run(t, g, map[string]any{"pattern": "needle", "limit": 1}))
	if got != "src/a.go:2: needle\n\n[1 matches limit reached. Use limit=2 for more, or refine pattern]" {
		t.Fatalf("got %q", got)
	}
	// A failing rg (say, a pattern Rust rejects) falls back to the
	// built-in search.
	g = NewGrep(fakeTool(t, env, "rg", "echo 'regex parse error' >&2; exit 2\n"))
	if got := mustOK(t, run(t, g, map[string]any{"pattern": "x"})); got != "a.txt:1: x" {
		t.Fatalf("fallback got %q", got)
	}
}

func TestExternalFd(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "src", "b.go"), "")
	writeFile(t, filepath.Join(env.Cwd, "a.go"), "")
	// fd prints absolute paths in any order, older versions without the
	// trailing slash on directories.
	script := fmt.Sprintf("echo '%[1]s/src/b.go'; echo '%[1]s/a.go'; echo '%[1]s/src'\n", env.Cwd)
	f := NewFind(fakeTool(t, env, "fd", script))
	if got := mustOK(t, run(t, f, map[string]any{"pattern": "*"})); got != "a.go\nsrc/\nsrc/b.go" {
		t.Fatalf("got %q", got)
	}
	if got := mustOK(t, run(t, f, map[string]any{"pattern": "*", "limit": 2})); got != "a.go\nsrc/\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]" {
		t.Fatalf("got %q", got)
	}
	f = NewFind(fakeTool(t, env, "fd", "exit 1\n"))
	if got := mustOK(t, run(t, f, map[string]any{"pattern": "*.go"})); got != "a.go\nsrc/b.go" {
		t.Fatalf("fallback got %q", got)
	}
}

// TestCancelledSearches: every tool answers a cancelled context with an
// error rather than running on.
func TestCancelledSearches(t *testing.T) {
	env := testEnv(t)
	makeTree(t, env.Cwd)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		tl   Tool
		args map[string]any
	}{
		{NewGrep(env), map[string]any{"pattern": "needle"}},
		{NewFind(env), map[string]any{"pattern": "*"}},
		{NewLs(env), map[string]any{}},
		{NewWrite(env), map[string]any{"path": "new.txt", "content": "x"}},
	} {
		done := make(chan Result, 1)
		go func() { done <- runCtx(t, ctx, tc.tl, tc.args) }()
		select {
		case r := <-done:
			mustErr(t, r, "aborted")
		case <-time.After(hangGuard):
			t.Fatalf("%s hung", tc.tl.Spec().Name)
		}
	}
	if _, err := os.Stat(filepath.Join(env.Cwd, "new.txt")); err == nil {
		t.Fatal("cancelled write wrote")
	}
}

// TestHostileArguments throws malformed and extreme arguments at every
// tool without side effects outside its directory: each must answer with
// a result (error or not), never panic or hang.
func TestHostileArguments(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "f.txt"), "a\nb\n")
	inputs := []string{
		``, `null`, `[]`, `"str"`, `42`, `{`, `{}`,
		`{"path":null,"pattern":null,"command":null,"content":null,"edits":null}`,
		`{"path":["a"],"pattern":{"x":1},"command":[],"content":{},"edits":{}}`,
		`{"path":"f.txt","offset":1e308,"limit":1e308,"context":1e308,"timeout":-1e308}`,
		`{"path":"f.txt","offset":-1e308,"limit":-1e308,"context":-5}`,
		`{"path":"f.txt","offset":"NaN","limit":"Infinity"}`,
		`{"path":"\u0000","pattern":"\u0000","content":"x"}`,
		`{"path":"f.txt","edits":[null,1,"x",[],{"oldText":null,"newText":1}]}`,
		`{"path":"f.txt","edits":"not json ["}`,
		`{"path":"f.txt","edits":"[{\"oldText\":\"a\",\"newText\":\"b\"}"}`,
		`{"pattern":"(?P<x>a","path":"f.txt"}`,
		`{"pattern":"[","glob":"[","path":"."}`,
		`{"pattern":"{{{{","path":"."}`,
		`{"pattern":"a","glob":"{a,{b,","path":"."}`,
		`{"path":"` + strings.Repeat("a/", 3000) + `"}`,
		`{"command":"echo \u0000"}`,
	}
	for _, tl := range Builtins(env) {
		for _, in := range inputs {
			if tl.Spec().Name == "bash" && !strings.Contains(in, "command") {
				continue
			}
			done := make(chan Result, 1)
			go func() {
				done <- tl.Execute(context.Background(), Call{Name: tl.Spec().Name, Args: json.RawMessage(in)}, nil)
			}()
			select {
			case r := <-done:
				if len(r.Content) == 0 {
					t.Errorf("%s(%s): empty result", tl.Spec().Name, in)
				}
			case <-time.After(hangGuard):
				t.Fatalf("%s(%s) hung", tl.Spec().Name, in)
			}
		}
	}
}
