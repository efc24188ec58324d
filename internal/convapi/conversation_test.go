package convapi

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/server"
)

// logOf is the role:content of each message of a conversation.
func (fx *fixture) logOf(id string) []string {
	fx.t.Helper()
	var out []string
	for _, m := range fx.ok("GET", "/api/v2/conversations/"+id, nil).m["log"].([]any) {
		mm := m.(map[string]any)
		out = append(out, mm["role"].(string)+":"+mm["content"].(string))
	}
	return out
}

func userMsgs(texts ...string) map[string]any {
	var ms []any
	for i, t := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ms = append(ms, map[string]any{"role": role, "content": t})
	}
	return map[string]any{"messages": ms}
}

// A repeated command with the same Idempotency-Key is answered with the
// first one's outcome and does not run again.
func TestIdempotencyKey(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	a := fx.ok("PUT", "/api/v2/conversations/idem", map[string]any{}, "Idempotency-Key", "k-create")
	b := fx.ok("PUT", "/api/v2/conversations/idem", map[string]any{}, "Idempotency-Key", "k-create")
	if a.str("session_id") != b.str("session_id") {
		t.Errorf("the replayed create answered %s, first %s", b, a)
	}
	for range 3 {
		fx.ok("POST", "/api/v2/conversations/idem", map[string]any{"role": "user", "content": "once"}, "Idempotency-Key", "k-msg")
	}
	if got := fx.logOf("idem"); !slices.Equal(got, []string{"user:once"}) {
		t.Errorf("log = %q", got)
	}
	r := fx.do("POST", "/api/v2/conversations/idem", map[string]any{"role": "user", "content": "different"}, "Idempotency-Key", "k-msg")
	wantErr(t, r, http.StatusConflict, "Conflicting idempotencyKey 'k-msg': previously used for 'rest.append', now used for 'rest.append'")
}

