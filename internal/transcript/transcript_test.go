package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// ---- helpers ----------------------------------------------------------------

// clock returns a WithClock option that ticks one millisecond per call
// from a fixed start, so files are deterministic but ordered.
func clock() Option {
	var n atomic.Int64
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	return WithClock(func() time.Time { return start.Add(time.Duration(n.Add(1)) * time.Millisecond) })
}

func userMsg(text string) *llm.Message {
	return &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(text)}, Timestamp: 1700000000000}
}

func assistantMsg(text string, calls ...llm.Content) *llm.Message {
	m := &llm.Message{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "claude-x",
		StopReason: llm.StopStop, Timestamp: 1700000000001,
		Usage: llm.Usage{Input: 100, Output: 20, CacheRead: 5, TotalTokens: 125, Cost: llm.Cost{Input: 0.0003, Output: 0.0003, Total: 0.0006}}}
	if text != "" {
		m.Content = append(m.Content, llm.Text(text))
	}
	m.Content = append(m.Content, calls...)
	if len(calls) > 0 {
		m.StopReason = llm.StopToolUse
	}
	return m
}

func toolResult(id, text string, isErr bool) *llm.Message {
	return &llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "bash",
		Content: []llm.Content{llm.Text(text)}, IsError: isErr, Timestamp: 1700000000002}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// encodeAll renders entries as the lines they would be written as.
func encodeAll(t testing.TB, es []Entry) []string {
	t.Helper()
	out := make([]string, len(es))
	for i := range es {
		b, err := es[i].AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

func msgJSON(t testing.TB, ms []llm.Message) []string {
	t.Helper()
	out := make([]string, len(ms))
	for i := range ms {
		b, err := ms[i].AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

func roles(ms []llm.Message) string {
	var s []string
	for _, m := range ms {
		r := string(m.Role)
		if t := m.TextContent(); t != "" {
			r += ":" + t
		} else if m.Summary != "" {
			r += ":" + m.Summary
		}
		s = append(s, r)
	}
	return strings.Join(s, " | ")
}

// richSession writes a session using every entry type.
func richSession(t testing.TB, root string, opts ...Option) *File {
	t.Helper()
	f := must[*File](t)(Create(root, "/home/user/project", append([]Option{clock()}, opts...)...))
	s := must[string](t)
	s(f.AppendModelChange("anthropic", "claude-x"))
	s(f.AppendThinkingLevelChange(llm.ThinkingMedium))
	u1 := s(f.AppendMessage(userMsg("list the files")))
	s(f.AppendMessage(assistantMsg("Let me look.", llm.ToolCall("call_1", "bash", json.RawMessage(`{"command":"ls -la"}`)))))
	s(f.AppendMessage(toolResult("call_1", "a.txt\nb.txt", false)))
	s(f.AppendMessage(assistantMsg("Two files: a.txt and b.txt.")))
	s(f.AppendLabel(u1, "start"))
	s(f.AppendSessionInfo("  File listing  "))
	s(f.AppendCustom("my-ext", json.RawMessage(`{"count":1}`)))
	s(f.AppendCustomMessage("my-ext", []llm.Content{llm.Text("injected context")}, true, json.RawMessage(`{"k":"v"}`)))
	u2 := s(f.AppendMessage(userMsg("and the hidden ones?")))
	s(f.AppendMessage(assistantMsg("None.")))
	s(f.AppendCompaction("User listed files.", u2, 4321, json.RawMessage(`{"readFiles":[],"modifiedFiles":[]}`), false))
	exit := 0
	s(f.AppendMessage(&llm.Message{Role: llm.RoleBashExecution, Command: "echo hi", Output: "hi\n", ExitCode: &exit, Timestamp: 1700000000003}))
	s(f.AppendMessage(userMsg("thanks")))
	return f
}

// ---- round trip ---------------------------------------------------------------

func TestRoundTrip(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncMessages, SyncAlways, SyncNever} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			f := richSession(t, t.TempDir(), WithSync(policy))
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			g := must[*File](t)(Open(f.Path()))
			if w := g.Warnings(); len(w) > 0 {
				t.Fatalf("warnings: %v", w)
			}
			if !reflect.DeepEqual(encodeAll(t, f.Entries()), encodeAll(t, g.Entries())) {
				t.Fatal("entries differ after reopening")
			}
			if g.Header() != f.Header() || g.Leaf() != f.Leaf() || g.Name() != "File listing" {
				t.Fatalf("header %+v leaf %s name %q", g.Header(), g.Leaf(), g.Name())
			}
			if !reflect.DeepEqual(msgJSON(t, f.Context(f.Leaf()).Messages), msgJSON(t, g.Context(g.Leaf()).Messages)) {
				t.Fatal("context differs after reopening")
			}
			// The file is exactly header + one line per entry.
			data := must[[]byte](t)(os.ReadFile(f.Path()))
			hdr := f.Header()
			want := string(hdr.AppendJSON(nil)) + "\n" + strings.Join(encodeAll(t, f.Entries()), "\n") + "\n"
			if string(data) != want {
				t.Fatalf("file content:\n%s\nwant:\n%s", data, want)
			}
		})
	}
}

func TestCreateLayout(t *testing.T) {
	root := t.TempDir()
	f := must[*File](t)(Create(root, "/home/user/my project", WithClock(func() time.Time {
		return time.Date(2026, 11, 22, 8, 49, 39, 687_000_000, time.UTC)
	})))
	dir := filepath.Join(root, "--home-user-my project--")
	if filepath.Dir(f.Path()) != dir {
		t.Fatalf("dir %s, want %s", filepath.Dir(f.Path()), dir)
	}
	name := filepath.Base(f.Path())
	if !regexp.MustCompile(`^2026-11-22T08-49-39-687Z_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.jsonl$`).MatchString(name) {
		t.Fatalf("file name %s", name)
	}
	if !strings.Contains(name, f.ID()) || f.Header().Timestamp != "2026-11-22T08:49:39.687Z" {
		t.Fatalf("id %s header %+v", f.ID(), f.Header())
	}
	// Lazy: nothing on disk until the first append.
	if _, err := os.Stat(f.Path()); !os.IsNotExist(err) {
		t.Fatalf("file exists before the first append: %v", err)
	}
	id := must[string](t)(f.AppendMessage(userMsg("hi")))
	if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(id) {
		t.Fatalf("entry id %q", id)
	}
	fi := must[os.FileInfo](t)(os.Stat(f.Path()))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	for _, c := range []struct{ cwd, want string }{
		{"/", "----"},
		{`C:\Users\me\x`, "--C--Users-me-x--"},
		{"/a/b:c", "--a-b-c--"},
	} {
		if got := filepath.Base(SessionDir("/r", c.cwd)); got != c.want {
			t.Errorf("SessionDir(%q) = %q, want %q", c.cwd, got, c.want)
		}
	}
	if _, err := CreateAt(f.Path(), "/x"); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateAt over an existing file: %v", err)
	}
}

// ---- pi's own file -------------------------------------------------------------

