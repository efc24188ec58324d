//go:build linux

package session_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// crashHelperCommand makes the test binary a process that runs one
// session until it is killed: the kill -9 half of the restart tests.
const crashHelperCommand = "__session_crash_helper"

// askBash asks before every bash call.
var askBash = interaction.Policy{Rules: []interaction.Rule{{Tool: "bash", Action: interaction.ActionAsk}}}

// restartConfig is the session both the helper and the test run: the
// Chat Completions mock at url, the real tools in cwd under the test
// binary as supervisor, and askBash when ask is set.
func restartConfig(exe, sessionsDir, cwd, tmp, url string, ask bool) session.Config {
	env := tool.Env{Cwd: cwd, TempDir: tmp, Locks: &tool.FileLocks{},
		Environ:    []string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"},
		Supervisor: []string{exe, tool.SuperviseCommand}, Scope: tool.NewScope()}
	cfg := session.Config{
		Cwd: cwd, SessionsDir: sessionsDir, Stream: openaichat.New(nil).Stream,
		Model: &llm.Model{ID: "mock-model", Name: "Mock", API: llm.APIOpenAICompletions, Provider: "mock", BaseURL: url,
			Input: []string{"text"}, ContextWindow: 128000, MaxTokens: 4096},
		Options: func(context.Context, *llm.Model) (llm.StreamOptions, error) {
			return llm.StreamOptions{APIKey: "k"}, nil
		},
		Tools: tool.Builtins(env), BashEnv: env,
	}
	if ask {
		cfg.Policy = askBash
	}
	return cfg
}

// crashHelper runs a session that prompts "run it" and prints the
// session file's path once the bash call waits for approval ("approval")
// or runs ("tool"); then it waits to be killed.
// Arguments: sessionsDir cwd tmp url approval|tool.
func crashHelper(args []string) int {
	exe, err := os.Executable()
	if err != nil || len(args) != 5 {
		fmt.Fprintln(os.Stderr, "crash helper:", args, err)
		return 2
	}
	cfg := restartConfig(exe, args[0], args[1], args[2], args[3], args[4] == "approval")
	s, err := session.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash helper:", err)
		return 1
	}
	ready := make(chan struct{}, 1)
	s.Subscribe(func(ev session.Event) {
		if args[4] == "approval" && ev.Type == session.EventInteractionRequested ||
			args[4] == "tool" && ev.Type == "tool_execution_update" {
			select {
			case ready <- struct{}{}:
			default:
			}
		}
	})
	if err := s.Prompt(session.UserMessage("run it", nil), session.BehaviorNone); err != nil {
		fmt.Fprintln(os.Stderr, "crash helper:", err)
		return 1
	}
	<-ready
	fmt.Println(s.File())
	select {}
}

// bashModel calls bash with command when asked to "run it", reports a
// tool's output after a tool result, and answers anything else.
func bashModel(command string) wiremock.Handler {
	args, _ := json.Marshal(map[string]string{"command": command})
	return func(r *wiremock.Request) wiremock.Script {
		switch last := lastUserText(r); {
		case strings.HasPrefix(last, "TOOL:"):
			return wiremock.Script{Text: []string{"done: ", strings.TrimSpace(strings.TrimPrefix(last, "TOOL:"))}}
		case last == "run it":
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "call_1", Name: "bash", Args: []string{string(args)}}}}
		default:
			return wiremock.Script{Text: []string{"re: " + last}}
		}
	}
}

// The command the model runs: the first time it starts a long sleep (to
// be killed in), once "again" exists it writes out.txt and says ran.
const restartCommand = `echo $$ > pid; if [ -e again ]; then echo ran > out.txt; echo ran; else touch started; sleep 60; fi`

// reopen loads the session file another Session value (or process) left
// in a new Session, recording its events from the first.
func reopen(t *testing.T, cfg session.Config, path string) *harness {
	t.Helper()
	cfg.Open = path
	s, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	h := &harness{t: t, s: s, cfg: cfg, cwd: cfg.Cwd, seen: make(chan struct{}, 1)}
	// What the load emitted is in the log; then the live events.
	missed, _, _ := s.SubscribeAfter(0, func(ev session.Event) {
		h.mu.Lock()
		h.evs = append(h.evs, ev)
		h.mu.Unlock()
		select {
		case h.seen <- struct{}{}:
		default:
		}
	})
	h.mu.Lock()
	h.evs = append(missed, h.evs...)
	h.mu.Unlock()
	return h
}

