package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// busy starts a run whose model does not answer for a minute, so that
// what is queued stays queued. It returns once the request is out: the
// run takes the steering queued before its first request with it.
func busy(h *harness) {
	h.t.Helper()
	h.srv.Enqueue(wiremock.Script{Text: []string{"late"}, FirstDelay: time.Minute})
	h.prompt("start")
	for len(h.srv.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
}

// The queues refuse what would not fit, with a reason the client can
// show, and the defaults hold without any configuration.
func TestQueueLimitsByDefault(t *testing.T) {
	tests := []struct {
		name   string
		sizes  []int // bytes of text of each queued message
		steer  bool
		refuse int    // index of the first refused message, -1 for none
		want   string // in the refusal
	}{
		{"count", repeat(65, 10), false, 64, "Queue full: at most 64 queued messages"},
		{"count across both queues", repeat(65, 10), true, 64, "Queue full: at most 64 queued messages"},
		{"one too large", []int{16<<20 + 1}, false, 0, "Queued message too large"},
		{"total bytes", repeat(5, 4<<20), false, 4, "Queue full"},
		{"within limits", repeat(64, 1000), false, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
			busy(h)
			for i, n := range tt.sizes {
				m := session.UserMessage(strings.Repeat("x", n), nil)
				var err error
				if tt.steer && i%2 == 0 {
					err = h.s.Steer(m)
				} else {
					err = h.s.FollowUp(m)
				}
				switch {
				case i < tt.refuse || tt.refuse < 0:
					if err != nil {
						t.Fatalf("message %d refused: %v", i, err)
					}
				case i == tt.refuse:
					if err == nil || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("message %d: error %v, want %q", i, err, tt.want)
					}
					if p := h.s.Agent().PendingCount(); p != i {
						t.Fatalf("%d queued after a refusal, want %d", p, i)
					}
					return
				}
			}
		})
	}
}

func repeat(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

// Live listeners get pi's whole queue in every queue_update; the log
// keeps each queued text only as a short preview, so that n queued
// messages cost the log O(n) small strings per update instead of a copy
// of the whole queue.
func TestLoggedQueueUpdateIsSmall(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
	busy(h)
	const n, size = 32, 100 << 10
	for i := 0; i < n; i++ {
		if err := h.s.FollowUp(session.UserMessage(fmt.Sprintf("%02d", i)+strings.Repeat("y", size), nil)); err != nil {
			t.Fatal(err)
		}
	}
	live := h.waitEvent(func(ev session.Event) bool {
		return ev.Type == "queue_update" && len(ev.Agent.FollowUp) == n
	})
	for _, s := range live.Agent.FollowUp {
		if len(s) != size+2 {
			t.Fatalf("a live queue_update carries %d bytes of a %d-byte message", len(s), size+2)
		}
	}
	logged, ok := h.s.EventsSince(0)
	if !ok {
		t.Fatal("log does not reach back to the start")
	}
	updates := 0
	for _, ev := range logged {
		if ev.Type != "queue_update" {
			continue
		}
		updates++
		total := 0
		for i, s := range ev.Agent.FollowUp {
			total += len(s)
			if !strings.HasPrefix(s, fmt.Sprintf("%02d", i)) {
				t.Fatalf("logged preview %d is %.10q", i, s)
			}
		}
		if total > len(ev.Agent.FollowUp)*300 {
			t.Fatalf("a logged queue_update of %d messages keeps %d bytes", len(ev.Agent.FollowUp), total)
		}
	}
	if updates != n {
		t.Fatalf("%d queue_update events logged, want %d", updates, n)
	}
}

// The queue limits are set through session.Config.
func TestQueueLimitsFromConfig(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.MaxQueued, c.MaxQueuedBytes = "", 1, 100 })
	busy(h)
	if err := h.s.Steer(session.UserMessage(strings.Repeat("s", 101), nil)); err == nil || !strings.Contains(err.Error(), "at most 100 bytes") {
		t.Fatalf("too large: %v", err)
	}
	if err := h.s.Prompt(session.UserMessage("first", nil), session.BehaviorFollowUp); err != nil {
		t.Fatal(err)
	}
	err := h.s.PromptThen(session.UserMessage("second", nil), session.BehaviorSteer, func() { t.Error("a refused prompt was accepted") })
	if !errors.Is(err, agent.ErrQueueFull) || !strings.Contains(err.Error(), "at most 1 queued message") {
		t.Fatalf("second: %v", err)
	}
}

