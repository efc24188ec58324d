package session_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// writeSession writes a session file with a header and the given entry
// lines and returns its path.
func writeSession(t *testing.T, lines ...string) string {
	t.Helper()
	head := `{"type":"session","version":3,"id":"0190a000-0000-7000-8000-000000000001","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`
	p := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(p, []byte(head+"\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ts is the timestamp of the nth millisecond of the test sessions' day.
func ts(n int) string { return fmt.Sprintf("2026-01-01T00:00:00.%03dZ", n) }

func env(id, parent string, n int) string {
	p := "null"
	if parent != "" {
		p = `"` + parent + `"`
	}
	return fmt.Sprintf(`"id":%q,"parentId":%s,"timestamp":%q`, id, p, ts(n))
}

func msgLine(id, parent string, n int, message string) string {
	return `{"type":"message",` + env(id, parent, n) + `,"message":` + message + `}`
}

const assistantTail = `"api":"openai-completions","provider":"mock","model":"mock-model","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1`

// nodeLine is a node as the tests compare it.
func nodeLine(n session.TreeNode) string {
	s := fmt.Sprintf("%s<%s %s", n.EntryID, n.ParentID, n.Type)
	if n.Role != "" {
		s += "/" + string(n.Role)
	}
	s += " " + n.Text
	if n.Label != "" {
		s += " #" + n.Label
	}
	return s
}

func TestTreeShapeOrderPreviewsAndLabels(t *testing.T) {
	long := strings.Repeat("x", 500)
	p := writeSession(t,
		`{"type":"model_change",`+env("m1", "", 1)+`,"provider":"mock","modelId":"mock-model"}`,
		`{"type":"thinking_level_change",`+env("t1", "m1", 2)+`,"thinkingLevel":"off"}`,
		msgLine("u1", "t1", 3, `{"role":"user","content":"  hello \n\n\t world  !  ","timestamp":1}`),
		msgLine("a1", "u1", 4, `{"role":"assistant","content":[{"type":"thinking","thinking":"let me think"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a.txt"}}],`+assistantTail+`}`),
		msgLine("r1", "a1", 5, `{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"file body"}],"isError":false,"timestamp":1}`),
		msgLine("a2", "r1", 6, `{"role":"assistant","content":[],`+assistantTail+`}`),
		// Written first, but later: children are in timestamp order.
		msgLine("u3", "a2", 9, `{"role":"user","content":[{"type":"text","text":"later branch"}],"timestamp":1}`),
		msgLine("u2", "a2", 7, `{"role":"user","content":"`+long+`","timestamp":1}`),
		msgLine("b1", "u2", 8, `{"role":"bashExecution","command":"ls -l","output":"","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}`),
		`{"type":"label",`+env("l1", "b1", 10)+`,"targetId":"u1","label":"start"}`,
		`{"type":"label",`+env("l2", "l1", 11)+`,"targetId":"u3","label":"tmp"}`,
		`{"type":"label",`+env("l3", "l2", 12)+`,"targetId":"u3"}`,
		`{"type":"custom","customType":"",`+`"data":{"k":[1,2]},`+env("c1", "l3", 13)+`}`,
		`{"type":"custom_message","customType":"note","content":"custom   text","display":true,`+env("cm", "c1", 14)+`}`,
		`{"type":"branch_summary",`+env("bs", "cm", 15)+`,"fromId":"u3","summary":"went\nelsewhere"}`,
		`{"type":"compaction",`+env("cp", "bs", 16)+`,"summary":"","firstKeptEntryId":"u1","tokensBefore":1234}`,
		`{"type":"session_info",`+env("si", "cp", 17)+`,"name":"My session"}`,
		`{"type":"future_thing",`+env("fx", "si", 18)+`,"text":"not shown"}`,
		// A message agentd cannot decode is kept opaque; its role still shows.
		msgLine("op", "fx", 19, `{"role":"user","content":5,"timestamp":1}`),
		// An orphan is a root of its own, after the real one.
		msgLine("om", "gone", 20, `{"role":"user","content":[{"type":"text","text":"orphan"}],"timestamp":1}`),
	)
	h := newHarness(t, func(c *session.Config) { c.Open = p })
	tree := h.s.Tree()
	if tree.LeafID != "om" {
		t.Errorf("leaf %q, want om (the last entry)", tree.LeafID)
	}
	var got []string
	for _, n := range tree.Nodes {
		got = append(got, nodeLine(n))
	}
	want := []string{
		"m1< model_change mock/mock-model",
		"t1<m1 thinking_level_change off",
		"u1<t1 message/user hello world ! #start",
		"a1<u1 message/assistant let me think",
		"r1<a1 message/toolResult file body",
		"a2<r1 message/assistant [assistant]",
		"u2<a2 message/user " + strings.Repeat("x", 400) + "…",
		"b1<u2 message/bashExecution [bashExecution]", // its output only, however empty
		"l1<b1 label start → u1",
		"l2<l1 label tmp → u3",
		"l3<l2 label (cleared) → u3",
		`c1<l3 custom {"k":[1,2]}`,
		"cm<c1 custom_message custom text",
		"bs<cm branch_summary went elsewhere",
		"cp<bs compaction [compaction]",
		"si<cp session_info My session",
		"fx<si future_thing [future_thing]",
		"op<fx message/user [user]",
		"u3<a2 message/user later branch",
		"om<gone message/user orphan",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree\n got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if n := tree.Nodes[0]; n.Timestamp != ts(1) {
		t.Errorf("timestamp %q, want %q", n.Timestamp, ts(1))
	}
}

func TestTreePreviewCountsJavaScriptCharacters(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"exactly 400", strings.Repeat("é", 400), strings.Repeat("é", 400)},
		{"trailing space trimmed, not cut", strings.Repeat("a", 400) + "   \n", strings.Repeat("a", 400)},
		{"space at the cut", strings.Repeat("a", 399) + " bc", strings.Repeat("a", 399) + " …"},
		{"space just past the cut", strings.Repeat("a", 400) + " b", strings.Repeat("a", 400) + "…"},
		{"a word across the cut", strings.Repeat("é", 398) + "\n\n abcdef", strings.Repeat("é", 398) + " a…"},
		// An emoji is two UTF-16 units: 199 of them and a half do not fit twice.
		{"surrogate pairs", strings.Repeat("😀", 201), strings.Repeat("😀", 200) + "…"},
		{"unicode spaces", "a\u00a0\u2003b\u3000", "a b"},
		{"only whitespace", " \n\t ", "[user]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeSession(t, msgLine("u1", "", 1, fmt.Sprintf(`{"role":"user","content":%q,"timestamp":1}`, tt.text)))
			h := newHarness(t, func(c *session.Config) { c.Open = p })
			if got := h.s.Tree().Nodes[0].Text; got != tt.want {
				t.Errorf("preview %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTreeIsBounded(t *testing.T) {
	tests := []struct {
		name  string
		lines func() []string
		want  int
	}{
		{"depth", func() []string {
			// A chain of 1005 entries: depths 0 to 1004.
			var ls []string
			for i := range 1005 {
				parent := ""
				if i > 0 {
					parent = fmt.Sprintf("e%07d", i-1)
				}
				ls = append(ls, `{"type":"session_info",`+env(fmt.Sprintf("e%07d", i), parent, 1)+`,"name":"n"}`)
			}
			return ls
		}, session.MaxTreeDepth + 1},
		{"nodes", func() []string {
			var ls []string
			for i := range session.MaxTreeNodes + 5 {
				ls = append(ls, `{"type":"session_info",`+env(fmt.Sprintf("e%07d", i), "", 1)+`,"name":"n"}`)
			}
			return ls
		}, session.MaxTreeNodes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeSession(t, tt.lines()...)
			h := newHarness(t, func(c *session.Config) { c.Open = p })
			if got := len(h.s.Tree().Nodes); got != tt.want {
				t.Errorf("%d nodes, want %d", got, tt.want)
			}
		})
	}
}

// treeFixture is a session with two branches from the first answer:
//
//	model_change ─ thinking ─ alpha ─ re: alpha ┬ bravo ─ re: bravo
//	                                            └ charlie ─ re: charlie   ← leaf
type treeFixture struct {
	*harness
	ids map[string]string // entry ids by their message's text prefix ("alpha", "re: bravo", ...) and "model"
}

func newTreeFixture(t *testing.T) *treeFixture {
	t.Helper()
	h := newHarness(t, nil)
	h.srv.Handle(summariser(100))
	fx := &treeFixture{harness: h}
	h.prompt("alpha")
	h.wait()
	h.prompt("bravo")
	h.wait()
	fx.index()
	if _, err := h.s.NavigateTree(context.Background(), fx.ids["bravo"], session.NavigateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.prompt("charlie")
	h.wait()
	fx.index()
	return fx
}

// index records the ids of the tree's entries.
func (fx *treeFixture) index() {
	fx.ids = map[string]string{}
	for _, n := range fx.s.Tree().Nodes {
		switch {
		case n.Type == transcript.TypeModelChange:
			fx.ids["model"] = n.EntryID
		case n.Role == llm.RoleUser:
			fx.ids[n.Text] = n.EntryID
		case n.Role == llm.RoleAssistant:
			fx.ids[strings.Fields(n.Text)[0]+" "+strings.Fields(n.Text)[1]] = n.EntryID
		}
	}
}

// texts is the session's context, one short line per message.
func texts(s *session.Session) []string {
	var out []string
	for _, m := range s.Messages() {
		switch m.Role {
		case llm.RoleUser:
			out = append(out, m.TextContent())
		case llm.RoleAssistant:
			out = append(out, strings.Join(strings.Fields(m.TextContent())[:2], " "))
		case llm.RoleBranchSummary:
			out = append(out, "[branch summary]")
		default:
			out = append(out, "["+string(m.Role)+"]")
		}
	}
	return out
}

func node(tree session.Tree, id string) (session.TreeNode, bool) {
	for _, n := range tree.Nodes {
		if n.EntryID == id {
			return n, true
		}
	}
	return session.TreeNode{}, false
}

// summaryRequest is the body of the last request made without tools.
func summaryRequest(h *harness) string {
	var body string
	for _, r := range h.srv.Requests() {
		if _, ok := r.JSON["tools"]; !ok {
			body = string(r.Body)
		}
	}
	return body
}

func TestNavigateTree(t *testing.T) {
	type check struct {
		fx   *treeFixture
		res  session.NavigateResult
		tree session.Tree
	}
	tests := []struct {
		name   string
		target string // a key of fixture.ids, or an id
		opts   session.NavigateOptions
		// editor is the expected EditorText, "-" for none.
		editor string
		leaf   string // key of the expected leaf, "" for the position before the first entry
		ctx    []string
		more   func(t *testing.T, c check)
	}{
		{name: "user message on another branch", target: "bravo", editor: "bravo", leaf: "re: alpha",
			ctx: []string{"alpha", "re: alpha"}},
		{name: "assistant message on another branch", target: "re: bravo", editor: "-", leaf: "re: bravo",
			ctx: []string{"alpha", "re: alpha", "bravo", "re: bravo"}},
		{name: "user message on the current branch", target: "charlie", editor: "charlie", leaf: "re: alpha",
			ctx: []string{"alpha", "re: alpha"}},
		{name: "the root entry", target: "model", editor: "-", leaf: "model", ctx: nil},
		{name: "label without a summary goes on the target", target: "re: bravo", opts: session.NavigateOptions{Label: "bookmark"},
			editor: "-", ctx: []string{"alpha", "re: alpha", "bravo", "re: bravo"},
			more: func(t *testing.T, c check) {
				target, _ := node(c.tree, c.fx.ids["re: bravo"])
				leaf, _ := node(c.tree, c.tree.LeafID)
				if target.Label != "bookmark" || leaf.Type != transcript.TypeLabel || leaf.ParentID != target.EntryID {
					t.Errorf("target %s, leaf %s", nodeLine(target), nodeLine(leaf))
				}
				if summaryRequest(c.fx.harness) != "" {
					t.Error("a summary was requested")
				}
			}},
		{name: "summary of the path left, labelled", target: "re: bravo",
			opts:   session.NavigateOptions{Summarize: true, Label: "was charlie", CustomInstructions: "stress the letter C"},
			editor: "-", ctx: []string{"alpha", "re: alpha", "bravo", "re: bravo", "[branch summary]"},
			more: func(t *testing.T, c check) {
				sum, ok := node(c.tree, c.res.SummaryEntryID)
				if !ok || sum.Type != transcript.TypeBranchSummary || sum.ParentID != c.fx.ids["re: bravo"] ||
					!strings.Contains(sum.Text, "SUMMARY OF EARLIER WORK") || sum.Label != "was charlie" {
					t.Errorf("summary entry %s (ok %v)", nodeLine(sum), ok)
				}
				leaf, _ := node(c.tree, c.tree.LeafID)
				if leaf.Type != transcript.TypeLabel || leaf.ParentID != sum.EntryID {
					t.Errorf("leaf %s, want the label entry under the summary", nodeLine(leaf))
				}
				if target, _ := node(c.tree, c.fx.ids["re: bravo"]); target.Label != "" {
					t.Errorf("the target was labelled too: %s", nodeLine(target))
				}
				// Only the path left (charlie's exchange) is summarised,
				// with the user's instructions added to agentd's.
				body := summaryRequest(c.fx.harness)
				for _, want := range []string{"charlie", "stress the letter C", "## Worth Keeping"} {
					if !strings.Contains(body, want) {
						t.Errorf("summary request lacks %q: %s", want, body)
					}
				}
				if strings.Contains(body, "bravo") || strings.Contains(body, "alpha") {
					t.Errorf("summary request holds the shared or the target path: %s", body)
				}
				if m := c.fx.s.Messages()[4]; !strings.Contains(m.Summary, "SUMMARY OF EARLIER WORK") {
					t.Errorf("the context's summary is %q", m.Summary)
				}
			}},
		{name: "summary replacing the instructions, to a user message", target: "bravo",
			opts:   session.NavigateOptions{Summarize: true, CustomInstructions: "ONLY LIST NAMES", ReplaceInstructions: true},
			editor: "bravo", ctx: []string{"alpha", "re: alpha", "[branch summary]"},
			more: func(t *testing.T, c check) {
				sum, _ := node(c.tree, c.res.SummaryEntryID)
				if sum.ParentID != c.fx.ids["re: alpha"] || c.tree.LeafID != sum.EntryID {
					t.Errorf("summary %s, leaf %s", nodeLine(sum), c.tree.LeafID)
				}
				body := summaryRequest(c.fx.harness)
				if !strings.Contains(body, "ONLY LIST NAMES") || strings.Contains(body, "## Worth Keeping") {
					t.Errorf("summary request: %s", body)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newTreeFixture(t)
			target := fx.ids[tt.target]
			res, err := fx.s.NavigateTree(context.Background(), target, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Cancelled || res.Aborted {
				t.Fatalf("result %+v", res)
			}
			if tt.editor == "-" {
				if res.HasEditorText {
					t.Errorf("editor text %q, want none", res.EditorText)
				}
			} else if !res.HasEditorText || res.EditorText != tt.editor {
				t.Errorf("editor text %q (%v), want %q", res.EditorText, res.HasEditorText, tt.editor)
			}
			tree := fx.s.Tree()
			if tt.leaf != "" && tree.LeafID != fx.ids[tt.leaf] {
				t.Errorf("leaf %s, want %s (%s)", tree.LeafID, fx.ids[tt.leaf], tt.leaf)
			}
			if got := texts(fx.s); strings.Join(got, "|") != strings.Join(tt.ctx, "|") {
				t.Errorf("context %q, want %q", got, tt.ctx)
			}
			if tt.more != nil {
				tt.more(t, check{fx, res, tree})
			}
			// The next prompt continues from the new position and sends
			// the rebuilt context.
			fx.prompt("delta")
			fx.wait()
			want := append(append([]string(nil), tt.ctx...), "delta", "re: delta")
			if got := texts(fx.s); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("context after the next prompt %q, want %q", got, want)
			}
			after := fx.s.Tree()
			fx.index()
			if n, _ := node(after, fx.ids["delta"]); n.ParentID != tree.LeafID {
				t.Errorf("the next prompt's parent is %q, want the new leaf %q", n.ParentID, tree.LeafID)
			}
			if body := string(fx.srv.LastRequest(t).Body); strings.Contains(body, "charlie") != strings.Contains(strings.Join(tt.ctx, " "), "charlie") {
				t.Errorf("the next request does not match the context %q: %s", tt.ctx, body)
			}
		})
	}
}

func TestNavigateTreeNoOpAndUnknown(t *testing.T) {
	fx := newTreeFixture(t)
	before := fx.s.Tree()
	res, err := fx.s.NavigateTree(context.Background(), before.LeafID, session.NavigateOptions{Summarize: true, Label: "x"})
	if err != nil || res != (session.NavigateResult{}) {
		t.Errorf("to the current leaf: %+v, %v", res, err)
	}
	_, err = fx.s.NavigateTree(context.Background(), "nope", session.NavigateOptions{})
	if err == nil || err.Error() != "Entry nope not found" || fault.CodeOf(err) != fault.NotFound {
		t.Errorf("unknown entry: %v (code %s)", err, fault.CodeOf(err))
	}
	after := fx.s.Tree()
	if after.LeafID != before.LeafID || len(after.Nodes) != len(before.Nodes) || summaryRequest(fx.harness) != "" {
		t.Errorf("the tree changed: leaf %s -> %s, %d -> %d nodes", before.LeafID, after.LeafID, len(before.Nodes), len(after.Nodes))
	}
}

// A user message that is a root of its file (the first entry, or one
// whose parent is missing): the conversation moves before everything,
// and the next prompt starts a new root.
func TestNavigateTreeToARootUserMessage(t *testing.T) {
	for _, parent := range []string{"", "gone"} {
		t.Run("parent "+parent, func(t *testing.T) {
			p := writeSession(t,
				msgLine("u1", parent, 1, `{"role":"user","content":"first words","timestamp":1}`),
				msgLine("a1", "u1", 2, `{"role":"assistant","content":[{"type":"text","text":"re: first words"}],`+assistantTail+`}`),
			)
			h := newHarness(t, func(c *session.Config) { c.Open = p })
			h.srv.Handle(summariser(100))
			res, err := h.s.NavigateTree(context.Background(), "u1", session.NavigateOptions{})
			if err != nil || res.EditorText != "first words" {
				t.Fatalf("%+v, %v", res, err)
			}
			if tree := h.s.Tree(); tree.LeafID != "" || len(h.s.Messages()) != 0 {
				t.Fatalf("leaf %q, %d messages", tree.LeafID, len(h.s.Messages()))
			}
			h.prompt("second words")
			h.wait()
			var roots []string
			for _, n := range h.s.Tree().Nodes {
				if n.ParentID == "" || n.ParentID == "gone" {
					roots = append(roots, n.Text)
				}
			}
			if strings.Join(roots, "|") != "first words|second words" {
				t.Errorf("roots %q", roots)
			}
		})
	}
}

func TestNavigateTreeAbortSummary(t *testing.T) {
	tests := []struct {
		name  string
		abort func(*session.Session)
	}{
		{"abort", (*session.Session).Abort},
		{"abort_compaction", (*session.Session).AbortCompaction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newTreeFixture(t)
			// The summary request streams a little, then hangs.
			fx.srv.Handle(func(r *wiremock.Request) wiremock.Script {
				if _, ok := r.JSON["tools"]; !ok {
					return wiremock.Script{Text: []string{"## Goal", " never finished"}, HangAfter: 2}
				}
				return summariser(100)(r)
			})
			before := fx.s.Tree()
			type outcome struct {
				res session.NavigateResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := fx.s.NavigateTree(context.Background(), fx.ids["re: bravo"], session.NavigateOptions{Summarize: true, Label: "l"})
				done <- outcome{res, err}
			}()
			fx.waitEvent(func(ev session.Event) bool {
				return ev.Type == session.EventStateChanged && ev.State == session.StateCompacting
			})
			// While it summarises the session is busy.
			if err := fx.s.Prompt(session.UserMessage("echo", nil), session.BehaviorNone); !errors.Is(err, session.ErrBusy) {
				t.Errorf("prompt during the summary: %v", err)
			}
			if _, err := fx.s.NavigateTree(context.Background(), fx.ids["alpha"], session.NavigateOptions{}); fault.CodeOf(err) != fault.Busy {
				t.Errorf("second navigation during the summary: %v", err)
			}
			if _, err := fx.s.Fork(fx.ids["alpha"]); err == nil {
				t.Error("fork during the summary")
			}
			if got := fx.s.State(); got != session.StateCompacting {
				t.Errorf("state %s during the summary", got)
			}
			tt.abort(fx.s)
			var o outcome
			select {
			case o = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the navigation did not end after the abort")
			}
			if o.err != nil || !o.res.Cancelled || !o.res.Aborted || o.res.SummaryEntryID != "" {
				t.Fatalf("aborted navigation: %+v, %v", o.res, o.err)
			}
			after := fx.s.Tree()
			if after.LeafID != before.LeafID || len(after.Nodes) != len(before.Nodes) {
				t.Errorf("the tree changed: leaf %s -> %s, %d -> %d nodes", before.LeafID, after.LeafID, len(before.Nodes), len(after.Nodes))
			}
			if got := strings.Join(texts(fx.s), "|"); got != "alpha|re: alpha|charlie|re: charlie" {
				t.Errorf("context %s", got)
			}
			if st := fx.s.State(); st != session.StateIdle || fx.s.Running() {
				t.Errorf("state %s, running %v after the abort", st, fx.s.Running())
			}
			// And the session works on.
			fx.prompt("echo")
			fx.wait()
		})
	}
}

func TestNavigateTreeSummaryFailureChangesNothing(t *testing.T) {
	fx := newTreeFixture(t)
	fx.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "no summaries today"}
	})
	before := fx.s.Tree()
	_, err := fx.s.NavigateTree(context.Background(), fx.ids["re: bravo"], session.NavigateOptions{Summarize: true})
	if err == nil || !strings.Contains(err.Error(), "Branch summarization failed") || !strings.Contains(err.Error(), "no summaries today") {
		t.Fatalf("error %v", err)
	}
	if after := fx.s.Tree(); after.LeafID != before.LeafID || len(after.Nodes) != len(before.Nodes) {
		t.Errorf("the tree changed")
	}
}

func TestNavigateTreeRefusedWhileRunning(t *testing.T) {
	fx := newTreeFixture(t)
	fx.srv.Enqueue(wiremock.Script{Text: []string{"slow", " answer", " here"}, Delay: 200 * time.Millisecond})
	fx.prompt("slowly")
	_, err := fx.s.NavigateTree(context.Background(), fx.ids["alpha"], session.NavigateOptions{})
	if fault.CodeOf(err) != fault.Busy || !strings.Contains(err.Error(), "abort it or wait") {
		t.Errorf("navigation during a run: %v", err)
	}
	fx.wait()
	if _, err := fx.s.NavigateTree(context.Background(), fx.ids["alpha"], session.NavigateOptions{}); err != nil {
		t.Errorf("navigation after the run: %v", err)
	}
}

// A command the user runs while a navigation summarises is recorded when
// the navigation ends, at the new position, as after a run.
func TestNavigateTreeRecordsBashRunMeanwhile(t *testing.T) {
	fx := newTreeFixture(t)
	release := make(chan struct{})
	fx.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if _, ok := r.JSON["tools"]; !ok {
			<-release
		}
		return summariser(100)(r)
	})
	done := make(chan error, 1)
	go func() {
		_, err := fx.s.NavigateTree(context.Background(), fx.ids["re: bravo"], session.NavigateOptions{Summarize: true})
		done <- err
	}()
	fx.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventStateChanged && ev.State == session.StateCompacting
	})
	if _, err := fx.s.Bash(context.Background(), "echo meanwhile", false); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(texts(fx.s), "|"); got != "alpha|re: alpha|bravo|re: bravo|[branch summary]|[bashExecution]" {
		t.Errorf("context %s", got)
	}
}