const piExample = "testdata/pi-0.73.1-session.jsonl"

func TestPiExampleFile(t *testing.T) {
	data := must[[]byte](t)(os.ReadFile(piExample))
	f := must[*File](t)(Open(piExample))
	if w := f.Warnings(); len(w) > 0 {
		t.Fatalf("warnings: %v", w)
	}
	h := f.Header()
	if h.Version != 3 || h.ID != "01a20272-5f67-755b-8510-45d4da9d1e2f" || h.Cwd != "/home/user/project" {
		t.Fatalf("header %+v", h)
	}
	if f.Name() != "my test session" || f.Len() != 12 || f.Leaf() != "ddacdd0a" {
		t.Fatalf("name %q len %d leaf %s", f.Name(), f.Len(), f.Leaf())
	}

	// Every line re-encodes to the bytes pi wrote.
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if got := string(h.AppendJSON(nil)); got != lines[0] {
		t.Errorf("header:\n got %s\nwant %s", got, lines[0])
	}
	for i, got := range encodeAll(t, f.Entries()) {
		if got != lines[i+1] {
			t.Errorf("line %d:\n got %s\nwant %s", i+2, got, lines[i+1])
		}
	}

	// The compaction keeps everything from the first entry, so the context
	// is the summary followed by all eight messages.
	c := f.Context(f.Leaf())
	want := "compactionSummary:Hello from mock! You said: <conversation>\n\n</conversation>\n\nThe messages above are a co" +
		" | user:first long prompt | assistant:Hello from mock! You said: first long prompt" +
		" | user:steer message | assistant:Hello from mock! You said: steer message" +
		" | user:follow-up message | assistant:Hello from mock! You said: follow-up message" +
		" | user:prompt to abort | assistant:Hello fr"
	if got := roles(c.Messages); got != want {
		t.Fatalf("context:\n got %s\nwant %s", got, want)
	}
	if c.Messages[0].TokensBefore != 55 || c.Messages[0].Timestamp != 1795337385709 {
		t.Fatalf("summary message %+v", c.Messages[0])
	}
	if c.Provider != "mock" || c.ModelID != "mock-model" || c.ThinkingLevel != llm.ThinkingOff {
		t.Fatalf("model %s/%s thinking %s", c.Provider, c.ModelID, c.ThinkingLevel)
	}
	// Context before the compaction: no summary.
	if got := f.Context("d625a21a"); len(got.Messages) != 8 || got.Messages[0].Role != llm.RoleUser {
		t.Fatalf("context at session_info: %s", roles(got.Messages))
	}

	// Appending to a copy of pi's file leaves pi's bytes alone.
	p := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	g := must[*File](t)(Open(p))
	must[string](t)(g.AppendMessage(userMsg("more")))
	after := must[[]byte](t)(os.ReadFile(p))
	if !bytes.HasPrefix(after, data) {
		t.Fatal("append changed existing bytes")
	}
}

// ---- crash recovery ------------------------------------------------------------

func TestCrashRecovery(t *testing.T) {
	tests := []struct {
		name     string
		tail     func(lastLine []byte) []byte // what is left at the end of the file
		warnings int
		extra    int // entries recovered from the tail
	}{
		{"half line", func(l []byte) []byte { return l[:len(l)/2] }, 1, 0},
		{"half line, cut in a string escape", func([]byte) []byte {
			return []byte(`{"type":"message","id":"x","message":{"role":"user","content":"a\`)
		}, 1, 0},
		{"zeros from a crashed extent", func([]byte) []byte { return make([]byte, 300) }, 1, 0},
		{"garbage then newline", func([]byte) []byte { return []byte("{\"type\":\"mess\n") }, 1, 0},
		{"whole line without newline", func(l []byte) []byte { return l }, 0, 1},
		{"blank lines only", func([]byte) []byte { return []byte("\n\n  \n") }, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := richSession(t, t.TempDir())
			before := encodeAll(t, f.Entries())
			f.Close()

			// The next line agentd would have written, torn as the case says.
			extra := &Entry{Type: TypeMessage, ID: "feedf00d", ParentID: f.Leaf(), Timestamp: "2026-03-04T05:06:08.000Z", Message: userMsg("lost?")}
			line := must[[]byte](t)(extra.AppendJSON(nil))
			fd := must[*os.File](t)(os.OpenFile(f.Path(), os.O_WRONLY|os.O_APPEND, 0))
			must[int](t)(fd.Write(tc.tail(line)))
			fd.Close()

			g := must[*File](t)(Open(f.Path()))
			if len(g.Warnings()) != tc.warnings {
				t.Fatalf("warnings %v", g.Warnings())
			}
			if g.Len() != len(before)+tc.extra {
				t.Fatalf("%d entries, want %d", g.Len(), len(before)+tc.extra)
			}
			id := must[string](t)(g.AppendMessage(userMsg("after the crash")))
			g.Close()

			h := must[*File](t)(Open(f.Path(), WithStrict()))
			if w := h.Warnings(); len(w) > 0 {
				t.Fatalf("warnings after repair: %v", w)
			}
			got := encodeAll(t, h.Entries())
			if !reflect.DeepEqual(got[:len(before)], before) {
				t.Fatal("earlier entries changed")
			}
			if h.Leaf() != id || len(got) != len(before)+tc.extra+1 {
				t.Fatalf("leaf %s (want %s), %d entries", h.Leaf(), id, len(got))
			}
			data := must[[]byte](t)(os.ReadFile(f.Path()))
			if !bytes.HasSuffix(data, []byte("}\n")) || bytes.Contains(data, []byte("\n\n")) && tc.name != "blank lines only" {
				t.Fatalf("file not clean:\n%s", data)
			}
		})
	}
}

func TestOpenGarbage(t *testing.T) {
	good := richSession(t, t.TempDir())
	good.Close()
	data := must[[]byte](t)(os.ReadFile(good.Path()))
	lines := bytes.SplitAfter(data, []byte("\n"))

	t.Run("garbled middle line", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "s.jsonl")
		mid := append(append(append([]byte(nil), bytes.Join(lines[:4], nil)...), "{not json\n"...), bytes.Join(lines[4:], nil)...)
		os.WriteFile(p, mid, 0o600)
		f := must[*File](t)(Open(p))
		if w := f.Warnings(); len(w) != 1 || !strings.Contains(w[0], "line 5") {
			t.Fatalf("warnings %v", w)
		}
		if f.Len() != good.Len() {
			t.Fatalf("len %d", f.Len())
		}
		_, err := Open(p, WithStrict())
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "line 5") {
			t.Fatalf("strict: %v", err)
		}
	})
	for _, c := range []struct{ name, content string }{
		{"empty", ""},
		{"no header", string(bytes.Join(lines[1:], nil))},
		{"torn header", string(lines[0][:20])},
		{"header without id", `{"type":"session","version":3}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.jsonl")
			os.WriteFile(p, []byte(c.content), 0o600)
			if _, err := Open(p); !errors.Is(err, ErrNoHeader) {
				t.Fatalf("err %v", err)
			}
		})
	}
	t.Run("cycle", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "s.jsonl")
		os.WriteFile(p, []byte(string(lines[0])+
			`{"type":"label","id":"aaaaaaaa","parentId":"bbbbbbbb","timestamp":"x","targetId":"bbbbbbbb","label":"l"}`+"\n"+
			`{"type":"label","id":"bbbbbbbb","parentId":"aaaaaaaa","timestamp":"x","targetId":"aaaaaaaa","label":"l"}`+"\n"), 0o600)
		if _, err := Open(p); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("pi duplicate flush", func(t *testing.T) {
		// pi re-writes every line when it continues a file that had no
		// assistant message yet.
		p := filepath.Join(t.TempDir(), "s.jsonl")
		os.WriteFile(p, append(append([]byte(nil), data...), data...), 0o600)
		f := must[*File](t)(Open(p))
		if f.Len() != good.Len() || !reflect.DeepEqual(encodeAll(t, f.Entries()), encodeAll(t, good.Entries())) {
			t.Fatalf("len %d, want %d", f.Len(), good.Len())
		}
		if w := f.Warnings(); len(w) != 1 || !strings.Contains(w[0], "extra session header") {
			t.Fatalf("warnings %v", w)
		}
	})
}

// ---- concurrency ---------------------------------------------------------------

func TestConcurrentAppends(t *testing.T) {
	f := must[*File](t)(Create(t.TempDir(), "/w", WithSync(SyncNever)))
	const writers, each = 16, 40
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Readers run throughout; the race detector checks they never see a
	// half-inserted entry.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				leaf := f.Leaf()
				c := f.Context(leaf)
				if leaf != "" && len(c.Messages) == 0 {
					t.Error("empty context at a leaf")
					return
				}
				_ = f.Entries()
				_ = f.Children(leaf)
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	var writersWG sync.WaitGroup
	ids := make(chan string, writers*each)
	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for i := range each {
				var id string
				var err error
				switch i % 4 {
				case 0:
					id, err = f.AppendMessage(userMsg(fmt.Sprintf("w%d-%d", w, i)))
				case 1:
					id, err = f.AppendMessage(assistantMsg(fmt.Sprintf("a%d-%d", w, i)))
				case 2:
					id, err = f.AppendModelChange("p", fmt.Sprint(w))
				case 3:
					id, err = f.AppendLabel(f.Leaf(), "x")
				}
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		}()
	}
	writersWG.Wait()
	close(stop)
	wg.Wait()
	close(ids)
	f.Close()

	g := must[*File](t)(Open(f.Path(), WithStrict()))
	es := g.Entries()
	if len(es) != writers*each {
		t.Fatalf("%d entries", len(es))
	}
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	// Appends always go to the leaf, so the file is one chain in order.
	for i, e := range es {
		if !seen[e.ID] {
			t.Fatalf("entry %s not returned by any append", e.ID)
		}
		want := ""
		if i > 0 {
			want = es[i-1].ID
		}
		if e.ParentID != want {
			t.Fatalf("entry %d parent %s, want %s", i, e.ParentID, want)
		}
	}
	if len(seen) != len(es) {
		t.Fatalf("%d distinct ids for %d entries", len(seen), len(es))
	}
}