// The log keeps a tool_execution_update without its partial result:
// bash sends its whole output so far every 100 ms, and
// tool_execution_end carries the final one.
func TestLoggedToolUpdateHasNoPartialResult(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "t1", Name: "noisy"}}}, faux.Response{Text: "done"})
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream,
		Tools: []tool.Tool{&updatingTool{count: 20, size: 50 << 10}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	liveBytes := 0
	s.Subscribe(func(ev session.Event) {
		if ev.Type == "tool_execution_update" {
			liveBytes += len(ev.Agent.Partial.Content[0].Text)
		}
	})
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if liveBytes != 20*50<<10 {
		t.Fatalf("live listeners got %d bytes of partial output", liveBytes)
	}
	logged, _ := s.EventsSince(0)
	updates := 0
	for _, ev := range logged {
		switch ev.Type {
		case "tool_execution_update":
			updates++
			if pr := ev.Agent.Partial; pr != nil && (len(pr.Content) != 0 || pr.Details != nil) {
				t.Fatalf("logged tool_execution_update keeps a partial result (%d blocks, details %T)", len(pr.Content), pr.Details)
			}
			if ev.Agent.ToolCallID != "t1" || ev.Agent.ToolName != "noisy" {
				t.Fatalf("logged tool_execution_update lost its call: %+v", ev.Agent)
			}
		case "tool_execution_end":
			if ev.Agent.Result == nil || ev.Agent.Result.Content[0].Text != "done" {
				t.Fatalf("logged tool_execution_end %+v", ev.Agent.Result)
			}
		}
	}
	if updates != 20 {
		t.Fatalf("%d updates logged", updates)
	}
}

// bigTool returns size bytes of text.
type bigTool struct{ size int }