// BenchmarkTree measures get_tree's work on a session of 10,000 entries
// in a few branches, each message a couple of kilobytes long.
func BenchmarkTree(b *testing.B) {
	benchTree(b, func(text string) string { return fmt.Sprintf(`{"role":"user","content":%q,"timestamp":1}`, text) })
}

// benchTree measures get_tree on a session of session.MaxTreeNodes
// message entries in a few branches, each message(text) with text a
// couple of kilobytes long.
func benchTree(b *testing.B, message func(text string) string) {
	text := strings.Repeat("some words of a message ", 100)
	lines := make([]string, 0, session.MaxTreeNodes)
	for i := range session.MaxTreeNodes {
		parent := ""
		if i > 0 {
			parent = fmt.Sprintf("e%07d", i-1)
		}
		if i%500 == 499 {
			parent = "e0000010" // a new branch off an early entry
		}
		lines = append(lines, msgLine(fmt.Sprintf("e%07d", i), parent, i%1000, message(text)))
	}
	dir := b.TempDir()
	head := `{"type":"session","version":3,"id":"0190a000-0000-7000-8000-000000000001","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`
	p := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(p, []byte(head+"\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	pr := faux.New(faux.Options{})
	s, err := session.New(session.Config{Cwd: dir, Open: p, Model: faux.Model(), Stream: pr.Stream})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := len(s.Tree().Nodes); n != session.MaxTreeNodes {
			b.Fatalf("%d nodes", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(session.MaxTreeNodes), "ns/node")
}
