package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// testEnv is an Env rooted in a fresh temporary directory, with its own
// locks and the test process's PATH for bash.
func testEnv(t testing.TB) Env {
	t.Helper()
	return Env{
		Cwd:     t.TempDir(),
		Home:    t.TempDir(),
		TempDir: t.TempDir(),
		Locks:   &FileLocks{},
		Environ: []string{"PATH=" + os.Getenv("PATH")},
	}
}

func run(t testing.TB, tl Tool, args any) Result {
	t.Helper()
	return runCtx(t, context.Background(), tl, args)
}

func runCtx(t testing.TB, ctx context.Context, tl Tool, args any) Result {
	t.Helper()
	var raw json.RawMessage
	switch a := args.(type) {
	case string:
		raw = json.RawMessage(a)
	case json.RawMessage:
		raw = a
	default:
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	}
	return tl.Execute(ctx, Call{ID: "call_1", Name: tl.Spec().Name, Args: raw}, nil)
}

func textOf(r Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == llm.ContentText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func mustOK(t testing.TB, r Result) string {
	t.Helper()
	if r.IsError {
		t.Fatalf("unexpected error result: %s", textOf(r))
	}
	return textOf(r)
}

func mustErr(t testing.TB, r Result, contains ...string) string {
	t.Helper()
	if !r.IsError {
		t.Fatalf("expected an error result, got: %.500s", textOf(r))
	}
	s := textOf(r)
	for _, c := range contains {
		if !strings.Contains(s, c) {
			t.Fatalf("error %q does not contain %q", s, c)
		}
	}
	return s
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// numbered returns n lines "line 1" .. "line n", each ending in "\n".
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString("line ")
		b.WriteString(itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

func detailsJSON(t testing.TB, r Result) map[string]any {
	t.Helper()
	if r.Details == nil {
		return nil
	}
	b, err := json.Marshal(r.Details)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
