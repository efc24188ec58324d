package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// subagentScript answers the parent and its children at the wire: a
// prompt "SPAWN:<job>" asks for a task of type explore with that job; a
// child's request (its first user message is the job) answers CHILD-TEXT,
// or streams a little and hangs when the job says HANG; a request after
// a tool result answers "parent done".
func subagentScript(r *wiremock.Request) wiremock.Script {
	msgs, _ := r.JSON["messages"].([]any)
	first, last := "", map[string]any{}
	for _, m := range msgs {
		m, _ := m.(map[string]any)
		if m["role"] == "user" && first == "" {
			first = e2eChatText(m["content"])
		}
		last = m
	}
	switch {
	case strings.HasPrefix(first, "JOB") && strings.Contains(first, "HANG"):
		return wiremock.Script{Text: []string{"looking ", "around ", "…"}, HangAfter: 2}
	case strings.HasPrefix(first, "JOB"):
		return wiremock.Script{Text: []string{"CHILD-", "TEXT"}, Usage: &wiremock.Usage{Input: 300, Output: 30}}
	case last["role"] == "tool":
		return wiremock.Script{Text: []string{"parent done"}, Usage: &wiremock.Usage{Input: 20, Output: 2}}
	}
	job := strings.TrimPrefix(first, "SPAWN:")
	args, _ := json.Marshal(map[string]string{"description": "look around", "prompt": job, "subagent_type": "explore"})
	return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "task1", Name: "task", Args: []string{string(args)}}}, Usage: &wiremock.Usage{Input: 10, Output: 1}}
}

// On agentd serve, a task call makes a child session that is listed, and
// that a second pi-server client watches with switch_session; the
// child's progress reaches the parent's clients as tool updates; the
// child's text is the tool's result and its tokens are in the parent's
// stats; its transcript names the parent's (parentSession); aborting the
// parent stops the child, as its watcher sees.
func TestServeSubagentIsASessionClientsWatch(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	e.mock.Handle(subagentScript)
	s := svStart(t, e)
	a := s.dial("a")
	b := s.dial("b")
	var done string // the child that completed

	t.Run("completes", func(t *testing.T) {
		a, b := a.on(t), b.on(t)
		svCreate(a, "p1")
		svPrompt(a, "p1", "SPAWN:JOB find the thing")
		upd := a.waitEvent("p1", "tool_execution_update")
		child := svStr(upd.m, "event", "partialResult", "details", "sessionId")
		if child == "" || svStr(upd.m, "event", "toolName") != "task" {
			a.fatalf("tool update without the child's session id: %s", upd)
		}
		end := a.waitEvent("p1", "tool_execution_end")
		if got := resultText(end); got != "CHILD-TEXT" || svAt(end.m, "event", "isError") == true {
			a.fatalf("task result %q: %s", got, end)
		}
		a.waitEvent("p1", "agent_end")

		listed := false
		for _, si := range svArr(b.ok(svM{"id": "b-list", "type": "list_sessions"}).m, "data", "sessions") {
			listed = listed || svStr(si, "sessionId") == child
		}
		if !listed {
			t.Fatalf("the child %s is not in list_sessions", child)
		}
		done = child
		// Finished and unwatched, it is known, not loaded: a model that
		// starts child after child does not fill the session limit.
		if n, _ := svNum(a.must("get_metrics", nil).m, "data", "sessionCount"); n != 1 {
			t.Errorf("%v sessions loaded, want only the parent", n)
		}
		st := a.must("get_session_stats", svM{"sessionId": "p1"})
		if in, _ := svNum(st.m, "data", "tokens", "input"); in != 10+20+300 {
			t.Errorf("parent's input tokens %v, want the child's 300 counted: %s", in, st)
		}
		cs := b.ok(svM{"id": "b-state1", "type": "get_state", "sessionId": child})
		ps := a.must("get_state", svM{"sessionId": "p1"})
		info, err := transcript.ReadInfo(svStr(cs.m, "data", "sessionFile"))
		if err != nil {
			t.Fatal(err)
		}
		if info.ParentSession == "" || info.ParentSession != svStr(ps.m, "data", "sessionFile") {
			t.Errorf("child's parentSession %q, parent's file %q", info.ParentSession, svStr(ps.m, "data", "sessionFile"))
		}
	})

	t.Run("abort", func(t *testing.T) {
		a, b := a.on(t), b.on(t)
		svCreate(a, "p2")
		// The prompt's response comes when its run ends: not waited for.
		a.send(svM{"id": "pr2", "type": "prompt", "sessionId": "p2", "message": "SPAWN:JOB HANG"})
		upd := a.waitEvent("p2", "tool_execution_update")
		child := svStr(upd.m, "event", "partialResult", "details", "sessionId")
		b.ok(svM{"id": "watch", "type": "switch_session", "sessionId": child})
		// The child runs (its model hangs mid-answer) while b watches.
		if cs := b.ok(svM{"id": "b-state2", "type": "get_state", "sessionId": child}); svAt(cs.m, "data", "isStreaming") != true {
			b.fatalf("the child is not running: %s", cs)
		}
		a.must("abort", svM{"sessionId": "p2"})
		end := a.waitEvent("p2", "tool_execution_end")
		if svAt(end.m, "event", "isError") != true || !strings.Contains(resultText(end), "stopped before it finished") {
			a.fatalf("task result after abort: %s", end)
		}
		b.waitEvent(child, "agent_end")
		if cs := b.ok(svM{"id": "b-state3", "type": "get_state", "sessionId": child}); svAt(cs.m, "data", "isStreaming") != false {
			b.fatalf("the child still streams: %s", cs)
		}
	})

	// After kill -9 and a restart, the child is still a session under
	// its id, in its type's read-only sandbox with its type's tools (the
	// server's is workspace-write).
	t.Run("survives kill -9", func(t *testing.T) {
		if done == "" {
			t.Skip("no child completed")
		}
		a.close()
		b.close()
		s.kill9()
		s2 := s.restart()
		cfg := rsOK(t, s2, "GET", rsConvPath(done)+"/config", nil)
		chat, _ := cfg.m["chat"].(map[string]any)
		if chat["sandbox"] != "read-only" {
			t.Errorf("child's sandbox after restart %v, want read-only: %s", chat["sandbox"], cfg)
		}
		var tools []string
		for _, x := range svArr(chat, "tools") {
			tools = append(tools, x.(string))
		}
		slices.Sort(tools)
		if want := []string{"ask_user", "find", "grep", "ls", "read", "todo"}; !slices.Equal(tools, want) {
			t.Errorf("child's tools after restart %v, want %v", tools, want)
		}
	})
}

