//go:build linux

package session_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
)

// TestInterruptAtEveryPoint: Abort stops a run wherever it is — streaming,
// waiting for a tool's approval, running a tool, waiting between two
// attempts, or between runs — and returns only when nothing of the run is
// left: the run's end (state_changed to idle, outcome cancelled) is the
// last event, no process of the run is alive, nothing waits for a person,
// and no further model request goes out.
func TestInterruptAtEveryPoint(t *testing.T) {
	const toolCmd = `read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid > pgid; sleep 60 & echo $! > child; echo $$ > pid; wait`
	tests := []struct {
		name   string
		mod    func(*testing.T, *session.Config)
		script []wiremock.Script
		reach  func(*testing.T, *harness)       // waits until the run is at the point
		after  func(*testing.T, *harness, bool) // checks what is left; idle: no run was interrupted
		idle   bool
	}{
		{
			name:   "streaming",
			script: []wiremock.Script{{Text: []string{"one ", "two ", "three"}, Delay: 10 * time.Second}},
			reach: func(t *testing.T, h *harness) {
				h.waitEvent(func(ev session.Event) bool {
					return ev.Type == "message_update" && ev.Agent.Update.Type == llm.EventTextDelta
				})
			},
			after: func(t *testing.T, h *harness, _ bool) {
				msgs := h.s.Messages()
				if last := msgs[len(msgs)-1]; last.StopReason != llm.StopAborted || last.TextContent() != "one " {
					t.Fatalf("the partly streamed message %+v", last)
				}
				// Kept in the transcript too, marked aborted.
				h2 := reopenCopy(t, h)
				if ms := h2.s.Messages(); ms[len(ms)-1].StopReason != llm.StopAborted || ms[len(ms)-1].TextContent() != "one " {
					t.Fatal("the aborted message is not in the file")
				}
			},
		},
		{
			name: "waiting for approval",
			mod:  func(_ *testing.T, c *session.Config) { c.Policy = askBash },
			script: []wiremock.Script{{ToolCalls: []wiremock.ToolCall{{ID: "call_1", Name: "bash", Args: []string{`{"command":"echo ran > out.txt"}`}}}},
				{Text: []string{"never asked"}}},
			reach: func(t *testing.T, h *harness) {
				h.waitEvent(is(string(session.EventInteractionRequested)))
			},
			after: func(t *testing.T, h *harness, _ bool) {
				if p := h.s.Interactions(); len(p) != 0 {
					t.Fatalf("still pending: %+v", p)
				}
				h.waitEvent(func(ev session.Event) bool {
					return ev.Type == session.EventInteractionResolved && ev.Interaction.Resolution.Reason == "the run was aborted"
				})
				res := toolResults(h.s.Messages())
				if len(res) != 1 || res[0].TextContent() != "Tool call cancelled before it was approved: the run was aborted" {
					t.Fatalf("results %+v", res)
				}
				if _, err := os.Stat(filepath.Join(h.cwd, "out.txt")); err == nil {
					t.Fatal("the tool ran")
				}
			},
		},
		{
			// The later call is one the policy allows: after the abort it
			// must neither ask nor run.
			name: "waiting for approval, an allowed call after it",
			mod:  func(_ *testing.T, c *session.Config) { c.Policy = askBash },
			script: []wiremock.Script{{ToolCalls: []wiremock.ToolCall{
				{ID: "call_1", Name: "bash", Args: []string{`{"command":"echo ran > out.txt"}`}},
				{ID: "call_2", Name: "write", Args: []string{`{"path":"written.txt","content":"x"}`}},
			}}, {Text: []string{"never asked"}}},
			reach: func(t *testing.T, h *harness) {
				h.waitEvent(is(string(session.EventInteractionRequested)))
			},
			after: func(t *testing.T, h *harness, _ bool) {
				res := toolResults(h.s.Messages())
				if len(res) != 2 || res[1].TextContent() != "Tool call not run: the run was aborted" {
					t.Fatalf("results %+v", res)
				}
				for _, f := range []string{"out.txt", "written.txt"} {
					if _, err := os.Stat(filepath.Join(h.cwd, f)); err == nil {
						t.Errorf("%s was written after the abort", f)
					}
				}
			},
		},
		{
			name: "tool running",
			mod:  func(t *testing.T, c *session.Config) { supervised(t)(c) },
			script: []wiremock.Script{{ToolCalls: []wiremock.ToolCall{{ID: "call_1", Name: "bash", Args: []string{`{"command":` + strconv.Quote(toolCmd) + `}`}}}},
				{Text: []string{"never asked"}}},
			reach: func(t *testing.T, h *harness) {
				pidIn(t, filepath.Join(h.cwd, "pid"))
			},
			after: func(t *testing.T, h *harness, _ bool) {
				// Gone when Abort returns, not eventually: no polling.
				for _, f := range []string{"pid", "child"} {
					pid := readInt(t, filepath.Join(h.cwd, f))
					if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
						t.Errorf("process %s (%d) still there after Abort returned: %v", f, pid, err)
					}
				}
				pgid := readInt(t, filepath.Join(h.cwd, "pgid"))
				if err := syscall.Kill(-pgid, 0); err != syscall.ESRCH {
					t.Errorf("process group %d still there after Abort returned: %v", pgid, err)
				}
				res := toolResults(h.s.Messages())
				if len(res) != 1 || !res[0].IsError {
					t.Fatalf("results %+v", res)
				}
			},
		},
		{
			name:   "between two attempts",
			mod:    func(_ *testing.T, c *session.Config) { c.Retry.BaseDelay, c.Retry.MaxDelay = time.Minute, time.Minute },
			script: []wiremock.Script{{Status: 503, ErrorMessage: "busy"}, {Text: []string{"never asked"}}},
			reach: func(t *testing.T, h *harness) {
				h.waitEvent(is("auto_retry_start"))
			},
			after: func(t *testing.T, h *harness, _ bool) {
				end := h.waitEvent(is("auto_retry_end"))
				if end.Success || end.FinalError != "Retry cancelled" {
					t.Fatalf("auto_retry_end %+v", end)
				}
			},
		},
		{
			name:   "between runs",
			script: []wiremock.Script{{Text: []string{"done"}}},
			reach: func(t *testing.T, h *harness) {
				h.wait()
			},
			idle: true,
			after: func(t *testing.T, h *harness, _ bool) {
				if o := h.s.LastOutcome(); o != session.OutcomeCompleted {
					t.Fatalf("the finished run's outcome became %s", o)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) {
				if tt.mod != nil {
					tt.mod(t, c)
				}
			})
			h.srv.Enqueue(tt.script...)
			h.prompt("go")
			tt.reach(t, h)
			requests := len(h.srv.Requests())
			before := h.count()
			h.s.Abort()
			if h.s.Running() {
				t.Fatal("running after Abort returned")
			}
			n := h.count()
			h.mu.Lock()
			last := h.evs[len(h.evs)-1]
			h.mu.Unlock()
			if tt.idle {
				if n != before {
					t.Fatalf("Abort between runs emitted %d events", n-before)
				}
			} else if last.Type != session.EventStateChanged || last.State != session.StateIdle || last.Outcome != session.OutcomeCancelled {
				t.Fatalf("last event when Abort returned: %s %s/%s", last.Type, last.State, last.Outcome)
			}
			tt.after(t, h, tt.idle)
			if got := len(h.srv.Requests()); got != requests {
				t.Fatalf("%d model requests after the abort", got-requests)
			}
			// Close waits for every goroutine of the session: had any
			// been left, what it emitted would show now.
			if err := h.s.Close(); err != nil {
				t.Fatal(err)
			}
			if h.count() != n {
				h.mu.Lock()
				defer h.mu.Unlock()
				t.Fatalf("events after the run's end: %s", h.evs[n].Type)
			}
		})
	}
}

func (h *harness) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.evs)
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// reopenCopy opens a copy of h's session file in a new Session.
func reopenCopy(t *testing.T, h *harness) *harness {
	t.Helper()
	b, err := os.ReadFile(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "copy.jsonl")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return reopen(t, h.cfg, path)
}