// A conversation is a layer session: one made over REST is there for
// every face, and one made by another face is a conversation here.
func TestConversationsAreLayerSessions(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	fx.create("rest-made", userMsgs("hello"))
	found := false
	for _, h := range fx.layer.Sessions() {
		found = found || h.ID() == "rest-made"
	}
	if !found {
		t.Errorf("a REST conversation is not a layer session")
	}
	h, err := fx.layer.Create(context.Background(), server.CreateRequest{ID: "pi-made"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Session().Append(inputMessage("user", "from pi", timeZero)); err != nil {
		t.Fatal(err)
	}
	if got := fx.logOf("pi-made"); !slices.Equal(got, []string{"user:from pi"}) {
		t.Errorf("pi-made over REST: %q", got)
	}
	fx.faux.Push(faux.Response{Text: "answered"})
	st := fx.open("/api/v2/conversations/pi-made/events")
	fx.ok("POST", "/api/conversations/pi-made/step", map[string]any{})
	st.next("generation_complete")
	if !h.Session().ConfirmAll() {
		t.Errorf("a step over REST leaves its calls unconfirmed")
	}
}

func TestListConversations(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	for _, id := range []string{"l1", "l2", "l3"} {
		fx.create(id, userMsgs("about "+id))
	}
	r := fx.ok("GET", "/api/v2/conversations", nil)
	if len(r.list) != 3 {
		t.Fatalf("list: %s", r)
	}
	first := r.list[0].(map[string]any)
	for _, k := range []string{"id", "name", "created", "modified", "messages", "message_count", "last_updated", "last_message_preview"} {
		if _, ok := first[k]; !ok {
			t.Errorf("a list entry lacks %s: %v", k, first)
		}
	}
	etag := r.header.Get("ETag")
	if !strings.HasPrefix(etag, `W/"`) {
		t.Errorf("ETag %q", etag)
	}
	if r := fx.do("GET", "/api/v2/conversations", nil, "If-None-Match", etag); r.status != http.StatusNotModified {
		t.Errorf("If-None-Match with the ETag: %d", r.status)
	}
	if q := fx.ok("GET", "/api/v2/conversations?q=ABOUT%20L2", nil); len(q.list) != 1 || q.list[0].(map[string]any)["id"] != "l2" {
		t.Errorf("q: %s", q)
	}
	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		path := "/api/v2/conversations?paginated=1&limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		p := fx.ok("GET", path, nil)
		for _, c := range p.m["conversations"].([]any) {
			seen = append(seen, c.(map[string]any)["id"].(string))
		}
		next, _ := p.m["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"l1", "l2", "l3"}) {
		t.Errorf("pages: %v", seen)
	}
}

func TestEditsBranchTheConversation(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	fx.create("ed", userMsgs("one", "two", "three", "four"))
	st := fx.open("/api/v2/conversations/ed/events")
	r := fx.ok("PATCH", "/api/v2/conversations/ed/messages/2", map[string]any{"content": "THREE"})
	if got := fx.logOf("ed"); !slices.Equal(got, []string{"user:one", "assistant:two", "user:THREE", "assistant:four"}) {
		t.Errorf("after an edit: %q", got)
	}
	if len(r.m["log"].([]any)) != 4 {
		t.Errorf("the edit's answer: %s", r)
	}
	ce := st.next("conversation_edited")
	if ce.m["index"] != float64(2) || ce.m["truncated"] != false {
		t.Errorf("conversation_edited = %s", ce.raw)
	}
	fx.ok("PATCH", "/api/v2/conversations/ed/messages/0?truncate=1", map[string]any{"content": "ONE"})
	if got := fx.logOf("ed"); !slices.Equal(got, []string{"user:ONE"}) {
		t.Errorf("after an edit with truncate: %q", got)
	}
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/ed/messages/0", map[string]any{"content": "ONE"}), http.StatusBadRequest, "No changes requested")

	fx.create("del", userMsgs("one", "two", "three", "four", "five"))
	wantErr(t, fx.do("DELETE", "/api/v2/conversations/del/messages/1", nil), http.StatusBadRequest,
		"Deleting this message would create consecutive 'user' messages, which is not supported by LLM APIs")
	fx.ok("DELETE", "/api/v2/conversations/del/messages/4", nil)
	fx.ok("DELETE", "/api/v2/conversations/del/messages/0", nil)
	if got := fx.logOf("del"); !slices.Equal(got, []string{"assistant:two", "user:three", "assistant:four"}) {
		t.Errorf("after deletes: %q", got)
	}
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/del/messages/0", map[string]any{"content": "x"}), http.StatusBadRequest, "Can only edit user messages")
	// The old branches are in the session file's tree, not lost.
	data, err := os.ReadFile(fx.ok("GET", "/api/v2/conversations/del", nil).str("logfile"))
	if err != nil || !strings.Contains(string(data), `"five"`) {
		t.Errorf("the edited-away message is not in the session file (%v)", err)
	}
}

func TestFork(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("src", userMsgs("write it"))
	st := fx.open("/api/v2/conversations/src/events?session_id=" + sid)
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "f1", Name: "write", Args: `{"path":"f.txt","content":"x"}`}}}, faux.Response{Text: "Wrote it."})
	fx.ok("POST", "/api/v2/conversations/src/step", map[string]any{"session_id": sid, "auto_confirm": true})
	st.next("run_ended")
	full := fx.logOf("src")
	for _, after := range []int{len(full) - 1, 1} {
		r := fx.ok("POST", "/api/v2/conversations/src/fork?after_message="+itoaTest(after), nil)
		id := r.str("conversation_id")
		if id == "" || id == "src" || r.str("session_id") == "" {
			t.Fatalf("fork: %s", r)
		}
		if got := fx.logOf(id); !slices.Equal(got, full[:after+1]) {
			t.Errorf("fork after %d: %q, want %q", after, got, full[:after+1])
		}
		if name := fx.ok("GET", "/api/v2/conversations/"+id, nil).str("name"); !strings.HasPrefix(name, "Fork of src @ msg ") {
			t.Errorf("fork name %q", name)
		}
	}
	if got := fx.logOf("src"); !slices.Equal(got, full) {
		t.Errorf("the source changed: %q", got)
	}
}

func itoaTest(n int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + string(rune('0'+n))) }

