package convapi

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

func TestCreateSendStepStream(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("c1", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "first"}}})
	st := fx.open("/api/v2/conversations/c1/events?session_id=" + sid)
	conn := st.next("connected")
	if conn.str("session_id") != sid || conn.m["generating"] != false || conn.id == "" {
		t.Fatalf("connected = %s (id %q)", conn.raw, conn.id)
	}
	if pt, ok := conn.m["pending_tools"].([]any); !ok || len(pt) != 0 {
		t.Errorf("pending_tools = %v, want []", conn.m["pending_tools"])
	}
	if st.next("ping").id != conn.id {
		t.Errorf("the first ping's id is not the connected event's")
	}

	fx.faux.Push(faux.Response{Text: "Hello there, person"})
	if r := fx.ok("POST", "/api/v2/conversations/c1", map[string]any{"role": "user", "content": "second"}); r.str("status") != "ok" {
		t.Fatalf("POST message: %s", r)
	}
	added := st.next("message_added")
	if added.m["message"].(map[string]any)["content"] != "second" {
		t.Errorf("message_added = %s", added.raw)
	}
	r := fx.ok("POST", "/api/v2/conversations/c1/step", map[string]any{"session_id": sid})
	if r.str("status") != "ok" || r.str("message") != "Step started" || r.str("session_id") != sid {
		t.Fatalf("step: %s", r)
	}
	st.next("generation_started")
	var text strings.Builder
	for {
		_, ev, ok := st.find(st.cursor, func(e event) bool {
			return e.typ() == "generation_progress" || e.typ() == "message_added"
		})
		if !ok {
			t.Fatalf("stream:\n%s", st.dump())
		}
		st.cursor++
		for st.snapshot()[st.cursor-1].raw != ev.raw {
			st.cursor++
		}
		if ev.typ() == "message_added" {
			msg := ev.m["message"].(map[string]any)
			if msg["role"] != "assistant" || msg["content"] != "Hello there, person" {
				t.Errorf("assistant message_added = %s", ev.raw)
			}
			break
		}
		text.WriteString(ev.str("token"))
	}
	if text.String() != "Hello there, person" {
		t.Errorf("tokens = %q", text.String())
	}
	complete := st.next("generation_complete")
	if complete.m["message"].(map[string]any)["content"] != "Hello there, person" {
		t.Errorf("generation_complete = %s", complete.raw)
	}

	// Seqs never go down (the events one session event stands for share
	// its seq), and every frame carries one.
	var last uint64
	for _, e := range st.snapshot() {
		if e.id == "" {
			t.Errorf("a frame without an id: %s", e.raw)
		}
		if e.typ() != "ping" && e.typ() != "connected" && e.seq() < last {
			t.Errorf("seq %d after %d: %s", e.seq(), last, e.raw)
		}
		if e.typ() != "ping" && e.typ() != "connected" {
			last = max(last, e.seq())
		}
	}

	got := fx.ok("GET", "/api/v2/conversations/c1", nil)
	log, _ := got.m["log"].([]any)
	var roles []string
	for _, m := range log {
		roles = append(roles, m.(map[string]any)["role"].(string)+":"+m.(map[string]any)["content"].(string))
	}
	if want := []string{"user:first", "user:second", "assistant:Hello there, person"}; !slices.Equal(roles, want) {
		t.Errorf("log = %q, want %q", roles, want)
	}
	if got.m["session"].(map[string]any)["id"] != sid {
		t.Errorf("session = %v", got.m["session"])
	}
	// The design document's path serves the same conversation.
	if alias := fx.ok("GET", "/api/conversations/c1", nil); len(alias.m["log"].([]any)) != 3 {
		t.Errorf("alias: %s", alias)
	}
}