// pendingApproval checks that the session's only pending interaction is
// the approval of call_1, under its stable id (suffixed if this process
// already settled one under it), and returns it.
func pendingApproval(t *testing.T, h *harness) interaction.Request {
	t.Helper()
	p := h.s.Interactions()
	if len(p) != 1 || !strings.HasPrefix(p[0].ID, "tool-call_1") || p[0].Kind != interaction.KindApproval || p[0].Tool.ToolCallID != "call_1" {
		t.Fatalf("pending interactions %+v", p)
	}
	if st := h.s.State(); st != session.StateSuspended {
		t.Fatalf("state %s, want suspended", st)
	}
	return p[0]
}

// loadedWithPending checks what a session loaded with call_1 pending
// looks like: the approval waits, and nothing runs by itself.
func loadedWithPending(t *testing.T, h *harness) interaction.Request {
	t.Helper()
	req := pendingApproval(t, h)
	if req.ID != "tool-call_1" {
		t.Fatalf("loaded with id %q", req.ID)
	}
	if h.s.Running() {
		t.Fatal("a run started by itself on load")
	}
	return req
}

// TestRestartKeepsPendingCalls: a bash call that waits for approval when
// the process is killed (kill -9) or the session is closed waits for
// approval when the file is opened again in a new Session; approving it
// runs the real tool and the run goes on to the model's answer. A call
// that was running is not offered again (approving it ran it twice): it
// is recorded as interrupted, and nothing waits. A command killed mid-run
// is gone with its process group.
func TestRestartKeepsPendingCalls(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		kill bool   // kill -9 a helper process, else Close in this one
		at   string // "approval" (ask policy) or "tool" (allow policy, running)
	}{
		{"kill -9 waiting for approval", true, "approval"},
		{"kill -9 while the tool runs", true, "tool"},
		{"close waiting for approval", false, "approval"},
		{"close while the tool runs", false, "tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Handle(bashModel(restartCommand))
			dir, cwd, tmp := t.TempDir(), t.TempDir(), t.TempDir()
			cfg := restartConfig(exe, dir, cwd, tmp, srv.OpenAIURL(), tt.at == "approval")
			var path string
			if tt.kill {
				cmd := exec.Command(exe, crashHelperCommand, dir, cwd, tmp, srv.OpenAIURL(), tt.at)
				cmd.Stderr = os.Stderr
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(out).ReadString('\n')
				if err != nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("helper: %v", err)
				}
				path = strings.TrimSpace(line)
				if tt.at == "tool" {
					pid := pidIn(t, filepath.Join(cwd, "pid"))
					waitFile(t, filepath.Join(cwd, "started"))
					_ = cmd.Process.Signal(syscall.SIGKILL)
					_ = cmd.Wait()
					waitGone(t, "the killed process's command", pid)
				} else {
					_ = cmd.Process.Signal(syscall.SIGKILL)
					_ = cmd.Wait()
				}
			} else {
				s, err := session.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				reached := make(chan struct{}, 1)
				s.Subscribe(func(ev session.Event) {
					if tt.at == "approval" && ev.Type == session.EventInteractionRequested || tt.at == "tool" && ev.Type == "tool_execution_update" {
						select {
						case reached <- struct{}{}:
						default:
						}
					}
				})
				if err := s.Prompt(session.UserMessage("run it", nil), session.BehaviorNone); err != nil {
					t.Fatal(err)
				}
				<-reached
				var pid int
				if tt.at == "tool" {
					pid = pidIn(t, filepath.Join(cwd, "pid"))
					waitFile(t, filepath.Join(cwd, "started"))
				}
				path = s.File()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if pid != 0 && running(pid) {
					t.Fatal("the command outlived Close")
				}
			}
			_ = os.Remove(filepath.Join(cwd, "pid"))

			// A new Session value, as a restarted process makes: its own
			// tools and scope.
			cfg = restartConfig(exe, dir, cwd, tmp, srv.OpenAIURL(), tt.at == "approval")
			h := reopen(t, cfg, path)
			msgs := h.s.Messages()
			if tt.at == "tool" {
				wantInterrupted(t, h)
				h2 := reopen(t, restartConfig(exe, dir, cwd, tmp, srv.OpenAIURL(), false), path)
				if got := h2.s.Messages(); len(got) != len(msgs) {
					t.Fatalf("opened again: %d messages, want the %d recorded", len(got), len(msgs))
				}
				wantInterrupted(t, h2)
				// It would have written its pid again (removed above).
				if _, err := os.Stat(filepath.Join(cwd, "pid")); err == nil {
					t.Fatal("the interrupted command ran again")
				}
				return
			}
			if last := msgs[len(msgs)-1]; last.Role != llm.RoleAssistant || len(last.ToolCalls()) != 1 {
				t.Fatalf("the transcript does not end with the call: %+v", last)
			}
			req := loadedWithPending(t, h)
			// The load's events are in the log for clients to replay.
			h.waitEvent(func(ev session.Event) bool {
				return ev.Type == session.EventInteractionRequested && ev.Interaction.Request.ID == req.ID
			})
			h.waitEvent(func(ev session.Event) bool {
				return ev.Type == session.EventStateChanged && ev.State == session.StateSuspended
			})
			if err := os.WriteFile(filepath.Join(cwd, "again"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := h.s.Answer(req.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
				t.Fatal(err)
			}
			h.wait()
			if b, err := os.ReadFile(filepath.Join(cwd, "out.txt")); err != nil || string(b) != "ran\n" {
				t.Fatalf("the tool did not run: %q %v", b, err)
			}
			if text, _ := h.s.LastAssistantText(); text != "done: ran" {
				t.Fatalf("the model's answer %q", text)
			}
			if o := h.s.LastOutcome(); o != session.OutcomeCompleted {
				t.Fatalf("outcome %s", o)
			}
			// And the file says so: opened once more, nothing is pending.
			if err := h.s.Close(); err != nil {
				t.Fatal(err)
			}
			h2 := reopen(t, restartConfig(exe, dir, cwd, tmp, srv.OpenAIURL(), tt.at == "approval"), path)
			if p := h2.s.Interactions(); len(p) != 0 || h2.s.State() != session.StateIdle {
				t.Fatalf("after the run: pending %v, state %s", p, h2.s.State())
			}
		})
	}
}

