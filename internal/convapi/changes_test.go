package convapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

func readCwd(t *testing.T, cwd, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cwd, name))
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestChangesRevertUndoAcrossRestart: a turn edits two files and runs
// bash to make a third; GET .../changes lists it and .../changes/diff
// shows the three with hunks; a revert (truncating) puts them back; after
// a restart the revert is undone; then gptme's /undo posted as a message
// reverts the turn again. Bad requests are refused with their reason.
func TestChangesRevertUndoAcrossRestart(t *testing.T) {
	root := t.TempDir()
	fx := newFixture(t, fixtureOptions{root: root})
	os.WriteFile(filepath.Join(fx.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(fx.cwd, "b.txt"), []byte("b before\n"), 0o644)
	before := map[string]string{"a.txt": "one\ntwo\n", "b.txt": "b before\n", "c.txt": "<none>"}
	after := map[string]string{"a.txt": "one\nTWO\n", "b.txt": "b after\n", "c.txt": "made\n"}
	check := func(cwd, when string, want map[string]string) {
		t.Helper()
		for name, w := range want {
			if got := readCwd(t, cwd, name); got != w {
				t.Errorf("%s: %s = %q, want %q", when, name, got, w)
			}
		}
	}

	sid := fx.create("cp", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "change the files"}}})
	st := fx.open("/api/v2/conversations/cp/events?session_id=" + sid)
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{
		{ID: "e1", Name: "edit", Args: `{"path":"a.txt","edits":[{"oldText":"two","newText":"TWO"}]}`},
		{ID: "w1", Name: "write", Args: `{"path":"b.txt","content":"b after\n"}`},
		{ID: "b1", Name: "bash", Args: `{"command":"echo made > c.txt"}`},
	}}, faux.Response{Text: "done"})
	fx.ok("POST", "/api/v2/conversations/cp/step", map[string]any{"session_id": sid, "auto_confirm": true})
	st.next("run_ended")
	check(fx.cwd, "after the turn", after)

	ch := fx.ok("GET", "/api/v2/conversations/cp/changes", nil)
	turns, _ := ch.m["turns"].([]any)
	if len(turns) != 1 || ch.m["undo"] != nil {
		t.Fatalf("changes: %s", ch)
	}
	turn := turns[0].(map[string]any)
	if turn["prompt"] != "change the files" || turn["message_index"] != float64(0) {
		t.Fatalf("turn: %v", turn)
	}
	id := turn["id"].(string)
	d := fx.ok("GET", "/api/v2/conversations/cp/changes/diff?turn="+id, nil)
	var got []string
	for _, f := range d.m["files"].([]any) {
		f := f.(map[string]any)
		got = append(got, f["status"].(string)+" "+f["path"].(string))
	}
	if strings.Join(got, ",") != "modified a.txt,modified b.txt,added c.txt" {
		t.Fatalf("diff files: %v", got)
	}
	if p := d.str("patch"); !strings.Contains(p, "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n") {
		t.Fatalf("patch:\n%s", p)
	}

	rv := fx.ok("POST", "/api/v2/conversations/cp/changes/revert", map[string]any{"turn": id, "truncate": true})
	if rv.m["truncated"] != true || rv.str("prompt") != "change the files" {
		t.Fatalf("revert: %s", rv)
	}
	check(fx.cwd, "after the revert", before)
	if c := fx.ok("GET", "/api/v2/conversations/cp", nil); len(c.m["log"].([]any)) != 0 {
		t.Fatalf("the conversation was not truncated: %s", c)
	}

	// A restart: a new server on the same data.
	fx.stop()
	fx2 := newFixture(t, fixtureOptions{root: root})
	if ch := fx2.ok("GET", "/api/v2/conversations/cp/changes", nil); ch.m["undo"] == nil {
		t.Fatalf("the revert is not undoable after the restart: %s", ch)
	}
	fx2.ok("POST", "/api/v2/conversations/cp/changes/undo", nil)
	check(fx2.cwd, "after undoing the revert", after)
	if c := fx2.ok("GET", "/api/v2/conversations/cp", nil); len(c.m["log"].([]any)) != 6 {
		t.Fatalf("the conversation did not come back: %s", c)
	}
	wantErr(t, fx2.do("POST", "/api/v2/conversations/cp/changes/undo", nil), 409, "there is no revert to undo (a turn that changes files after a revert makes it final)")

	// gptme's /undo, posted as a message.
	u := fx2.ok("POST", "/api/v2/conversations/cp", map[string]any{"role": "user", "content": "/undo"})
	if undo, _ := u.m["undo"].(map[string]any); undo == nil || undo["truncated"] != true || u.m["command"] != "undo" || !strings.Contains(u.m["output"].(string), "a.txt") {
		t.Fatalf("/undo: %s", u)
	}
	check(fx2.cwd, "after /undo", before)
	if c := fx2.ok("GET", "/api/v2/conversations/cp", nil); len(c.m["log"].([]any)) != 0 {
		t.Fatalf("/undo left the conversation: %s", c)
	}
	// /redo, the same registry's built-in, brings the files and the
	// conversation back; a second /redo has nothing to redo.
	if r := fx2.ok("POST", "/api/v2/conversations/cp", map[string]any{"role": "user", "content": "/redo"}); r.m["command"] != "redo" || r.m["undo"] == nil {
		t.Fatalf("/redo: %s", r)
	}
	check(fx2.cwd, "after /redo", after)
	wantErr(t, fx2.do("POST", "/api/v2/conversations/cp", map[string]any{"role": "user", "content": "/redo"}), 409, "there is no revert to undo (a turn that changes files after a revert makes it final)")
	wantErr(t, fx2.do("POST", "/api/v2/conversations/cp", map[string]any{"role": "user", "content": "/undo now"}), 400, `/undo takes no arguments (got "now")`)

	wantErr(t, fx2.do("GET", "/api/v2/conversations/cp/changes/diff?turn=nope", nil), 404, `turn "nope" has no checkpoint (it changed no files, or is not in this session)`)
	wantErr(t, fx2.do("POST", "/api/v2/conversations/cp/changes/revert", map[string]any{"turn": 3}), 400, "turn must be a string")
	if r := fx2.do("POST", "/api/v2/conversations/cp/changes/revert", map[string]any{"bogus": true}); r.status != 400 {
		t.Fatalf("unknown field: %s", r)
	}
}
