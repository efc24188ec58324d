package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// cpTurnScript answers "change the files" with a turn that edits a.txt,
// rewrites b.txt and runs bash to make c.txt (then the mock's usual
// "Tool said" answer).
func cpTurnScript(e *e2eEnv) {
	e.mock.Handle(func(r *wiremock.Request) wiremock.Script {
		msgs, _ := r.JSON["messages"].([]any)
		if n := len(msgs); n > 0 {
			last, _ := msgs[n-1].(map[string]any)
			if last["role"] == "user" && e2eChatText(last["content"]) == "change the files" {
				return wiremock.Script{ToolCalls: []wiremock.ToolCall{
					{ID: "e1", Name: "edit", Args: []string{`{"path":"a.txt","edits":[{"oldText":"two","newText":"TWO"}]}`}},
					{ID: "w1", Name: "write", Args: []string{`{"path":"b.txt","content":"b after\n"}`}},
					{ID: "b1", Name: "bash", Args: []string{`{"command":"echo made > c.txt"}`}},
				}}
			}
		}
		return e.script(r)
	})
}

func cpFiles(t *testing.T, dir, when string, want map[string]string) {
	t.Helper()
	for name, w := range want {
		got := "<none>"
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			got = string(b)
		}
		if got != w {
			t.Errorf("%s: %s = %q, want %q", when, name, got, w)
		}
	}
}

var (
	cpBefore = map[string]string{"a.txt": "one\ntwo\n", "b.txt": "b before\n", "c.txt": "<none>"}
	cpAfter  = map[string]string{"a.txt": "one\nTWO\n", "b.txt": "b after\n", "c.txt": "made\n"}
)

// TestCheckpointsAcrossKill9: a turn run on pi-server edits two files and
// runs bash to make a third; pi-server's get_turn_diff and REST's
// .../changes/diff name the three; REST reverts them; agentd serve is
// killed with SIGKILL and restarted on the same data dir; pi-server's
// undo_revert brings the turn's work back, revert_turn with truncate puts
// the files and the conversation back before it; another SIGKILL, and
// REST's .../changes/undo brings both back.
func TestCheckpointsAcrossKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	cpTurnScript(e)
	os.WriteFile(filepath.Join(e.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(e.cwd, "b.txt"), []byte("b before\n"), 0o644)
	const sid = "cp1"
	s := svStart(t, e)
	a := s.dial("A")
	svCreate(a, sid)
	svPrompt(a, sid, "change the files")
	cpFiles(t, e.cwd, "after the turn", cpAfter)

	d := a.must("get_turn_diff", svM{"sessionId": sid})
	var files []string
	for _, f := range svArr(d.m, "data", "files") {
		files = append(files, svStr(f, "status")+" "+svStr(f, "path"))
	}
	svEq(t, "pi-server diff", strings.Join(files, ","), "modified a.txt,modified b.txt,added c.txt")
	if p := svStr(d.m, "data", "patch"); !strings.Contains(p, "+++ b/c.txt\n@@ -0,0 +1,1 @@\n+made\n") {
		t.Errorf("patch:\n%s", p)
	}
	turn := svStr(d.m, "data", "turn", "id")
	rd := rsOK(t, s, "GET", rsConvPath(sid)+"/changes/diff?turn="+turn, nil)
	if n := len(rd.m["files"].([]any)); n != 3 {
		t.Fatalf("REST diff: %s", rd)
	}

	rsOK(t, s, "POST", rsConvPath(sid)+"/changes/revert", map[string]any{"turn": turn})
	cpFiles(t, e.cwd, "after the REST revert", cpBefore)

	s.kill9()
	s = s.restart()
	b := s.dial("B")
	b.must("undo_revert", svM{"sessionId": sid})
	cpFiles(t, e.cwd, "after pi-server's undo_revert", cpAfter)

	r := b.must("revert_turn", svM{"sessionId": sid, "turn": turn, "truncate": true})
	svEq(t, "truncated", svAt(r.m, "data", "truncated"), true)
	svEq(t, "deleted", svJSON(svAt(r.m, "data", "deleted")), `["c.txt"]`)
	cpFiles(t, e.cwd, "after pi-server's revert_turn", cpBefore)
	svEq(t, "messages after the truncating revert", len(svMessages(b, sid)), 0)

	s.kill9()
	s = s.restart()
	ch := rsOK(t, s, "GET", rsConvPath(sid)+"/changes", nil)
	if u, _ := ch.m["undo"].(map[string]any); u == nil || u["truncated"] != true {
		t.Fatalf("after the second SIGKILL: %s", ch)
	}
	rsOK(t, s, "POST", rsConvPath(sid)+"/changes/undo", nil)
	cpFiles(t, e.cwd, "after REST's undo", cpAfter)
	c := s.dial("C")
	if n := len(svMessages(c, sid)); n != 6 {
		t.Errorf("the conversation has %d messages after the undo, want the turn's 6", n)
	}
	// Nothing left to undo, said on both faces.
	svWantErr(t, c.do("undo_revert", svM{"sessionId": sid}), "there is no revert to undo (a turn that changes files after a revert makes it final)")
	if r := rsDo(t, s, "POST", rsConvPath(sid)+"/changes/undo", nil); r.status != 409 {
		t.Errorf("a second undo: %d %s", r.status, r)
	}
	// The store is in the data dir, not in the workspace.
	if _, err := os.Stat(filepath.Join(e.data, "checkpoints")); err != nil {
		t.Errorf("no checkpoints in the data dir: %v", err)
	}
	if ents, _ := os.ReadDir(e.cwd); len(ents) != 3 {
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		t.Errorf("the workspace holds %v, want a.txt, b.txt, c.txt only", names)
	}
}

