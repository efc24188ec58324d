package pirpc

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// eofHangGuard only keeps a broken build from hanging the suite.
const eofHangGuard = 20 * time.Second

// lastAgentEnd returns the messages of the last agent_end in frames.
func lastAgentEnd(t *testing.T, frames []map[string]any) []map[string]any {
	t.Helper()
	for i := len(frames) - 1; i >= 0; i-- {
		if frames[i]["type"] != "agent_end" {
			continue
		}
		raw, _ := frames[i]["messages"].([]any)
		out := make([]map[string]any, 0, len(raw))
		for _, m := range raw {
			mm, _ := m.(map[string]any)
			out = append(out, mm)
		}
		return out
	}
	t.Fatalf("no agent_end in %d frames", len(frames))
	return nil
}

// texts joins the text blocks of a message.
func texts(m map[string]any) string {
	var b strings.Builder
	content, _ := m["content"].([]any)
	for _, c := range content {
		cm, _ := c.(map[string]any)
		if s, ok := cm["text"].(string); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}

func decodeFrames(t *testing.T, out string) []map[string]any {
	t.Helper()
	var frames []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("output line is not JSON: %q", sc.Text())
		}
		frames = append(frames, m)
	}
	return frames
}

// When the input ends, what was accepted before the end runs to its end,
// as `echo '{"type":"prompt",...}' | agentd rpc` needs; questions and
// approvals nobody can answer any more are cancelled instead of waiting.
// The cases without a subprocess run in a synctest bubble, where the
// faux model's delay is the bubble's clock: the input ends while the run
// is still going, every time, without waiting real time for it.
func TestEndOfInputFinishesAcceptedWork(t *testing.T) {
	slow := 200 * time.Millisecond // the run is still going when the input ends
	tests := []struct {
		name      string
		realClock bool // a subprocess (bash) runs: it cannot join a synctest bubble
		script    []faux.Response
		policy    string
		tools     []string
		lines     []string
		check     func(t *testing.T, frames []map[string]any)
	}{{
		name:   "prompt",
		script: []faux.Response{{Text: "the whole answer", Delay: slow}},
		lines:  []string{`{"id":"p","type":"prompt","message":"hi"}`},
		check: func(t *testing.T, frames []map[string]any) {
			msgs := lastAgentEnd(t, frames)
			last := msgs[len(msgs)-1]
			if last["stopReason"] != "stop" || texts(last) != "the whole answer" {
				t.Errorf("last message %v, want the whole answer with stopReason stop", last)
			}
		},
	}, {
		name:   "prompt and follow-up",
		script: []faux.Response{{Text: "first", Delay: slow}, {Text: "second"}},
		lines:  []string{`{"id":"p","type":"prompt","message":"hi"}`, `{"id":"f","type":"follow_up","message":"and then?"}`},
		check: func(t *testing.T, frames []map[string]any) {
			var answers []string
			for _, m := range lastAgentEnd(t, frames) {
				if m["role"] == "assistant" {
					answers = append(answers, texts(m))
				}
			}
			if strings.Join(answers, ",") != "first,second" {
				t.Errorf("answers %q, want first and second", answers)
			}
		},
	}, {
		name: "question",
		script: []faux.Response{
			{ToolCalls: []faux.ToolCall{{Name: interaction.AskUserName, Args: `{"question":"which one?","options":["a","b"]}`}}, Delay: slow},
			{Text: "fine, no answer"},
		},
		lines: []string{`{"id":"p","type":"prompt","message":"hi"}`},
		check: func(t *testing.T, frames []map[string]any) {
			msgs := lastAgentEnd(t, frames)
			var result string
			for _, m := range msgs {
				if m["role"] == "toolResult" {
					result = texts(m)
				}
			}
			if !strings.Contains(result, "dismissed") {
				t.Errorf("ask_user result %q, want it dismissed", result)
			}
			if last := msgs[len(msgs)-1]; texts(last) != "fine, no answer" {
				t.Errorf("last message %v, want the answer after the question", last)
			}
		},
	}, {
		name: "approval",
		script: []faux.Response{
			{ToolCalls: []faux.ToolCall{{Name: "ls", Args: `{}`}}, Delay: slow},
			{Text: "not allowed, then"},
		},
		policy: `{"rules":[{"tool":"ls","action":"ask"}]}`,
		tools:  []string{"ls"},
		lines:  []string{`{"id":"p","type":"prompt","message":"hi"}`},
		check: func(t *testing.T, frames []map[string]any) {
			var result string
			for _, m := range lastAgentEnd(t, frames) {
				if m["role"] == "toolResult" {
					result = texts(m)
				}
			}
			if !strings.Contains(result, "nobody can answer") {
				t.Errorf("ls result %q, want the rejection saying %q", result, "nobody can answer")
			}
		},
	}, {
		name:      "bash",
		realClock: true,
		lines:     []string{`{"id":"b","type":"bash","command":"sleep 0.2; echo finished"}`},
		check: func(t *testing.T, frames []map[string]any) {
			for _, f := range frames {
				if f["id"] == "b" {
					data, _ := f["data"].(map[string]any)
					if f["success"] != true || data["output"] != "finished\n" || data["cancelled"] != false {
						t.Errorf("bash response %v, want finished and not cancelled", f)
					}
					return
				}
			}
			t.Errorf("no bash response in %v", frames)
		},
	}}
	for _, tt := range tests {
		run := func(t *testing.T) {
			p := faux.New(faux.Options{})
			p.Push(tt.script...)
			cwd := t.TempDir()
			cfg := session.Config{Cwd: cwd, Model: faux.Model(), Stream: p.Stream}
			if tt.policy != "" {
				pol, err := interaction.ParsePolicy([]byte(tt.policy))
				if err != nil {
					t.Fatal(err)
				}
				cfg.Policy = pol
			}
			env := tool.Env{Cwd: cwd, TempDir: t.TempDir()}
			for _, n := range tt.tools {
				tl, err := tool.New(n, env)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Tools = append(cfg.Tools, tl)
			}
			s, err := session.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv := New(Options{Session: s, Models: fixedModels{faux.Model()}, Cwd: cwd})
			var out strings.Builder
			done := make(chan error, 1)
			go func() {
				done <- srv.Run(context.Background(), strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), &out)
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(eofHangGuard):
				t.Fatal("Run did not return after the end of input")
			}
			if s.Running() {
				t.Error("a run is still going after Run returned")
			}
			tt.check(t, decodeFrames(t, out.String()))
		}
		t.Run(tt.name, func(t *testing.T) {
			if tt.realClock {
				run(t)
				return
			}
			synctest.Test(t, run)
		})
	}
}

// Cancelling the context still aborts at once while Run waits for the
// accepted work after the end of input (SIGINT and SIGTERM in agentd rpc).
func TestCancelAbortsAfterEndOfInput(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{Text: "never finished", Delay: time.Hour})
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := New(Options{Session: s, Models: fixedModels{faux.Model()}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, strings.NewReader(`{"id":"p","type":"prompt","message":"hi"}`+"\n"), outW)
		outW.Close()
	}()
	var out strings.Builder
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `"type":"agent_start"`) {
			cancel()
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(eofHangGuard):
		t.Fatal("Run did not return after ctx was cancelled")
	}
	msgs := lastAgentEnd(t, decodeFrames(t, out.String()))
	if last := msgs[len(msgs)-1]; last["stopReason"] != string(llm.StopAborted) {
		t.Errorf("last message %v, want it aborted", last)
	}
}