// wantInterrupted checks a session loaded after call_1 was cut off while
// it ran: its result says it was interrupted, nothing waits for a
// person, nothing runs, and the command did not run again.
func wantInterrupted(t *testing.T, h *harness) {
	t.Helper()
	msgs := h.s.Messages()
	last := msgs[len(msgs)-1]
	if last.Role != llm.RoleToolResult || last.ToolCallID != "call_1" || !last.IsError || !strings.Contains(last.TextContent(), "interrupted") {
		t.Fatalf("the transcript should end with call_1 interrupted: %+v", last)
	}
	if p := h.s.Interactions(); len(p) != 0 {
		t.Fatalf("pending after the restart: %+v", p)
	}
	if h.s.Running() || h.s.State() != session.StateIdle {
		t.Fatalf("running %v, state %s", h.s.Running(), h.s.State())
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restartedWithPending closes a session whose bash call waits for
// approval and opens its file again: the starting point of the tests of
// what can be done with a call a restart left pending.
func restartedWithPending(t *testing.T, command string, mod func(*session.Config)) (*harness, *wiremock.Server) {
	t.Helper()
	h := newHarness(t, func(c *session.Config) {
		c.Policy = askBash
		if mod != nil {
			mod(c)
		}
	})
	h.srv.Handle(bashModel(command))
	h.prompt("run it")
	h.waitEvent(is(string(session.EventInteractionRequested)))
	path := h.s.File()
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := reopen(t, h.cfg, path)
	h2.dir = h.dir
	loadedWithPending(t, h2)
	return h2, h.srv
}

func toolResults(ms []*llm.Message) []*llm.Message {
	var out []*llm.Message
	for _, m := range ms {
		if m.Role == llm.RoleToolResult {
			out = append(out, m)
		}
	}
	return out
}

// TestPendingCallAfterRestart: every way of settling a call a restart
// left waiting for approval, and what the model and the file see after.
func TestPendingCallAfterRestart(t *testing.T) {
	const cmd = "echo ran > out.txt; echo ran"
	approve := func(v interaction.Verdict, extra ...func(*interaction.Response)) func(*testing.T, *harness) {
		return func(t *testing.T, h *harness) {
			r := interaction.Response{Verdict: v}
			for _, f := range extra {
				f(&r)
			}
			if err := h.s.Answer("tool-call_1", r); err != nil {
				t.Fatal(err)
			}
			// A second client's answer loses and is told how it was settled.
			if err := h.s.Answer("tool-call_1", r); err == nil || !strings.Contains(err.Error(), "already answered") {
				t.Fatalf("late answer: %v", err)
			}
		}
	}
	tests := []struct {
		name   string
		act    func(*testing.T, *harness)
		ran    bool   // out.txt written
		result string // the call's result text
		answer string // the model's last answer
		grants interaction.Grants
	}{
		{"approve", approve(interaction.VerdictApprove), true, "ran\n", "done: ran", interaction.Grants{}},
		{"edit", approve(interaction.VerdictEdit, func(r *interaction.Response) { r.Args = json.RawMessage(`{"command":"echo edited"}`) }),
			false, "edited\n", "done: edited", interaction.Grants{}},
		{"skip", approve(interaction.VerdictSkip), false, "Tool call skipped by the user", "done: Tool call skipped by the user", interaction.Grants{}},
		{"reject with feedback", approve(interaction.VerdictReject, func(r *interaction.Response) { r.Feedback = "not now" }),
			false, "The user rejected this tool call: not now", "done: The user rejected this tool call: not now", interaction.Grants{}},
		{"always", approve(interaction.VerdictAlways), true, "ran\n", "done: ran", interaction.Grants{Tools: []string{"bash"}}},
		{"approve next", approve(interaction.VerdictApproveNext, func(r *interaction.Response) { r.Count = 2 }), true, "ran\n", "done: ran", interaction.Grants{Next: 2}},
		{"step with auto-confirm", func(t *testing.T, h *harness) {
			if err := h.s.Step(session.StepOptions{AutoConfirm: true}); err != nil {
				t.Fatal(err)
			}
		}, true, "ran\n", "done: ran", interaction.Grants{}},
		{"step confirming the next 3", func(t *testing.T, h *harness) {
			if err := h.s.Step(session.StepOptions{AutoConfirmNext: 3}); err != nil {
				t.Fatal(err)
			}
		}, true, "ran\n", "done: ran", interaction.Grants{Next: 2}},
		{"step, then approve", func(t *testing.T, h *harness) {
			if err := h.s.Step(session.StepOptions{}); err != nil {
				t.Fatal(err)
			}
			// The run waits on the same request, not a new one.
			h.waitEvent(func(ev session.Event) bool { return ev.Type == "tool_execution_start" })
			pendingApproval(t, h)
			if err := h.s.Step(session.StepOptions{}); err != session.ErrRunning {
				t.Fatalf("second step: %v", err)
			}
			approve(interaction.VerdictApprove)(t, h)
		}, true, "ran\n", "done: ran", interaction.Grants{}},
		{"a new message moves on", func(t *testing.T, h *harness) {
			if err := h.s.Append(session.UserMessage("never mind", nil)); err != nil {
				t.Fatal(err)
			}
			if err := h.s.Step(session.StepOptions{}); err != nil {
				t.Fatal(err)
			}
		}, false, "Tool call cancelled before it was approved: the conversation moved on", "re: never mind", interaction.Grants{}},
		{"a prompt moves on", func(t *testing.T, h *harness) { h.prompt("never mind") },
			false, "Tool call cancelled before it was approved: the conversation moved on", "re: never mind", interaction.Grants{}},
		{"abort", func(t *testing.T, h *harness) {
			h.s.Abort()
			ev := h.waitEvent(func(ev session.Event) bool { return ev.Type == session.EventStateChanged && ev.Outcome != "" })
			if ev.State != session.StateIdle || ev.Outcome != session.OutcomeCancelled {
				t.Fatalf("state %s/%s", ev.State, ev.Outcome)
			}
		}, false, "Tool call cancelled before it was approved: the run was aborted", "", interaction.Grants{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, srv := restartedWithPending(t, cmd, nil)
			requests := len(srv.Requests())
			tt.act(t, h)
			h.wait()
			if p := h.s.Interactions(); len(p) != 0 || h.s.State() != session.StateIdle {
				t.Fatalf("left: pending %v, state %s", p, h.s.State())
			}
			_, err := os.Stat(filepath.Join(h.cwd, "out.txt"))
			if ran := err == nil; ran != tt.ran {
				t.Fatalf("the tool ran: %v, want %v", ran, tt.ran)
			}
			res := toolResults(h.s.Messages())
			if len(res) != 1 || res[0].ToolCallID != "call_1" || res[0].TextContent() != tt.result {
				t.Fatalf("tool results %+v", res)
			}
			// The model saw the result (an error result with the wire's
			// "Error: " in front) and answered.
			text, _ := h.s.LastAssistantText()
			if text != tt.answer && text != strings.Replace(tt.answer, "done: ", "done: Error: ", 1) {
				t.Fatalf("the model's answer %q, want %q", text, tt.answer)
			}
			if tt.answer == "" && len(srv.Requests()) != requests {
				t.Fatal("the model was asked after the abort")
			}
			if g := h.s.Grants(); g.Next != tt.grants.Next || strings.Join(g.Tools, ",") != strings.Join(tt.grants.Tools, ",") {
				t.Fatalf("grants %+v, want %+v", g, tt.grants)
			}
			// The file holds the same valid conversation, and the grants.
			path := h.s.File()
			if err := h.s.Close(); err != nil {
				t.Fatal(err)
			}
			h2 := reopen(t, h.cfg, path)
			if len(h2.s.Interactions()) != 0 || len(h2.s.Messages()) != len(h.s.Messages()) {
				t.Fatalf("reopened: %d pending, %d messages (had %d)", len(h2.s.Interactions()), len(h2.s.Messages()), len(h.s.Messages()))
			}
			if g := h2.s.Grants(); g.Next != tt.grants.Next || strings.Join(g.Tools, ",") != strings.Join(tt.grants.Tools, ",") {
				t.Fatalf("reopened grants %+v, want %+v", g, tt.grants)
			}
		})
	}
}

// The file a restart reads stays pi's: the call without a result is what
// pi would see too, with agentd's settings entries left out of the
// context.
func TestPendingCallFileIsPlain(t *testing.T) {
	h, _ := restartedWithPending(t, "true", func(c *session.Config) { c.ConfirmAll = true })
	f, err := transcript.Open(h.s.File(), transcript.WithStrict())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := f.Context(f.Leaf())
	if len(c.Messages) != len(h.s.Messages()) || c.Messages[len(c.Messages)-1].Role != llm.RoleAssistant {
		t.Fatalf("context of the file: %d messages", len(c.Messages))
	}
}

// TestSwitchTakesPendingCallsAlong: the calls waiting in one transcript
// stop waiting when the session switches to another, and wait again when
// it comes back; a new session has none.
func TestSwitchTakesPendingCallsAlong(t *testing.T) {
	h, _ := restartedWithPending(t, "true", nil)
	path := h.s.File()
	if err := h.s.NewSession(""); err != nil {
		t.Fatal(err)
	}
	if p := h.s.Interactions(); len(p) != 0 || h.s.State() != session.StateIdle {
		t.Fatalf("new session: pending %v, state %s", p, h.s.State())
	}
	changed := h.waitEvent(is(string(session.EventSessionChanged))).Seq
	resolved := h.waitEvent(is(string(session.EventInteractionResolved))).Seq
	if resolved > changed {
		t.Fatal("the old call was still waiting after the switch was announced")
	}
	if err := h.s.Switch(path); err != nil {
		t.Fatal(err)
	}
	// Back, the call waits again; its first request was settled in
	// this process, so the new one's id has a suffix.
	if req := pendingApproval(t, h); req.ID != "tool-call_1.2" {
		t.Fatalf("id %q", req.ID)
	}
	// A clone of the branch ends with the same call: it waits there.
	if err := h.s.Clone(); err != nil {
		t.Fatal(err)
	}
	pendingApproval(t, h)
	if h.s.File() == path {
		t.Fatal("not cloned")
	}
}

// TestAbortedNavigationKeepsPendingCalls: an abort that stops a
// navigation's summary leaves the session where it was, and so the calls
// waiting there keep waiting, under the same request.
func TestAbortedNavigationKeepsPendingCalls(t *testing.T) {
	h, srv := restartedWithPending(t, "true", nil)
	srv.Handle(func(*wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"a ", "summary"}, Delay: 10 * time.Second}
	})
	var user string
	for _, n := range h.s.Tree().Nodes {
		if n.Role == llm.RoleUser {
			user = n.EntryID
		}
	}
	type result struct {
		res session.NavigateResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := h.s.NavigateTree(context.Background(), user, session.NavigateOptions{Summarize: true})
		done <- result{res, err}
	}()
	h.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventStateChanged && ev.State == session.StateCompacting
	})
	h.s.Abort()
	if r := <-done; r.err != nil || !r.res.Aborted {
		t.Fatalf("navigation: %+v %v", r.res, r.err)
	}
	if req := pendingApproval(t, h); req.ID != "tool-call_1" {
		t.Fatalf("the wait was replaced: %q", req.ID)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.evs {
		if ev.Type == session.EventInteractionResolved {
			t.Fatalf("the pending call's request was resolved: %+v", ev.Interaction.Resolution)
		}
	}
}