func TestRerun(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("rr", userMsgs("write it"))
	st := fx.open("/api/v2/conversations/rr/events?session_id=" + sid)
	wantErr(t, fx.do("POST", "/api/v2/conversations/rr/rerun", map[string]any{"session_id": sid}), http.StatusBadRequest, "No assistant message found")
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "r1", Name: "write", Args: `{"path":"rr.txt","content":"first"}`}}}, faux.Response{Text: "ok"})
	fx.ok("POST", "/api/v2/conversations/rr/step", map[string]any{"session_id": sid, "auto_confirm": true})
	st.next("run_ended")
	wantErr(t, fx.do("POST", "/api/v2/conversations/rr/rerun", map[string]any{"session_id": sid}), http.StatusBadRequest, "No tool uses found in the last assistant message")
	fx.ok("PATCH", "/api/v2/conversations/rr/messages/0?truncate=1", map[string]any{"content": "write it again"})
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "r2", Name: "write", Args: `{"path":"rr.txt","content":"second"}`}}})
	fx.ok("POST", "/api/v2/conversations/rr/step", map[string]any{"session_id": sid})
	_, pend, _ := st.find(0, func(e event) bool { return e.typ() == "tool_pending" && e.str("tool_id") == "tool-r2" })
	if pend.str("tool_id") != "tool-r2" {
		t.Fatalf("no tool_pending for r2:\n%s", st.dump())
	}
	fx.ok("POST", "/api/v2/conversations/rr/interrupt", map[string]any{"session_id": sid})
	// The call was interrupted: its result says so. rerun puts it to a
	// person again.
	fx.faux.Push(faux.Response{Text: "again ok"})
	r := fx.ok("POST", "/api/v2/conversations/rr/rerun", map[string]any{"session_id": sid})
	ids := toStrings(r.m["tool_ids"])
	if len(ids) != 1 || !strings.HasPrefix(ids[0], "tool-r2-rerun-") || r.str("message") != "Re-running 1 tool(s)" {
		t.Fatalf("rerun: %s", r)
	}
	_, p2, ok := st.find(0, func(e event) bool { return e.typ() == "tool_pending" && e.str("tool_id") == ids[0] })
	if !ok {
		t.Fatalf("no tool_pending for the rerun:\n%s", st.dump())
	}
	fx.ok("POST", "/api/v2/conversations/rr/tool/confirm", map[string]any{"tool_id": p2.str("tool_id"), "action": "confirm"})
	if _, _, ok := st.find(0, func(e event) bool { return e.typ() == "generation_complete" && strings.Contains(e.raw, "again ok") }); !ok {
		t.Fatalf("the rerun did not continue:\n%s", st.dump())
	}
	if _, re, _ := st.find(0, func(e event) bool { return e.typ() == "run_ended" && strings.Contains(e.raw, "completed") }); re.raw == "" {
		t.Errorf("no completed run_ended")
	}
	if data, _ := os.ReadFile(filepath.Join(fx.cwd, "rr.txt")); string(data) != "second" {
		t.Errorf("rr.txt = %q", data)
	}
}

func TestElicitation(t *testing.T) {
	tests := []struct {
		name   string
		args   string
		answer map[string]any
		result string
		etype  string
	}{
		{"choice", `{"question":"Pick","options":["red","blue"]}`, map[string]any{"action": "accept", "value": "blue"}, `User selected: "blue"`, "choice"},
		{"confirmation", `{"question":"Sure?","kind":"confirm"}`, map[string]any{"action": "accept", "value": "yes"}, "User answered: yes", "confirmation"},
		{"text", `{"question":"Name?"}`, map[string]any{"action": "accept", "value": "Ada"}, "User answered: Ada", "text"},
		{"form", `{"question":"Details","fields":[{"name":"age","type":"integer","required":true}]}`, map[string]any{"action": "accept", "values": map[string]any{"age": 36}}, `User filled in the form: {"age":36}`, "form"},
		{"decline", `{"question":"Name?"}`, map[string]any{"action": "decline"}, "dismissed", "text"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, fixtureOptions{})
			id := "el" + string(rune('a'+i))
			sid := fx.create(id, userMsgs("ask me"))
			st := fx.open("/api/v2/conversations/" + id + "/events?session_id=" + sid)
			fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "q1", Name: "ask_user", Args: tt.args}}}, faux.Response{Text: "thanks"})
			fx.ok("POST", "/api/v2/conversations/"+id+"/step", map[string]any{"session_id": sid})
			ep := st.next("elicit_pending")
			if ep.str("elicit_type") != tt.etype {
				t.Errorf("elicit_pending = %s", ep.raw)
			}
			if c := fx.open("/api/v2/conversations/" + id + "/events").next("connected"); len(c.m["pending_elicitations"].([]any)) != 1 {
				t.Errorf("connected = %s", c.raw)
			}
			body := map[string]any{"elicit_id": ep.str("elicit_id")}
			for k, v := range tt.answer {
				body[k] = v
			}
			fx.ok("POST", "/api/v2/conversations/"+id+"/elicit/respond", body)
			res := st.next("message_added")
			if !strings.Contains(res.m["message"].(map[string]any)["content"].(string), tt.result) {
				t.Errorf("result = %s, want %q", res.raw, tt.result)
			}
			wantErr(t, fx.do("POST", "/api/v2/conversations/"+id+"/elicit/respond", body), http.StatusConflict,
				"Elicitation "+ep.str("elicit_id")+" was answered by another client")
		})
	}
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("elbad", userMsgs("ask"))
	st := fx.open("/api/v2/conversations/elbad/events?session_id=" + sid)
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "q2", Name: "ask_user", Args: `{"question":"Pick","options":["a"]}`}}})
	fx.ok("POST", "/api/v2/conversations/elbad/step", map[string]any{"session_id": sid})
	ep := st.next("elicit_pending")
	wantErr(t, fx.do("POST", "/api/v2/conversations/elbad/elicit/respond", map[string]any{"elicit_id": ep.str("elicit_id"), "action": "accept", "value": "z"}),
		http.StatusBadRequest, `Invalid answer: value: "z" is not one of the options ["a"]`)
}