func TestToolConfirmation(t *testing.T) {
	tests := []struct {
		name    string
		confirm map[string]any
		// file is what the write leaves, "" for no file.
		file     string
		result   string // in the tool result the model gets
		executes bool
		message  string
	}{
		{name: "confirm", confirm: map[string]any{"action": "confirm"}, file: "original", executes: true, message: "Tool confirmed"},
		{name: "edit", confirm: map[string]any{"action": "edit", "content": "edited by a person"}, file: "edited by a person", executes: true, message: "Tool edited"},
		{name: "skip", confirm: map[string]any{"action": "skip"}, result: "skipped", message: "Tool skipped"},
		{name: "reject with feedback", confirm: map[string]any{"action": "reject", "feedback": "use another file"}, result: "use another file", message: "Tool rejected"},
		{name: "auto", confirm: map[string]any{"action": "auto", "count": 2}, file: "original", executes: true, message: "Tool confirmed; the next 2 tool calls run without asking"},
		{name: "always", confirm: map[string]any{"action": "always"}, file: "original", executes: true, message: "Tool confirmed; write runs without asking for the rest of the conversation"},
		{name: "the design document's id", confirm: map[string]any{"action": "confirm"}, file: "original", executes: true, message: "Tool confirmed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, fixtureOptions{})
			id := "tools" + string(rune('a'+i))
			sid := fx.create(id, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "write it"}}})
			st := fx.open("/api/v2/conversations/" + id + "/events?session_id=" + sid)
			st.next("connected")
			fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "call1", Name: "write", Args: `{"path":"out.txt","content":"original"}`}}},
				faux.Response{Text: "Done."})
			fx.ok("POST", "/api/v2/conversations/"+id+"/step", map[string]any{"session_id": sid})
			pend := st.next("tool_pending")
			toolID := pend.str("tool_id")
			tu := pend.m["tooluse"].(map[string]any)
			if toolID != "tool-call1" || tu["tool"] != "write" || tu["content"] != "original" || !slices.Equal(toStrings(tu["args"]), []string{"out.txt"}) || pend.m["auto_confirm"] != false {
				t.Fatalf("tool_pending = %s", pend.raw)
			}
			// A client that connects now sees it in its snapshot.
			late := fx.open("/api/v2/conversations/" + id + "/events")
			lc := late.next("connected")
			if pts := lc.m["pending_tools"].([]any); len(pts) != 1 || pts[0].(map[string]any)["tool_id"] != toolID {
				t.Errorf("connected pending_tools = %v", lc.m["pending_tools"])
			}
			body := map[string]any{"session_id": sid, "tool_id": toolID}
			if tt.name == "the design document's id" {
				body = map[string]any{"id": toolID}
			}
			for k, v := range tt.confirm {
				body[k] = v
			}
			r := fx.ok("POST", "/api/v2/conversations/"+id+"/tool/confirm", body)
			if r.str("message") != tt.message {
				t.Errorf("confirm answered %s, want message %q", r, tt.message)
			}
			if tt.executes {
				if ex := st.next("tool_executing"); ex.str("tool_id") != toolID {
					t.Errorf("tool_executing = %s", ex.raw)
				}
			}
			if tt.executes {
				// tool_complete as the tool ends; the result follows once
				// every call of the message has ended.
				c := st.next("tool_complete")
				if c.str("tool_id") != toolID || c.m["success"] != true {
					t.Errorf("tool_complete = %s", c.raw)
				}
			}
			res := st.next("message_added")
			msg := res.m["message"].(map[string]any)
			if msg["role"] != "system" || msg["call_id"] != "call1" || !strings.Contains(msg["content"].(string), tt.result) {
				t.Errorf("tool result = %s, want one containing %q", res.raw, tt.result)
			}
			st.next("generation_complete") // the answer after the tool
			data, err := os.ReadFile(filepath.Join(fx.cwd, "out.txt"))
			switch {
			case tt.file == "" && err == nil:
				t.Errorf("the write ran: %q", data)
			case tt.file != "" && string(data) != tt.file:
				t.Errorf("out.txt = %q (%v), want %q", data, err, tt.file)
			}
			// The first answer won; a late one learns how it ended.
			late2 := fx.do("POST", "/api/v2/conversations/"+id+"/tool/confirm", map[string]any{"tool_id": toolID, "action": "confirm"})
			wantErr(t, late2, http.StatusConflict, "Tool "+toolID+" was answered by another client")
		})
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestStepWhileRunningConflicts(t *testing.T) {
	fx := newFixture(t, fixtureOptions{chunkDelay: 20 * time.Millisecond})
	sid := fx.create("busy", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	st := fx.open("/api/v2/conversations/busy/events?session_id=" + sid)
	fx.faux.Push(faux.Response{Text: strings.Repeat("word ", 40)})
	fx.ok("POST", "/api/v2/conversations/busy/step", map[string]any{"session_id": sid})
	st.next("generation_progress")
	wantErr(t, fx.do("POST", "/api/v2/conversations/busy/step", map[string]any{"session_id": sid}), http.StatusConflict, "Generation already in progress")
	wantErr(t, fx.do("POST", "/api/v2/conversations/busy", map[string]any{"role": "user", "content": "more"}), http.StatusConflict,
		"Cannot add message while generation is in progress")
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/busy/config", map[string]any{"chat": map[string]any{"thinking": "low"}}), http.StatusConflict,
		"Cannot update config while generation is in progress")
	wantErr(t, fx.do("DELETE", "/api/v2/conversations/busy", nil), http.StatusConflict, "Cannot delete while generation is in progress")
	r := fx.ok("POST", "/api/v2/conversations/busy/interrupt", map[string]any{"session_id": sid})
	if r.str("message") != "Interrupted" {
		t.Errorf("interrupt: %s", r)
	}
	st.next("interrupted")
	if r := fx.ok("POST", "/api/v2/conversations/busy/interrupt", map[string]any{"session_id": sid}); r.str("message") != "Already interrupted or not generating" {
		t.Errorf("second interrupt: %s", r)
	}
}