// TestRacingSettlements: clients answering a call a restart left waiting,
// all at once, and one sending a message or interrupting at the same
// time: one of them settles it, every other is told it lost, and the
// conversation holds exactly one result for the call.
func TestRacingSettlements(t *testing.T) {
	tests := []struct {
		name  string
		other func(*harness) error // races the answers; nil: answers only
		stops bool                 // other may stop the run an answer started
	}{
		{"answers only", nil, false},
		{"answers and a message", func(h *harness) error {
			return h.s.Prompt(session.UserMessage("never mind", nil), session.BehaviorNone)
		}, false},
		{"answers and an interrupt", func(h *harness) error { h.s.Abort(); return nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, srv := restartedWithPending(t, "echo ran >> out.txt", nil)
			srv.Handle(echoModel)
			const n = 8
			start := make(chan struct{})
			errs := make(chan error, n+1)
			for range n {
				go func() {
					<-start
					errs <- h.s.Answer("tool-call_1", interaction.Response{Verdict: interaction.VerdictApprove})
				}()
			}
			var otherErr error
			otherDone := make(chan struct{})
			go func() {
				defer close(otherDone)
				<-start
				if tt.other != nil {
					otherErr = tt.other(h)
				}
			}()
			close(start)
			won := 0
			for range n {
				if err := <-errs; err == nil {
					won++
				} else if !errors.Is(err, interaction.ErrAlreadyResolved) {
					t.Errorf("a losing answer: %v", err)
				}
			}
			<-otherDone
			h.wait()
			if won > 1 {
				t.Fatalf("%d answers won", won)
			}
			b, _ := os.ReadFile(filepath.Join(h.cwd, "out.txt"))
			if ran := strings.Count(string(b), "ran"); ran > won || ran < won && !tt.stops {
				t.Fatalf("the tool ran %d times, %d answers won", ran, won)
			}
			if won == 1 && otherErr != nil && otherErr != session.ErrBusy {
				t.Fatalf("the message after the answer: %v", otherErr)
			}
			if won == 0 && (tt.other == nil || otherErr != nil) {
				t.Fatalf("nobody settled the call (other: %v)", otherErr)
			}
			if res := toolResults(h.s.Messages()); len(res) != 1 || res[0].ToolCallID != "call_1" {
				t.Fatalf("results %+v", res)
			}
			if p := h.s.Interactions(); len(p) != 0 {
				t.Fatalf("left pending %+v", p)
			}
		})
	}
}