func TestConfigAndAutoConfirm(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("cfg", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}},
		"config": map[string]any{"chat": map[string]any{"name": "Configured", "tools": []string{"write", "read"}, "thinking": "low"}}})
	c := fx.ok("GET", "/api/v2/conversations/cfg/config", nil)
	chat := c.m["chat"].(map[string]any)
	if chat["name"] != "Configured" || chat["thinking"] != "low" || chat["model"] != "faux/echo" || chat["confirm_all"] != true ||
		!slices.Equal(toStrings(chat["tools"]), []string{"read", "write"}) {
		t.Errorf("config = %s", c)
	}
	st := fx.open("/api/v2/conversations/cfg/events?session_id=" + sid)
	// auto_confirm N: the next N calls run without asking, across steps.
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "a1", Name: "write", Args: `{"path":"a1.txt","content":"1"}`}, {ID: "a2", Name: "write", Args: `{"path":"a2.txt","content":"2"}`}}},
		faux.Response{Text: "two written"})
	fx.ok("POST", "/api/v2/conversations/cfg/step", map[string]any{"session_id": sid, "auto_confirm": 2})
	if _, _, ok := st.find(0, func(e event) bool { return e.typ() == "generation_complete" && strings.Contains(e.raw, "two written") }); !ok {
		t.Fatalf("auto_confirm 2:\n%s", st.dump())
	}
	for _, e := range st.snapshot() {
		if e.typ() == "tool_pending" {
			t.Errorf("a call asked despite auto_confirm: %s", e.raw)
		}
	}
	if re := st.next("run_ended"); re.str("outcome") != "completed" {
		t.Errorf("run_ended = %s", re.raw)
	}
	fx.ok("POST", "/api/v2/conversations/cfg", map[string]any{"role": "user", "content": "once more"})
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "a3", Name: "write", Args: `{"path":"a3.txt","content":"3"}`}}}, faux.Response{Text: "three"})
	fx.ok("POST", "/api/v2/conversations/cfg/step", map[string]any{"session_id": sid})
	if p := st.next("tool_pending"); p.str("tool_id") != "tool-a3" {
		t.Errorf("the third call: %s", p.raw)
	}
	fx.ok("POST", "/api/v2/conversations/cfg/tool/confirm", map[string]any{"tool_id": "tool-a3", "action": "skip"})
	st.next("run_ended")
	r := fx.ok("PATCH", "/api/v2/conversations/cfg/config", map[string]any{"chat": map[string]any{"confirm_all": false, "model": "faux/echo"}})
	if r.m["config"].(map[string]any)["chat"].(map[string]any)["confirm_all"] != false {
		t.Errorf("PATCH config: %s", r)
	}
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/cfg/config", map[string]any{"chat": map[string]any{"tools": []string{"nope"}}}), http.StatusBadRequest,
		"Tool 'nope' not found (this conversation's tools: read, bash, edit, write, grep, find, ls, slow, ask_user, todo)")
}

// Removing an attachment or its conversation closes its streams; the
// attachments are listed.
func TestAttachments(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("att", userMsgs("hi"))
	st := fx.open("/api/v2/conversations/att/events?session_id=" + sid)
	st.next("connected")
	other := fx.open("/api/v2/conversations/att/events")
	osid := other.next("connected").str("session_id")
	list := fx.ok("GET", "/api/v2/sessions", nil)
	if len(list.list) != 2 {
		t.Fatalf("sessions: %s", list)
	}
	fx.ok("DELETE", "/api/v2/sessions/"+sid, nil)
	st.waitEnded()
	wantErr(t, fx.do("POST", "/api/v2/conversations/att/step", map[string]any{"session_id": sid}), http.StatusNotFound, "Session not found: "+sid)
	fx.ok("DELETE", "/api/v2/conversations/att", nil)
	other.waitEnded()
	wantErr(t, fx.do("GET", "/api/v2/conversations/att", nil), http.StatusNotFound, "Conversation not found: att")
	wantErr(t, fx.do("DELETE", "/api/v2/sessions/"+osid, nil), http.StatusNotFound, "Session not found: "+osid)
}