// ---- tree ---------------------------------------------------------------------

func TestBranching(t *testing.T) {
	f := must[*File](t)(Create(t.TempDir(), "/w", clock()))
	s := must[string](t)
	u1 := s(f.AppendMessage(userMsg("q1")))
	a1 := s(f.AppendMessage(assistantMsg("a1")))
	u2 := s(f.AppendMessage(userMsg("q2 first try")))
	a2 := s(f.AppendMessage(assistantMsg("a2")))

	// Edit q2: back to a1, new branch.
	if err := f.SetLeaf(a1); err != nil {
		t.Fatal(err)
	}
	bs := s(f.BranchWithSummary(a1, "tried q2, got a2", nil, false))
	u2b := s(f.AppendMessage(userMsg("q2 second try")))
	a2b := s(f.AppendMessage(assistantMsg("a2b")))

	// A new root.
	if err := f.SetLeaf(""); err != nil {
		t.Fatal(err)
	}
	r2 := s(f.AppendMessage(userMsg("other root")))

	if err := f.SetLeaf("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetLeaf unknown: %v", err)
	}

	tests := []struct {
		leaf, want string
	}{
		{a2, "user:q1 | assistant:a1 | user:q2 first try | assistant:a2"},
		{a2b, "user:q1 | assistant:a1 | branchSummary:tried q2, got a2 | user:q2 second try | assistant:a2b"},
		{u2, "user:q1 | assistant:a1 | user:q2 first try"},
		{r2, "user:other root"},
		{"", ""},
		{"unknown-id", "user:other root"}, // pi falls back to the last entry
	}
	for _, tc := range tests {
		if got := roles(f.Context(tc.leaf).Messages); got != tc.want {
			t.Errorf("Context(%q) = %s, want %s", tc.leaf, got, tc.want)
		}
	}
	kids := f.Children(a1)
	if len(kids) != 2 || kids[0].ID != u2 || kids[1].ID != bs {
		t.Fatalf("children of a1: %v", kids)
	}
	if roots := f.Children(""); len(roots) != 2 || roots[0].ID != u1 || roots[1].ID != r2 {
		t.Fatalf("roots: %v", roots)
	}
	if br := f.Branch(u2b); len(br) != 4 || br[0].ID != u1 || br[2].ID != bs {
		t.Fatalf("branch: %v", br)
	}
	bse, _ := f.Entry(bs)
	if bse.FromID != a1 || bse.ParentID != a1 {
		t.Fatalf("branch summary %+v", bse)
	}
	rootSummary := s(f.BranchWithSummary("", "from scratch", nil, true))
	if e, _ := f.Entry(rootSummary); e.FromID != "root" || e.ParentID != "" || !e.FromHook {
		t.Fatalf("root branch summary %+v", e)
	}

	f.Close()
	g := must[*File](t)(Open(f.Path()))
	if g.Leaf() != rootSummary {
		t.Fatalf("reopened leaf %s, want the last entry", g.Leaf())
	}
	if got := roles(g.Context(a2b).Messages); got != tests[1].want {
		t.Fatalf("reopened context %s", got)
	}
}