// agentd rpc hosts no list of sessions: the child exists as its
// transcript, beside the parent's, naming it as parentSession.
func TestRPCSubagentTranscript(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	e.mock.Handle(subagentScript)
	input := `{"type":"prompt","message":"SPAWN:JOB find it"}` + "\n"
	r := runIn(t, e.cwd, e.home, []string{"MOCK_API_KEY=k"}, input, "rpc", "--model", "mock/mock-model", "--data-dir", e.data)
	if r.code != 0 || !strings.Contains(r.stdout, "CHILD-TEXT") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	var files []string
	_ = filepath.Walk(filepath.Join(e.data, "sessions"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".jsonl") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 2 {
		t.Fatalf("session files %v, want the parent's and the child's", files)
	}
	parents := map[string]string{}
	for _, f := range files {
		info, err := transcript.ReadInfo(f)
		if err != nil {
			t.Fatal(err)
		}
		parents[f] = info.ParentSession
	}
	n := 0
	for f, p := range parents {
		if p != "" {
			n++
			if _, ok := parents[p]; !ok || p == f {
				t.Errorf("%s names %q as its parent", f, p)
			}
		}
	}
	if n != 1 {
		t.Errorf("parents %v, want one child naming the other", parents)
	}
}

// resultText is the text of a tool_execution_end frame's result.
func resultText(f svFrame) string {
	var b strings.Builder
	for _, c := range svArr(f.m, "event", "result", "content") {
		b.WriteString(svStr(c, "text"))
	}
	return b.String()
}

// On agentd serve, a child's tool approval reaches the parent's client as
// an extension_ui_request under "sub-<the child's id>"; answered there,
// the child's call runs and its result comes back as the task's.
func TestServeSubagentApprovalReachesTheParentsClient(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	e.mock.Handle(func(r *wiremock.Request) wiremock.Script {
		msgs, _ := r.JSON["messages"].([]any)
		first, last := "", map[string]any{}
		for _, m := range msgs {
			m, _ := m.(map[string]any)
			if m["role"] == "user" && first == "" {
				first = e2eChatText(m["content"])
			}
			last = m
		}
		switch {
		case strings.HasPrefix(first, "JOB") && last["role"] == "tool":
			return wiremock.Script{Text: []string{"child ran: " + strings.TrimSpace(e2eChatText(last["content"]))}}
		case strings.HasPrefix(first, "JOB"):
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "b1", Name: "bash", Args: []string{`{"command":"echo approved-run"}`}}}}
		case last["role"] == "tool":
			return wiremock.Script{Text: []string{"parent done"}}
		}
		args, _ := json.Marshal(map[string]string{"description": "run it", "prompt": "JOB run echo", "subagent_type": "general"})
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "task1", Name: "task", Args: []string{string(args)}}}}
	})
	s := svLaunch(t, e, svOpts{}, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	a := s.dial("a")
	svCreate(a, "pa")
	a.send(svM{"id": "pr", "type": "prompt", "sessionId": "pa", "message": "go"})
	req := a.waitEvent("pa", "extension_ui_request")
	rid := svStr(req.m, "event", "requestId")
	if rid != "sub-tool-b1" || !strings.Contains(svStr(req.m, "event", "title"), "[subagent general]") {
		a.fatalf("the relayed approval: %s", req)
	}
	a.send(svM{"id": "ans", "type": "extension_ui_response", "sessionId": "pa", "requestId": rid,
		"response": svM{"method": "select", "value": "Allow"}})
	end := a.waitEvent("pa", "tool_execution_end")
	if got := resultText(end); svStr(end.m, "event", "toolName") != "task" || !strings.Contains(got, "approved-run") {
		a.fatalf("task result %q: %s", got, end)
	}
	svWantOK(t, a.response("pr"))
}