// Interrupt at every point of a run: nothing of the run happens after
// the interrupted event, and a partly streamed answer is kept, marked.
func TestInterruptAtEveryPoint(t *testing.T) {
	tests := []struct {
		name string
		push []faux.Response
		// until is the event to wait for before interrupting.
		until string
		// kept checks what the log holds afterwards.
		kept func(t *testing.T, log []any)
	}{
		{name: "while streaming", push: []faux.Response{{Text: strings.Repeat("token ", 200)}}, until: "generation_progress",
			kept: func(t *testing.T, log []any) {
				last := log[len(log)-1].(map[string]any)
				md, _ := last["metadata"].(map[string]any)
				if last["role"] != "assistant" || !strings.HasPrefix(last["content"].(string), "token") || md["interrupted"] != true {
					t.Errorf("the partly streamed answer is not kept and marked: %v", last)
				}
			}},
		{name: "while a tool waits for confirmation", push: []faux.Response{{ToolCalls: []faux.ToolCall{{ID: "w1", Name: "write", Args: `{"path":"never.txt","content":"x"}`}}}},
			until: "tool_pending", kept: func(t *testing.T, log []any) {}},
		{name: "while a tool runs", push: []faux.Response{{ToolCalls: []faux.ToolCall{{ID: "s1", Name: "slow", Args: `{"ms":60000,"text":"long"}`}}}},
			until: "tool_output", kept: func(t *testing.T, log []any) {}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, fixtureOptions{chunkDelay: 5 * time.Millisecond})
			id := "int" + string(rune('a'+i))
			sid := fx.create(id, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
			st := fx.open("/api/v2/conversations/" + id + "/events?session_id=" + sid)
			fx.faux.Push(tt.push...)
			fx.faux.Push(faux.Response{Text: "AFTER THE INTERRUPT"})
			body := map[string]any{"session_id": sid}
			if tt.until == "tool_output" {
				body["auto_confirm"] = true
			}
			fx.ok("POST", "/api/v2/conversations/"+id+"/step", body)
			st.next(tt.until)
			if r := fx.ok("POST", "/api/v2/conversations/"+id+"/interrupt", map[string]any{"session_id": sid}); r.str("message") != "Interrupted" {
				t.Fatalf("interrupt: %s", r)
			}
			intr := st.next("interrupted")
			// The interrupt answered after the run ended: the interrupted
			// event is the last of the run.
			c := fx.ok("GET", "/api/v2/conversations/"+id, nil)
			if seq := uint64(c.m["seq"].(float64)); seq != intr.seq() {
				t.Errorf("events after interrupted (seq %d): the conversation is at seq %d\n%s", intr.seq(), seq, st.dump())
			}
			if strings.Contains(string(c.body), "AFTER THE INTERRUPT") {
				t.Errorf("the model wrote after the interrupt: %s", c.body)
			}
			if _, err := os.Stat(filepath.Join(fx.cwd, "never.txt")); err == nil {
				t.Errorf("the write that waited for confirmation ran")
			}
			tt.kept(t, c.m["log"].([]any))
			if conn := fx.open("/api/v2/conversations/" + id + "/events").next("connected"); conn.m["generating"] != false || len(conn.m["pending_tools"].([]any)) != 0 {
				t.Errorf("after the interrupt: %s", conn.raw)
			}
		})
	}
}

// Two clients race to answer one confirmation: exactly one wins, the
// other is told how it was settled.
func TestConfirmRace(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("race", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	st := fx.open("/api/v2/conversations/race/events?session_id=" + sid)
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "r1", Name: "write", Args: `{"path":"r.txt","content":"x"}`}}}, faux.Response{Text: "ok"})
	fx.ok("POST", "/api/v2/conversations/race/step", map[string]any{"session_id": sid})
	tid := st.next("tool_pending").str("tool_id")
	results := make(chan reply, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			action := "confirm"
			if i%2 == 1 {
				action = "skip"
			}
			results <- fx.do("POST", "/api/v2/conversations/race/tool/confirm", map[string]any{"tool_id": tid, "action": action})
		}(i)
	}
	wg.Wait()
	close(results)
	won := 0
	for r := range results {
		switch r.status {
		case http.StatusOK:
			won++
		case http.StatusConflict:
			if r.str("error") != "Tool "+tid+" was answered by another client" {
				t.Errorf("loser: %s", r)
			}
		default:
			t.Errorf("unexpected answer: %s", r)
		}
	}
	if won != 1 {
		t.Errorf("%d answers won, want exactly 1", won)
	}
}