func TestContextRules(t *testing.T) {
	type step struct {
		kind, text string
		ref        int // index of an earlier step (firstKept / label target / branch point)
	}
	tests := []struct {
		name                  string
		steps                 []step
		want                  string
		thinking, provider, m string
	}{
		{
			name:  "plain",
			steps: []step{{"user", "a", 0}, {"assistant", "b", 0}},
			want:  "user:a | assistant:b", thinking: "off", provider: "anthropic", m: "claude-x",
		},
		{
			name: "compaction keeps from firstKept",
			steps: []step{{"user", "a", 0}, {"assistant", "b", 0}, {"user", "c", 0}, {"assistant", "d", 0},
				{"compact", "S", 2}, {"user", "e", 0}},
			want: "compactionSummary:S | user:c | assistant:d | user:e", thinking: "off", provider: "anthropic", m: "claude-x",
		},
		{
			name:  "compaction with unknown firstKept keeps nothing before it",
			steps: []step{{"user", "a", 0}, {"assistant", "b", 0}, {"compact", "S", -1}, {"user", "e", 0}},
			want:  "compactionSummary:S | user:e", thinking: "off", provider: "anthropic", m: "claude-x",
		},
		{
			name: "latest compaction wins",
			steps: []step{{"user", "a", 0}, {"assistant", "b", 0}, {"compact", "S1", 0}, {"user", "c", 0},
				{"assistant", "d", 0}, {"compact", "S2", 3}, {"user", "e", 0}},
			want: "compactionSummary:S2 | user:c | assistant:d | user:e", thinking: "off", provider: "anthropic", m: "claude-x",
		},
		{
			name: "settings before a compaction still apply; non-message entries skipped",
			steps: []step{{"thinking", "high", 0}, {"model", "openai/gpt-5", 0}, {"user", "a", 0}, {"label", "L", 2},
				{"custom", "state", 0}, {"info", "name", 0}, {"compact", "S", 2}, {"custom_message", "ext", 0}},
			want: "compactionSummary:S | user:a | custom:ext", thinking: "high", provider: "openai", m: "gpt-5",
		},
		{
			name:  "assistant after model change sets the model",
			steps: []step{{"model", "openai/gpt-5", 0}, {"user", "a", 0}, {"assistant", "b", 0}},
			want:  "user:a | assistant:b", thinking: "off", provider: "anthropic", m: "claude-x",
		},
		{
			name:  "empty branch summary is not a message",
			steps: []step{{"user", "a", 0}, {"branch", "", 0}, {"branch", "B", 0}},
			want:  "user:a | branchSummary:B", thinking: "off",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := must[*File](t)(Create(t.TempDir(), "/w", clock(), WithSync(SyncNever)))
			var ids []string
			for _, st := range tc.steps {
				ref := ""
				if st.ref >= 0 && st.ref < len(ids) {
					ref = ids[st.ref]
				} else if st.ref < 0 {
					ref = "00000000"
				}
				var id string
				var err error
				switch st.kind {
				case "user":
					id, err = f.AppendMessage(userMsg(st.text))
				case "assistant":
					id, err = f.AppendMessage(assistantMsg(st.text))
				case "compact":
					id, err = f.AppendCompaction(st.text, ref, 100, nil, false)
				case "thinking":
					id, err = f.AppendThinkingLevelChange(llm.ThinkingLevel(st.text))
				case "model":
					p, m, _ := strings.Cut(st.text, "/")
					id, err = f.AppendModelChange(p, m)
				case "label":
					id, err = f.AppendLabel(ref, st.text)
				case "custom":
					id, err = f.AppendCustom(st.text, nil)
				case "info":
					id, err = f.AppendSessionInfo(st.text)
				case "custom_message":
					id, err = f.AppendCustomMessage("x", []llm.Content{llm.Text(st.text)}, true, nil)
				case "branch":
					id, err = f.BranchWithSummary(f.Leaf(), st.text, nil, false)
				}
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			c := f.Context(f.Leaf())
			if got := roles(c.Messages); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if string(c.ThinkingLevel) != tc.thinking || c.Provider != tc.provider || c.ModelID != tc.m {
				t.Fatalf("settings %s %s/%s", c.ThinkingLevel, c.Provider, c.ModelID)
			}
		})
	}
}

// ---- fork and clone -------------------------------------------------------------