func (t *bigTool) Spec() llm.Tool {
	return llm.Tool{Name: "big", Description: "returns a lot", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (t *bigTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	return tool.TextResult(strings.Repeat("z", t.size), nil)
}

// The log is bounded in bytes as well as in events: big messages push
// the oldest events out long before the count limit is reached, and a
// cursor before them is too old.
func TestEventLogIsBoundedInBytes(t *testing.T) {
	p := faux.New(faux.Options{})
	var script []faux.Response
	for i := 0; i < 12; i++ {
		script = append(script, faux.Response{ToolCalls: []faux.ToolCall{{ID: fmt.Sprint("b", i), Name: "big", Args: fmt.Sprintf(`{"n":%d}`, i)}}})
	}
	p.Push(append(script, faux.Response{Text: "done"})...)
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream,
		Tools: []tool.Tool{&bigTool{size: 2 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	seq := s.Seq()
	if seq >= 4096 {
		t.Fatalf("%d events: the count limit alone would drop some", seq)
	}
	if _, ok := s.EventsSince(0); ok {
		t.Fatalf("the log still holds all %d events, 24 MiB of tool output and more", seq)
	}
	// The newest events are there, and what they keep is within the
	// default budget of 16 MiB.
	logged, ok := s.EventsSince(seq - 2)
	if !ok || len(logged) != 2 || logged[1].Seq != seq {
		t.Fatalf("the newest events are gone: ok %v, %d events", ok, len(logged))
	}
	all, _ := s.EventsSince(logged[0].Seq - 1)
	for first := logged[0].Seq - 1; ; first-- {
		evs, ok := s.EventsSince(first - 1)
		if !ok {
			break
		}
		all = evs
	}
	text := 0
	for _, ev := range all {
		if a := ev.Agent; a != nil {
			if a.Message != nil {
				text += len(a.Message.TextContent())
			}
			for _, m := range append(a.ToolResults, a.Messages...) {
				text += len(m.TextContent())
			}
			if a.Result != nil && len(a.Result.Content) > 0 {
				text += len(a.Result.Content[0].Text)
			}
		}
	}
	if text > 16<<20 {
		t.Fatalf("the %d logged events keep %d bytes of text", len(all), text)
	}
}

// The log's byte bound is set through session.Config.
func TestEventLogBytesFromConfig(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.EventLogBytes = "", 8<<10 })
	h.srv.Enqueue(wiremock.Script{Text: []string{strings.Repeat("w", 10<<10)}})
	h.prompt("talk")
	h.wait()
	if _, ok := h.s.EventsSince(0); ok {
		t.Fatal("an 8 KiB log kept a run with 10 KiB of text three times over")
	}
}

// The model calls a tool forever; the run ends after the turn limit with
// a failed outcome and the reason on the last assistant message.
func TestTurnLimitByDefault(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if len(h.srv.Requests()) > 260 { // old code would go on for ever
			return wiremock.Script{Text: []string{"giving up"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c", Name: "ls", Args: []string{`{"path":"."}`}}}}
	})
	h.prompt("loop")
	h.wait()
	if n := len(h.srv.Requests()); n != 200 {
		t.Fatalf("%d model requests, want 200", n)
	}
	checkStopped(t, h, "200 turns")
}

// checkStopped checks that the run failed and that its last assistant
// message says why.
func checkStopped(t *testing.T, h *harness, reason string) {
	t.Helper()
	msgs := h.s.Messages()
	last := msgs[len(msgs)-1]
	if last.Role != llm.RoleAssistant || last.StopReason != llm.StopError || !strings.Contains(last.ErrorMessage, reason) {
		t.Fatalf("last message %s %s %q, want an error saying %q", last.Role, last.StopReason, last.ErrorMessage, reason)
	}
	if o := h.s.LastOutcome(); o != session.OutcomeFailed {
		t.Fatalf("outcome %s", o)
	}
	end := h.waitEvent(func(ev session.Event) bool { return ev.Type == session.EventStateChanged && ev.Outcome != "" })
	if end.Outcome != session.OutcomeFailed {
		t.Fatalf("state_changed outcome %s", end.Outcome)
	}
}

func TestRepeatedFailingToolCall(t *testing.T) {
	missing := `{"path":"missing.txt"}`
	tests := []struct {
		name     string
		calls    [][]string // per request, the read arguments it calls; "ls" calls ls
		requests int        // requests the run makes
		stopped  bool
	}{
		{"same failing call three times", [][]string{{missing}, {missing}, {missing}, {missing}}, 3, true},
		{"three in one message", [][]string{{missing, missing, missing}, {missing}}, 1, true},
		{"different arguments", [][]string{{missing}, {`{"path":"other.txt"}`}, {missing}, {`{"path":"other.txt"}`}}, 5, false},
		{"a success in between", [][]string{{missing}, {missing}, {"ls"}, {missing}, {missing}}, 6, false},
		{"whitespace and key order do not matter", [][]string{{`{"path":"missing.txt","offset":2}`}, {`{ "offset" : 2, "path" : "missing.txt" }`}, {`{"offset":2,"path":"missing.txt"}`}, {missing}}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
			h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
				i := len(h.srv.Requests()) - 1
				if i >= len(tt.calls) {
					return wiremock.Script{Text: []string{"stopping"}}
				}
				var calls []wiremock.ToolCall
				for j, a := range tt.calls[i] {
					id := fmt.Sprintf("c%d_%d", i, j)
					if a == "ls" {
						calls = append(calls, wiremock.ToolCall{ID: id, Name: "ls", Args: []string{`{}`}})
						continue
					}
					calls = append(calls, wiremock.ToolCall{ID: id, Name: "read", Args: []string{a}})
				}
				return wiremock.Script{ToolCalls: calls}
			})
			h.prompt("go")
			h.wait()
			if n := len(h.srv.Requests()); n != tt.requests {
				t.Fatalf("%d model requests, want %d", n, tt.requests)
			}
			if tt.stopped {
				checkStopped(t, h, "failed 3 times in a row")
				return
			}
			if o := h.s.LastOutcome(); o != session.OutcomeCompleted {
				t.Fatalf("outcome %s", o)
			}
		})
	}
}

// The run limits are set through session.Config.
func TestRunLimitsFromConfig(t *testing.T) {
	t.Run("turns", func(t *testing.T) {
		h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.MaxTurns = "", 2 })
		h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c", Name: "ls", Args: []string{`{}`}}}}
		})
		h.prompt("loop")
		h.wait()
		if n := len(h.srv.Requests()); n != 2 {
			t.Fatalf("%d requests", n)
		}
		checkStopped(t, h, "after 2 turns")
	})
	t.Run("failures off", func(t *testing.T) {
		h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.MaxSameToolFailures = "", -1 })
		h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
			if len(h.srv.Requests()) > 5 {
				return wiremock.Script{Text: []string{"ok"}}
			}
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c", Name: "read", Args: []string{`{"path":"nope"}`}}}}
		})
		h.prompt("loop")
		h.wait()
		if o := h.s.LastOutcome(); o != session.OutcomeCompleted || len(h.srv.Requests()) != 6 {
			t.Fatalf("outcome %s after %d requests", o, len(h.srv.Requests()))
		}
	})
}