// TestRPCCheckpoints: the same commands on `agentd rpc`: the turn's diff,
// a truncating revert, and after the process ends and `--continue`
// opens the session again, the revert undone; an unknown turn is refused
// with its reason.
func TestRPCCheckpoints(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	cpTurnScript(e)
	os.WriteFile(filepath.Join(e.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(e.cwd, "b.txt"), []byte("b before\n"), 0o644)
	p := e.start()
	p.ok(`{"id":"p","type":"prompt","message":"change the files"}`)
	p.event("agent_end")
	cpFiles(t, e.cwd, "after the turn", cpAfter)
	d := p.ok(`{"id":"d","type":"get_turn_diff"}`)
	var files []string
	for _, f := range e2eAt(d, "data", "files").([]any) {
		files = append(files, e2eStr(f, "status")+" "+e2eStr(f, "path"))
	}
	if got := strings.Join(files, ","); got != "modified a.txt,modified b.txt,added c.txt" {
		t.Fatalf("rpc diff: %s", got)
	}
	if r := p.call(`{"id":"bad","type":"revert_turn","turn":"nope"}`); e2eStr(r, "error") != `turn "nope" has no checkpoint (it changed no files, or is not in this session)` {
		t.Errorf("unknown turn: %v", r)
	}
	r := p.ok(`{"id":"r","type":"revert_turn","truncate":true}`)
	if b, _ := e2eAt(r, "data", "truncated").(bool); !b {
		t.Errorf("revert_turn: %v", r)
	}
	cpFiles(t, e.cwd, "after revert_turn", cpBefore)
	p.close()

	p = e.start("--continue")
	p.ok(`{"id":"u","type":"undo_revert"}`)
	cpFiles(t, e.cwd, "after undo_revert in a new process", cpAfter)
	if n := len(e2eAt(p.ok(`{"id":"m","type":"get_messages"}`), "data", "messages").([]any)); n != 6 {
		t.Errorf("%d messages after the undo, want 6", n)
	}
	p.close()
}

// TestACPConnectTurnChanges: an editor on `agentd acp --connect` to a
// running agentd serve gets, at the end of a prompt whose turn edited two
// files and made a third with bash, a completed edit tool call with a
// diff per file (the changed regions, none before for the new file).
func TestACPConnectTurnChanges(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	cpTurnScript(e)
	os.WriteFile(filepath.Join(e.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(e.cwd, "b.txt"), []byte("b before\n"), 0o644)
	s := svStartInProc(t, e)
	ed := startACPProc(t, e, "--connect", "ws://"+s.addr+"/")
	ed.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	sid, _ := ed.call("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}})["sessionId"].(string)
	r := ed.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "change the files"}}})
	if r["stopReason"] != "end_turn" {
		t.Fatalf("prompt: %v", r)
	}
	cpFiles(t, e.cwd, "after the turn", cpAfter)
	var changes map[string]any
	for _, u := range ed.takeUpdates() {
		if id, _ := u["toolCallId"].(string); strings.HasPrefix(id, "agentd-changes-") {
			changes = u
		}
	}
	if changes == nil || changes["kind"] != "edit" || changes["status"] != "completed" {
		t.Fatalf("no changes tool call: %v", changes)
	}
	got := map[string][2]any{}
	for _, c := range changes["content"].([]any) {
		c := c.(map[string]any)
		if c["type"] == "diff" {
			got[c["path"].(string)] = [2]any{c["oldText"], c["newText"]}
		}
	}
	want := map[string][2]any{
		filepath.Join(e.cwd, "a.txt"): {"one\ntwo\n", "one\nTWO\n"},
		filepath.Join(e.cwd, "b.txt"): {"b before\n", "b after\n"},
		filepath.Join(e.cwd, "c.txt"): {nil, "made\n"},
	}
	svEq(t, "the turn's diffs", got, want)
}