func TestForkAndClone(t *testing.T) {
	root := t.TempDir()
	src := richSession(t, root)
	entries := src.Entries()
	var users []Entry
	for _, e := range entries {
		if e.Type == TypeMessage && e.Message.Role == llm.RoleUser {
			users = append(users, e)
		}
	}

	t.Run("fork before the second user message", func(t *testing.T) {
		fk, text, err := src.Fork(users[1].ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if text != "and the hidden ones?" {
			t.Fatalf("text %q", text)
		}
		if fk.ParentSession() != src.Path() || fk.Cwd() != src.Cwd() || fk.ID() == src.ID() {
			t.Fatalf("header %+v", fk.Header())
		}
		if filepath.Dir(fk.Path()) != filepath.Dir(src.Path()) {
			t.Fatalf("fork in %s", fk.Path())
		}
		// The path up to the custom message, labels moved to the end.
		var want []string
		for _, e := range src.Branch(users[1].ParentID) {
			if e.Type != TypeLabel {
				b, _ := e.AppendJSON(nil)
				want = append(want, string(b))
			}
		}
		got := encodeAll(t, fk.Entries())
		if !reflect.DeepEqual(got[:len(want)], want) {
			t.Fatalf("forked entries differ:\n%s", strings.Join(got, "\n"))
		}
		lbl := fk.Entries()[len(want)]
		if len(got) != len(want)+1 || lbl.Type != TypeLabel || lbl.TargetID != users[0].ID || lbl.Label != "start" {
			t.Fatalf("label entries: %v", got[len(want):])
		}
		if fk.Label(users[0].ID) != "start" || fk.Leaf() != lbl.ID {
			t.Fatal("label not re-created")
		}
		// On disk, and independent of the source.
		re := must[*File](t)(Open(fk.Path(), WithStrict()))
		if !reflect.DeepEqual(encodeAll(t, re.Entries()), got) || re.ParentSession() != src.Path() {
			t.Fatal("fork on disk differs")
		}
		n := src.Len()
		must[string](t)(fk.AppendMessage(userMsg("edited question")))
		if src.Len() != n {
			t.Fatal("appending to the fork changed the source")
		}
		if c := fk.Context(fk.Leaf()); roles(c.Messages[len(c.Messages)-1:]) != "user:edited question" {
			t.Fatalf("fork context %s", roles(c.Messages))
		}
	})

	t.Run("fork before the first user message", func(t *testing.T) {
		other := t.TempDir()
		fk, text, err := src.Fork(users[0].ID, other)
		if err != nil || text != "list the files" {
			t.Fatal(err, text)
		}
		// model_change and thinking_level_change come before it.
		if fk.Len() != 2 || filepath.Dir(fk.Path()) != SessionDir(other, src.Cwd()) {
			t.Fatalf("%d entries at %s", fk.Len(), fk.Path())
		}
	})

	t.Run("fork at a root user message gives an empty session", func(t *testing.T) {
		f := must[*File](t)(Create(root, "/w"))
		u := must[string](t)(f.AppendMessage(userMsg("root q")))
		fk, text, err := f.Fork(u, "")
		if err != nil || text != "root q" || fk.Len() != 0 || fk.ParentSession() != f.Path() {
			t.Fatal(err, text, fk.Len())
		}
		if _, err := os.Stat(fk.Path()); !os.IsNotExist(err) {
			t.Fatal("empty fork written eagerly")
		}
	})

	t.Run("fork refuses non-user entries", func(t *testing.T) {
		if _, _, err := src.Fork(entries[0].ID, ""); !errors.Is(err, ErrNotUser) {
			t.Fatal(err)
		}
		if _, _, err := src.Fork("zzzzzzzz", ""); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	})

	t.Run("clone", func(t *testing.T) {
		other := t.TempDir()
		cl, err := src.Clone(other)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(cl.Path()) != SessionDir(other, src.Cwd()) || cl.ParentSession() != src.Path() {
			t.Fatalf("clone at %s parent %s", cl.Path(), cl.ParentSession())
		}
		if !reflect.DeepEqual(msgJSON(t, cl.Context(cl.Leaf()).Messages), msgJSON(t, src.Context(src.Leaf()).Messages)) {
			t.Fatal("clone context differs")
		}
		if cl.Name() != "File listing" || cl.Label(users[0].ID) != "start" {
			t.Fatalf("name %q", cl.Name())
		}
		must[string](t)(cl.AppendSessionInfo("clone"))
		if src.Name() != "File listing" {
			t.Fatal("clone not independent")
		}
	})
}

// ---- migration --------------------------------------------------------------------

func copyFixture(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, must[[]byte](t)(os.ReadFile(filepath.Join("testdata", name))), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMigrateV1(t *testing.T) {
	p := copyFixture(t, "v1-session.jsonl")
	orig := must[[]byte](t)(os.ReadFile(p))
	f := must[*File](t)(Open(p))
	if f.Header().Version != 3 {
		t.Fatalf("version %d", f.Header().Version)
	}
	es := f.Entries()
	if len(es) != 9 {
		t.Fatalf("%d entries", len(es))
	}
	for i, e := range es {
		if len(e.ID) != 8 || (i == 0) != (e.ParentID == "") || i > 0 && e.ParentID != es[i-1].ID {
			t.Fatalf("entry %d: id %q parent %q", i, e.ID, e.ParentID)
		}
	}
	// firstKeptEntryIndex 4 is the line of "second question".
	if es[5].Type != TypeCompaction || es[5].FirstKeptEntryID != es[3].ID {
		t.Fatalf("compaction %+v", es[5])
	}
	if !es[8].Opaque() || !bytes.Contains(es[8].Raw(), []byte(`"payload":{"x":1},"id":"`+es[8].ID+`","parentId":"`+es[7].ID+`"}`)) {
		t.Fatalf("unknown v1 entry %s", es[8].Raw())
	}
	c := f.Context(f.Leaf())
	if got := roles(c.Messages); got != "compactionSummary:The user asked two questions. | user:second question | assistant:second answer | user:third question" {
		t.Fatalf("context %s", got)
	}
	if c.ThinkingLevel != llm.ThinkingHigh || c.Provider != "anthropic" {
		t.Fatalf("settings %+v", c)
	}
	// Open did not touch the file.
	if !bytes.Equal(must[[]byte](t)(os.ReadFile(p)), orig) {
		t.Fatal("Open rewrote the file")
	}
	// The first append rewrites it as v3 with the ids shown above.
	must[string](t)(f.AppendMessage(userMsg("fourth")))
	g := must[*File](t)(Open(p, WithStrict()))
	if w := g.Warnings(); len(w) != 0 || g.Header().Version != 3 || g.ID() != f.ID() {
		t.Fatalf("after rewrite: %v %+v", w, g.Header())
	}
	if !reflect.DeepEqual(encodeAll(t, g.Entries()), encodeAll(t, f.Entries())) {
		t.Fatal("rewritten file differs from memory")
	}
	if !bytes.HasPrefix(must[[]byte](t)(os.ReadFile(p)), []byte(`{"type":"session","version":3,"id":"0196f0aa-0000-7000-8000-000000000001"`)) {
		t.Fatal("header not rewritten")
	}
	if ms, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*tmp*")); len(ms) > 0 {
		t.Fatalf("temporary files left: %v", ms)
	}
}

func TestMigrateV2(t *testing.T) {
	p := copyFixture(t, "v2-session.jsonl")
	f := must[*File](t)(Open(p))
	c := f.Context(f.Leaf())
	if got := roles(c.Messages); got != "user:hello | custom:injected by a hook | custom:extension says hi | assistant:hi" {
		t.Fatalf("context %s", got)
	}
	if m := c.Messages[1]; m.CustomType != "my-hook" || !m.Display {
		t.Fatalf("hook message %+v", m)
	}
	if m := c.Messages[2]; m.Display || m.Timestamp != 1756720803000 {
		t.Fatalf("custom message %+v", m)
	}
	must[string](t)(f.AppendSessionInfo("migrated"))
	data := string(must[[]byte](t)(os.ReadFile(p)))
	if strings.Contains(data, "hookMessage") || !strings.Contains(data, `"role":"custom","customType":"my-hook","content":[{"type":"text","text":"injected by a hook"}]`) {
		t.Fatalf("rewritten file:\n%s", data)
	}
	// custom_message content stays a string.
	if !strings.Contains(data, `{"type":"custom_message","customType":"my-ext","content":"extension says hi","display":false,"id":"a1000003"`) {
		t.Fatalf("custom_message re-encoded differently:\n%s", data)
	}
}

// ---- unknown entries --------------------------------------------------------------

func TestUnknownEntriesPreserved(t *testing.T) {
	f := richSession(t, t.TempDir())
	f.Close()
	leaf := f.Leaf()
	unknown := []string{
		`{"type":"future_thing","id":"f0000001","parentId":"` + leaf + `","timestamp":"2026-03-04T05:06:07.900Z","payload":{"nested":[1,2,{"a":"<b>"}]},"extra":"\u2028"}`,
		// A known type whose body agentd cannot represent.
		`{"type":"message","id":"f0000002","parentId":"f0000001","timestamp":"2026-03-04T05:06:07.901Z","message":{"role":"user","content":[{"type":"audio","data":"AAA="}],"timestamp":1}}`,
		`{"type":"compaction","id":"f0000003","parentId":"f0000002","timestamp":"2026-03-04T05:06:07.902Z","summary":["not","a","string"],"firstKeptEntryId":"x","tokensBefore":1}`,
	}
	fd := must[*os.File](t)(os.OpenFile(f.Path(), os.O_WRONLY|os.O_APPEND, 0))
	fd.WriteString(strings.Join(unknown, "\n") + "\n")
	fd.Close()

	g := must[*File](t)(Open(f.Path(), WithStrict()))
	if len(g.Warnings()) != 2 {
		t.Fatalf("warnings %v", g.Warnings())
	}
	es := g.Entries()
	tail := es[len(es)-3:]
	for i, e := range tail {
		if !e.Opaque() || string(e.Raw()) != unknown[i] {
			t.Fatalf("entry %d: opaque=%v raw %s", i, e.Opaque(), e.Raw())
		}
	}
	if tail[0].Type != "future_thing" || tail[1].ParentID != "f0000001" || g.Leaf() != "f0000003" {
		t.Fatalf("envelope %+v", tail[0])
	}
	// Opaque entries contribute nothing, not even the compaction.
	if got := roles(g.Context(g.Leaf()).Messages); !strings.HasPrefix(got, "compactionSummary:User listed files.") {
		t.Fatalf("context %s", got)
	}
	// Appending keeps them byte for byte; a clone copies them verbatim.
	must[string](t)(g.AppendMessage(userMsg("next")))
	cl := must[*File](t)(g.Clone(""))
	for _, p := range []string{g.Path(), cl.Path()} {
		data := string(must[[]byte](t)(os.ReadFile(p)))
		for _, u := range unknown {
			if !strings.Contains(data, u+"\n") {
				t.Fatalf("%s lost %s", p, u)
			}
		}
	}
}

// ---- listing --------------------------------------------------------------------

func TestList(t *testing.T) {
	root := t.TempDir()
	at := func(ms int64) Option {
		return WithClock(func() time.Time { return time.UnixMilli(ms).UTC() })
	}
	a := must[*File](t)(Create(root, "/proj/a", at(1_000_000)))
	must[string](t)(a.AppendModelChange("p", "m"))
	must[string](t)(a.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("first"), llm.Image("AAAA", "image/png"), llm.Text("prompt")}, Timestamp: 5_000_000}))
	must[string](t)(a.AppendMessage(&llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("ok")}, Timestamp: 6_000_000, Provider: "p", Model: "m"}))
	must[string](t)(a.AppendSessionInfo("Alpha"))
	must[string](t)(a.AppendMessage(toolResult("c", "x", false)))

	b := must[*File](t)(Create(root, "/proj/b", at(2_000_000)))
	must[string](t)(b.AppendModelChange("p", "m")) // no messages: modified = created
	c := must[*File](t)(Create(root, "/proj/a", at(3_000_000)))
	must[string](t)(c.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(`say "hi" \ ok`)}, Timestamp: 9_000_000}))
	must[string](t)(c.AppendSessionInfo("Gamma"))
	must[string](t)(c.AppendSessionInfo(""))
	// Not sessions: skipped.
	os.WriteFile(filepath.Join(filepath.Dir(a.Path()), "junk.jsonl"), []byte("{\"type\":\"message\"}\n"), 0o600)
	os.WriteFile(filepath.Join(filepath.Dir(a.Path()), "notes.txt"), []byte("x"), 0o600)
	// A torn tail still lists.
	fd := must[*os.File](t)(os.OpenFile(c.Path(), os.O_WRONLY|os.O_APPEND, 0))
	fd.WriteString(`{"type":"message","id":"x","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"zz`)
	fd.Close()

	infos := must[[]Info](t)(List(SessionDir(root, "/proj/a")))
	if len(infos) != 2 {
		t.Fatalf("%d infos: %+v", len(infos), infos)
	}
	ic, ia := infos[0], infos[1]
	if ic.ID != c.ID() || ic.Name != "" || ic.MessageCount != 1 || ic.FirstMessage != `say "hi" \ ok` || ic.Modified.UnixMilli() != 9_000_000 || ic.Path != c.Path() {
		t.Fatalf("c: %+v", ic)
	}
	if ia.ID != a.ID() || ia.Name != "Alpha" || ia.MessageCount != 3 || ia.FirstMessage != "first prompt" ||
		ia.Cwd != "/proj/a" || ia.Created.UnixMilli() != 1_000_000 || ia.Modified.UnixMilli() != 6_000_000 {
		t.Fatalf("a: %+v", ia)
	}
	all := must[[]Info](t)(ListAll(root))
	if len(all) != 3 || all[0].ID != c.ID() || all[1].ID != a.ID() || all[2].ID != b.ID() || all[2].Modified.UnixMilli() != 2_000_000 {
		t.Fatalf("all: %+v", all)
	}
	if got, err := List(filepath.Join(root, "missing")); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	// The pi example.
	pi := must[Info](t)(ReadInfo(piExample))
	if pi.Name != "my test session" || pi.MessageCount != 8 || pi.FirstMessage != "first long prompt" || pi.Modified.UnixMilli() != 1795337383888 {
		t.Fatalf("pi: %+v", pi)
	}
}