// A call waiting for approval when the session closes is offered again
// after it, even when an earlier turn's call with the same id ran and
// left its started marker: that marker is above the call's own assistant
// message, and a result descends from it.
func TestRestartReusedCallIDStillOffered(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.Policy = askBash })
	h.srv.Handle(bashModel("echo hi >> runs"))
	approve := func() {
		t.Helper()
		deadline := time.After(30 * time.Second)
		// The approval is registered a moment before the session says
		// it is suspended: wait for both.
		for len(h.s.Interactions()) == 0 || h.s.State() != session.StateSuspended {
			select {
			case <-h.seen:
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Fatal("no approval was asked for")
			}
		}
	}
	h.prompt("run it")
	approve()
	req := pendingApproval(t, h)
	if err := h.s.Answer(req.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	h.prompt("run it") // the model calls call_1 again
	approve()
	path := h.s.File()
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := reopen(t, h.cfg, path)
	loadedWithPending(t, h2)
	if got := len(toolResults(h2.s.Messages())); got != 1 {
		t.Fatalf("%d tool results, want the first turn's alone", got)
	}
	if b, _ := os.ReadFile(filepath.Join(h.cwd, "runs")); string(b) != "hi\n" {
		t.Fatalf("runs %q: the second call should not have run", b)
	}
}