// TestUndoCommandAsAPrompt: /undo sent as a prompt, on agentd serve's
// pi-server and on agentd rpc, is the registry's built-in: a turn edits
// two files and makes a third with bash; /undo puts the files back and
// the conversation before the turn's message, without reaching the
// model; /redo brings both back. get_commands lists both as built-ins.
func TestUndoCommandAsAPrompt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(t *testing.T, e *e2eEnv) (prompt func(text string) string, messages func() int, commands func() []any)
	}{
		{"pi-server", func(t *testing.T, e *e2eEnv) (func(string) string, func() int, func() []any) {
			s := svStart(t, e)
			c := s.dial("A")
			svCreate(c, "u1")
			return func(text string) string {
					if !strings.HasPrefix(text, "/") {
						svPrompt(c, "u1", text)
						return ""
					}
					return svStr(c.must("prompt", svM{"sessionId": "u1", "message": text}).m, "data", "output")
				}, func() int { return len(svMessages(c, "u1")) },
				func() []any { return svArr(c.must("get_commands", svM{"sessionId": "u1"}).m, "data", "commands") }
		}},
		{"rpc", func(t *testing.T, e *e2eEnv) (func(string) string, func() int, func() []any) {
			p := e.start()
			t.Cleanup(func() { p.close() })
			// Responses are found by id anywhere in the output: each
			// command gets its own.
			n := 0
			id := func() string { n++; return strconv.Itoa(n) }
			return func(text string) string {
					if !strings.HasPrefix(text, "/") {
						p.ok(`{"id":"` + id() + `","type":"prompt","message":` + e2eJSON(text) + `}`)
						p.event("agent_end")
						return ""
					}
					p.ok(`{"id":"` + id() + `","type":"prompt","message":` + e2eJSON(text) + `}`)
					return e2eStr(p.eventWhere("notify", func(v any) bool { return e2eStr(v, "method") == "notify" }), "message")
				}, func() int {
					return len(e2eAt(p.ok(`{"id":"`+id()+`","type":"get_messages"}`), "data", "messages").([]any))
				},
				func() []any {
					return e2eAt(p.ok(`{"id":"`+id()+`","type":"get_commands"}`), "data", "commands").([]any)
				}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			cpTurnScript(e)
			os.WriteFile(filepath.Join(e.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
			os.WriteFile(filepath.Join(e.cwd, "b.txt"), []byte("b before\n"), 0o644)
			prompt, messages, list := tc.run(t, e)

			seen := map[string]string{}
			for _, c := range list() {
				seen[cmdStr(c, "name")] = cmdStr(c, "source")
			}
			if seen["undo"] != "builtin" || seen["redo"] != "builtin" {
				t.Fatalf("get_commands: %v", seen)
			}
			prompt("change the files")
			cpFiles(t, e.cwd, "after the turn", cpAfter)
			if n := messages(); n != 6 {
				t.Fatalf("%d messages after the turn, want 6", n)
			}
			asked := len(e.mock.Requests())

			out := prompt("/undo")
			if !strings.Contains(out, "a.txt") || !strings.Contains(out, "change the files") {
				t.Errorf("/undo said %q", out)
			}
			cpFiles(t, e.cwd, "after /undo", cpBefore)
			if n := messages(); n != 0 {
				t.Errorf("%d messages after /undo (%q), want 0", n, out)
			}
			prompt("/redo")
			cpFiles(t, e.cwd, "after /redo", cpAfter)
			if n := messages(); n != 6 {
				t.Errorf("%d messages after /redo, want 6", n)
			}
			if n := len(e.mock.Requests()); n != asked {
				t.Errorf("the commands reached the model: %d requests, then %d", asked, n)
			}
		})
	}
}