func TestScanner(t *testing.T) {
	good := []string{`{}`, `{"a":1}`, ` { "a" : [1, {"b":"}"}], "c":"\\\"" } `, `{"a":"\\"}`, `{"a":null,"b":true}`}
	bad := []string{``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}x`, `{"a":"x}`, `[1]`, `{"a":1} x`, `{"a":"\"}`}
	for _, s := range good {
		if err := eachField([]byte(s), func(k, v []byte) {}); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range bad {
		if err := eachField([]byte(s), func(k, v []byte) {}); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}

// ---- HTML ------------------------------------------------------------------------

func TestExportHTML(t *testing.T) {
	f := richSession(t, t.TempDir())
	evil := `<script>alert(1)</script> "><img src=x onerror=alert(2)>`
	s := must[string](t)
	s(f.AppendMessage(userMsg(evil)))
	s(f.AppendMessage(&llm.Message{Role: llm.RoleAssistant, Provider: "p<", Model: "m>", StopReason: llm.StopError, ErrorMessage: evil,
		Content: []llm.Content{
			{Type: llm.ContentThinking, Thinking: "thinking " + evil},
			llm.Text("answer " + evil),
			llm.ToolCall("c1", "bash", json.RawMessage(`{"command":"echo '</pre><script>x</script>'"}`)),
		}}))
	s(f.AppendMessage(&llm.Message{Role: llm.RoleToolResult, ToolName: evil, IsError: true,
		Content: []llm.Content{llm.Text(evil), llm.Image("iVBORw0KGgo=", "image/png"), llm.Image(`x" onerror="alert(3)`, "image/png"), llm.Image("PHN2Zz4=", "image/svg+xml")}}))
	s(f.AppendSessionInfo(evil))
	s(f.AppendLabel(f.Leaf(), evil))

	var buf bytes.Buffer
	if err := ExportHTML(&buf, f, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, bad := range []string{"<script", "<img src=x", `"><img`, "onerror=\"alert", "javascript:", "svg+xml;base64"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q", bad)
		}
	}
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		"&#34;&gt;&lt;img src=x onerror=alert(2)&gt;",
		`<img src="data:image/png;base64,iVBORw0KGgo="`,
		"<details class=\"thinking\"><summary>Thinking</summary>",
		"&lt;/pre&gt;&lt;script&gt;x&lt;/script&gt;",
		"entry tool err",
		"$ echo hi",
		"Compaction",
		"User listed files.",
		"Model: anthropic/claude-x",
		"Thinking level: medium",
		f.ID(),
		"/home/user/project",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "http://") || strings.Contains(out, "https://") || strings.Contains(out, "<link") {
		t.Error("external resource referenced")
	}
	if testing.Verbose() {
		os.WriteFile(filepath.Join(t.TempDir(), "export.html"), buf.Bytes(), 0o600)
	}
}

// ---- fuzz --------------------------------------------------------------------------

// FuzzParseLine checks that the line decoder never panics and that what it
// accepts re-encodes to a line that decodes to the same thing.
func FuzzParseLine(f *testing.F) {
	for _, name := range []string{piExample, "testdata/v1-session.jsonl", "testdata/v2-session.jsonl"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			f.Add(line)
		}
	}
	f.Add([]byte(`{"type":"label","id":"a","parentId":null,"timestamp":"t","targetId":"b"}`))
	f.Add([]byte(`{"type":"custom_message","customType":"x","content":"s","display":true,"id":"a","parentId":"b","timestamp":"t"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := parseLine(line)
		if err != nil {
			return
		}
		if p.header != nil {
			b := p.header.AppendJSON(nil)
			q, err := parseLine(b)
			if err != nil || q.header == nil || *q.header != *p.header {
				t.Fatalf("header %s does not round-trip: %v", b, err)
			}
			return
		}
		b, err := p.entry.AppendJSON(nil)
		if err != nil {
			return // e.g. a message whose content agentd cannot encode
		}
		q, err := parseLine(b)
		if err != nil {
			t.Fatalf("re-encoded %s does not parse: %v", b, err)
		}
		b2, err := q.entry.AppendJSON(nil)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("not stable:\n%s\n%s", b, b2)
		}
	})
}

// ---- benchmarks ---------------------------------------------------------------------

func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		name   string
		policy SyncPolicy
	}{{"never", SyncNever}, {"messages", SyncMessages}, {"always", SyncAlways}} {
		b.Run(c.name, func(b *testing.B) {
			f := must[*File](b)(Create(b.TempDir(), "/w", WithSync(c.policy)))
			m := assistantMsg("A typical answer of a few hundred bytes. " + strings.Repeat("lorem ipsum ", 30))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := f.AppendMessage(m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			f.Close()
		})
	}
}

func BenchmarkOpen10k(b *testing.B) {
	f := must[*File](b)(Create(b.TempDir(), "/w", WithSync(SyncNever)))
	for i := range 10_000 {
		var err error
		switch i % 3 {
		case 0:
			_, err = f.AppendMessage(userMsg(fmt.Sprintf("question %d: %s", i, strings.Repeat("words ", 20))))
		case 1:
			_, err = f.AppendMessage(assistantMsg("Let me run it.", llm.ToolCall(fmt.Sprint("call_", i), "bash", json.RawMessage(`{"command":"go test ./..."}`))))
		case 2:
			_, err = f.AppendMessage(toolResult(fmt.Sprint("call_", i-1), strings.Repeat("ok  \tgithub.com/x/y\t0.01s\n", 20), false))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	fi, _ := os.Stat(f.Path())
	b.Run("Open", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := Open(f.Path()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/entry")
	})
	b.Run("ReadInfo", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := ReadInfo(f.Path()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/entry")
	})
}

// FuzzFastDecode checks the fast decoder against the reference path
// (encoding/json and llm's UnmarshalJSON): for any line, both must accept
// or reject it alike and produce identical entries.
func FuzzFastDecode(f *testing.F) {
	for _, name := range []string{piExample, "testdata/v1-session.jsonl", "testdata/v2-session.jsonl"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			f.Add(line)
		}
	}
	for _, s := range []string{
		`{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"caf\u00e9 \ud83d\ude80 \ud800 x\"y\\z\/","timestamp":1}}`,
		`{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{"type":"text","text":"a\nb\tc"}],"details":{"x":[1,2.5e3,-0]},"isError":true,"timestamp":1}}`,
		`{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"bashExecution","command":"ls","output":"","exitCode":-1,"cancelled":false,"truncated":true,"fullOutputPath":"/x","excludeFromContext":true,"timestamp":1}}`,
		`{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"assistant","content":[{"type":"thinking","thinking":"h","thinkingSignature":"s","redacted":true},{"type":"toolCall","id":"i","name":"n","arguments":null}],"usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"totalTokens":10,"cost":{"input":1e-7,"output":0.5,"cacheRead":0,"cacheWrite":0,"total":0.5000001}},"stopReason":"toolUse","timestamp":1}}`,
		`{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"user","content":[1,tru]}}`,
		`{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"user","content":null,"timestamp":1.5}}`,
		`{"type":"compaction","id":"a","parentId":"b","timestamp":"t","summary":"s","firstKeptEntryId":"k","tokensBefore":1e3,"details":null,"fromHook":true}`,
		`{"type":"label","id":"a","parentId":"b","timestamp":"t","targetId":"x","label":null}`,
		`{"type":"session","version":3.5,"id":"x","timestamp":"t","cwd":"/"}`,
		"{\"type\":\"custom\",\"customType\":\"x\",\"data\":[01],\"id\":\"a\",\"parentId\":null,\"timestamp\":\"t\"}",
		"{\"type\":\"session_info\",\"id\":\"a\",\"parentId\":null,\"timestamp\":\"t\",\"name\":\"\xff\xfe tab\there\"}",
		`{"Type":"session_info","id":"a"}`,
		`{"type":"session_info","id":"a","id":"b"} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ferr := parseLineWith(line, new(interner), true)
		ref, rerr := parseLineWith(line, nil, false)
		if (ferr == nil) != (rerr == nil) {
			t.Fatalf("fast err %v, reference err %v", ferr, rerr)
		}
		if (fast.bodyErr == nil) != (ref.bodyErr == nil) {
			t.Fatalf("fast body err %v, reference body err %v", fast.bodyErr, ref.bodyErr)
		}
		fast.bodyErr, ref.bodyErr = nil, nil
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("fast and reference decoders differ:\n%#v\n%#v", fast.entry, ref.entry)
		}
	})
}

func TestAppendRejects(t *testing.T) {
	f := must[*File](t)(Create(t.TempDir(), "/w", clock()))
	u := must[string](t)(f.AppendMessage(userMsg("q")))
	before := must[[]byte](t)(os.ReadFile(f.Path()))
	badArgs := assistantMsg("", llm.Content{Type: llm.ContentToolCall, ID: "c", Name: "bash", Arguments: json.RawMessage(`{"command":"ls`)})
	for name, call := range map[string]func() (string, error){
		"invalid tool arguments":  func() (string, error) { return f.AppendMessage(badArgs) },
		"invalid details":         func() (string, error) { return f.AppendCompaction("s", u, 1, json.RawMessage(`{`), false) },
		"invalid data":            func() (string, error) { return f.AppendCustom("x", json.RawMessage(`nope`)) },
		"summary as a message":    func() (string, error) { return f.AppendMessage(&llm.Message{Role: llm.RoleCompactionSummary}) },
		"unknown role":            func() (string, error) { return f.AppendMessage(&llm.Message{Role: "wizard"}) },
		"label on unknown target": func() (string, error) { return f.AppendLabel("nope", "x") },
		"branch from unknown":     func() (string, error) { return f.BranchWithSummary("nope", "s", nil, false) },
	} {
		if id, err := call(); err == nil {
			t.Errorf("%s: accepted as %s", name, id)
		}
	}
	if after := must[[]byte](t)(os.ReadFile(f.Path())); !bytes.Equal(before, after) || f.Leaf() != u || f.Len() != 1 {
		t.Fatal("a rejected append changed the session")
	}
	f.Close()
	if _, err := f.AppendMessage(userMsg("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	if got := roles(f.Context(f.Leaf()).Messages); got != "user:q" {
		t.Fatalf("closed file not readable: %s", got)
	}
}

// TestFailedWriteIsCutOff simulates a write that failed half way (disk
// full): the next append must cut the fragment off before writing.
func TestFailedWriteIsCutOff(t *testing.T) {
	f := must[*File](t)(Create(t.TempDir(), "/w", clock()))
	must[string](t)(f.AppendMessage(userMsg("q")))
	f.wmu.Lock()
	must[int](t)(f.fd.Write([]byte(`{"type":"message","id":"dead`)))
	f.truncate = true // what write does when Write returns n > 0 and an error
	f.wmu.Unlock()
	must[string](t)(f.AppendMessage(assistantMsg("a")))
	g := must[*File](t)(Open(f.Path(), WithStrict()))
	if len(g.Warnings()) != 0 || roles(g.Context(g.Leaf()).Messages) != "user:q | assistant:a" {
		t.Fatalf("warnings %v, context %s", g.Warnings(), roles(g.Context(g.Leaf()).Messages))
	}
}

func TestParallelParseMatchesSequential(t *testing.T) {
	defer func(c, p int) { parallelChunk = c; runtime.GOMAXPROCS(p) }(parallelChunk, runtime.GOMAXPROCS(4))
	f := richSession(t, t.TempDir(), WithSync(SyncNever))
	for i := range 200 {
		must[string](t)(f.AppendMessage(userMsg(fmt.Sprint("message ", i))))
	}
	f.Close()
	data := must[[]byte](t)(os.ReadFile(f.Path()))
	lines := bytes.SplitAfter(data, []byte("\n"))
	// Garbage in the middle, blank lines, and a torn tail.
	var b []byte
	for i, l := range lines {
		b = append(b, l...)
		if i == 100 {
			b = append(b, "{garbage\n\n   \n"...)
		}
	}
	b = append(b, `{"type":"message","id":"torn`...)
	for _, chunk := range []int{100, 1000, 4000} {
		parallelChunk = chunk
		r1, b1 := parseLines(b)
		r2, b2 := parseChunk(b, 0, 0)
		if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(b1, b2) {
			t.Fatalf("chunk %d: parallel parse differs (%d/%d records, %v / %v)", chunk, len(r1), len(r2), b1, b2)
		}
	}
	if p := filepath.Join(t.TempDir(), "s.jsonl"); os.WriteFile(p, b, 0o600) == nil {
		g := must[*File](t)(Open(p))
		if w := g.Warnings(); len(w) != 2 || !strings.HasPrefix(w[0], "line 102:") || !strings.Contains(w[1], "torn") {
			t.Fatalf("warnings %v", w)
		}
	}
}

func TestCreateAtAndLabels(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "mine.jsonl")
	f := must[*File](t)(CreateAt(p, "/w", WithParentSession("/old.jsonl"), WithSync(SyncNever), clock()))
	if f.Path() != p || f.ParentSession() != "/old.jsonl" {
		t.Fatalf("path %s parent %s", f.Path(), f.ParentSession())
	}
	s := must[string](t)
	a := s(f.AppendMessage(userMsg("a")))
	b := s(f.AppendMessage(assistantMsg("b")))
	s(f.AppendLabel(a, "one"))
	s(f.AppendLabel(b, "two"))
	s(f.AppendLabel(a, ""))    // clear: a loses its place
	s(f.AppendLabel(a, "uno")) // and comes back last
	s(f.AppendLabel(b, "dos")) // relabel keeps its place
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if f.Label(a) != "uno" || f.Label(b) != "dos" {
		t.Fatalf("labels %q %q", f.Label(a), f.Label(b))
	}
	cl := must[*File](t)(f.Clone(""))
	es := cl.Entries()
	if len(es) != 4 || es[2].TargetID != b || es[2].Label != "dos" || es[3].TargetID != a || es[3].Label != "uno" ||
		es[2].Timestamp != f.Entries()[6].Timestamp {
		t.Fatalf("cloned labels %+v", es[2:])
	}
	g := must[*File](t)(Open(p))
	if g.ParentSession() != "/old.jsonl" || g.Label(a) != "uno" || g.Entries()[4].Time().IsZero() {
		t.Fatal("reopened")
	}
}

func TestMemorySessionWritesNothing(t *testing.T) {
	dir := t.TempDir()
	f := NewMemory(dir)
	if _, err := f.AppendModelChange("p", "m"); err != nil {
		t.Fatal(err)
	}
	id, err := f.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}, Timestamp: 1})
	if err != nil {
		t.Fatal(err)
	}
	if f.Path() != "" || f.Len() != 2 || len(f.Context(f.Leaf()).Messages) != 1 {
		t.Fatalf("path %q len %d", f.Path(), f.Len())
	}
	nf, text, err := f.Fork(id, "")
	if err != nil || text != "hi" || nf.Path() != "" || nf.Len() != 1 {
		t.Fatalf("fork: %v %q", err, text)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files written: %v", entries)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestContextItemsNameTheirEntries(t *testing.T) {
	f, err := Open(piExample)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := f.Context(f.Leaf())
	if len(c.Items) != len(c.Messages) || len(c.Items) != 9 {
		t.Fatalf("%d items, %d messages", len(c.Items), len(c.Messages))
	}
	// The summary comes from the compaction entry, the rest from their
	// message entries, sharing the stored message.
	if c.Items[0].EntryID != "ddacdd0a" || c.Items[0].Message.Role != llm.RoleCompactionSummary {
		t.Fatalf("first item %+v", c.Items[0])
	}
	e, _ := f.Entry("42f34fa1")
	if c.Items[1].EntryID != "42f34fa1" || c.Items[1].Message != e.Message {
		t.Fatalf("second item %+v", c.Items[1])
	}
}

// TestCustomEntriesStayOutOfTheContext: custom entries (a session's
// settings, written while a call waits for approval) may sit anywhere on
// the branch, even between a tool call and its result, and the context
// is the messages alone, as pi's buildSessionContext makes it.
func TestCustomEntriesStayOutOfTheContext(t *testing.T) {
	f := NewMemory("/p")
	s := must[string](t)
	s(f.AppendCustom("agentd.confirm", json.RawMessage(`{"all":true}`)))
	s(f.AppendMessage(userMsg("list")))
	s(f.AppendMessage(assistantMsg("", llm.ToolCall("call_1", "bash", json.RawMessage(`{"command":"ls"}`)))))
	s(f.AppendCustom("agentd.grants", json.RawMessage(`{"tools":["bash"]}`)))
	s(f.AppendMessage(toolResult("call_1", "a.txt", false)))
	leaf := s(f.AppendCustom("agentd.truncate", json.RawMessage(`{"index":3}`)))
	c := f.Context(leaf)
	if got := roles(c.Messages); got != "user:list | assistant | toolResult:a.txt" {
		t.Fatalf("context %s", got)
	}
}
