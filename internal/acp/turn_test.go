package acp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
)

func TestStopReasons(t *testing.T) {
	tests := []struct {
		name string
		turn turn
		want string
		code int
	}{
		{"answered", turn{outcome: session.OutcomeCompleted, stop: llm.StopStop}, StopEndTurn, 0},
		{"cut at max tokens", turn{outcome: session.OutcomeCompleted, stop: llm.StopLength}, StopMaxTokens, 0},
		{"cancelled by the client", turn{cancelled: true, stop: llm.StopStop}, StopCancelled, 0},
		{"aborted", turn{outcome: session.OutcomeCancelled, stop: llm.StopAborted}, StopCancelled, 0},
		{"too many turns", turn{outcome: session.OutcomeFailed, stop: llm.StopError, errKind: agent.KindRunLimit, errMsg: "stopped after 50 turns"}, StopMaxTurnRequests, 0},
		{"refused", turn{outcome: session.OutcomeFailed, stop: llm.StopError, errKind: llm.ErrBadRequest, errMsg: "the model refused to answer this request (cyber)"}, StopRefusal, 0},
		{"provider error", turn{outcome: session.OutcomeFailed, stop: llm.StopError, errKind: llm.ErrAuth, errMsg: "401 invalid x-api-key"}, "", CodeInternalError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tt.turn.result()
			if tt.code != 0 {
				e, ok := err.(*Error)
				if !ok || e.Code != tt.code || e.Message != tt.turn.errMsg {
					t.Fatalf("got %v %v, want error %d %q", r, err, tt.code, tt.turn.errMsg)
				}
				return
			}
			if err != nil || r.(promptResult).StopReason != tt.want {
				t.Fatalf("got %v %v, want %s", r, err, tt.want)
			}
		})
	}
}

// ask_user's yes/no and choice questions reach the editor as permission
// requests whose options are the answers; other kinds are cancelled.
func TestQuestionsBecomePermissionRequests(t *testing.T) {
	tests := []struct {
		args, answer, want string
	}{
		{`{"question":"Proceed?","kind":"confirm"}`, "yes", "user answered: yes"},
		{`{"question":"Proceed?","kind":"confirm"}`, "no", "user answered: no"},
		{`{"question":"Colour?","options":["red","green"]}`, "option-1", "green"},
		{`{"question":"Name?","kind":"input"}`, "", "dismissed"},
	}
	for _, tt := range tests {
		t.Run(tt.args+tt.answer, func(t *testing.T) {
			c := startAgent(t, nil)
			c.answer = selected(tt.answer)
			sid := c.newSession(t.TempDir())
			result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/tool ask_user " + tt.args}}}))
			var end map[string]any
			for _, u := range c.takeUpdates() {
				if u["sessionUpdate"] == "tool_call_update" && u["status"] != "in_progress" {
					end = u
				}
			}
			if end == nil || !strings.Contains(strings.ToLower(fmt.Sprint(end["content"])), tt.want) {
				t.Fatalf("answer %v", end)
			}
			if tt.answer != "" && len(c.asked) != 1 {
				t.Fatalf("asked %d times", len(c.asked))
			}
		})
	}
}

func TestCloseAndBusy(t *testing.T) {
	c := startAgent(t, &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir(), policy: askPolicy(t)})
	sid := c.newSession(t.TempDir())
	id := c.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/bash echo waits"}}})
	for len(c.asked) == 0 {
		f := <-c.frames
		c.handle(f["method"].(string), f)
	}
	busy := c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "second"}}})
	if e, _ := busy["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "already running") {
		t.Fatalf("second prompt: %v", busy)
	}
	// Closing the session ends the turn waiting on the permission.
	result(t, c.call("session/close", map[string]any{"sessionId": sid}))
	if r := result(t, c.wait(id)); r["stopReason"] != StopCancelled {
		t.Fatalf("prompt of a closed session: %v", r)
	}
	gone := c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "x"}}})
	if e, _ := gone["error"].(map[string]any); e == nil || e["code"] != float64(CodeResourceNotFound) {
		t.Fatalf("prompt after close: %v", gone)
	}
}

// A tool call left waiting for approval when the editor went away is
// asked about again when the session is loaded, and runs when allowed.
func TestLoadAsksForAParkedApproval(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir(), policy: askPolicy(t)}
	cwd := t.TempDir()
	c := startAgent(t, ts)
	sid := c.newSession(cwd)
	c.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/bash echo parked-run"}}})
	for len(c.asked) == 0 {
		f := <-c.frames
		c.handle(f["method"].(string), f)
	}
	c.w.Close() // the editor quits with the request open
	for range c.frames {
	}

	c2 := startAgent(t, ts)
	c2.answer = selected(AllowOnce)
	c2.call("initialize", map[string]any{"protocolVersion": 1})
	result(t, c2.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	// The request and the run's updates may come before the load's
	// response or after it.
	timeout := time.After(20 * time.Second)
	for {
		for _, u := range c2.takeUpdates() {
			if u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" {
				if !strings.Contains(fmt.Sprint(u["content"]), "parked-run") || len(c2.asked) != 1 {
					t.Fatalf("after the approval: %v (asked %d)", u, len(c2.asked))
				}
				return
			}
		}
		select {
		case f := <-c2.frames:
			m, _ := f["method"].(string)
			c2.handle(m, f)
		case <-timeout:
			t.Fatal("the parked call never ran")
		}
	}
}
