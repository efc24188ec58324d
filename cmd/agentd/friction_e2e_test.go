package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/llm/llmtest"
)

// Tests of what a newcomer meets first: piping a prompt into agentd rpc,
// agentd version, agentd ask with tools, one approval timeout.

// waitStderr waits until agentd's stderr contains s.
func (p *e2eProc) waitStderr(s string) {
	p.t.Helper()
	guard := time.After(e2eHangGuard)
	for !strings.Contains(p.stderr.String(), s) {
		select {
		case <-guard:
			p.fatalf("hang guard: stderr never said %q", s)
		case <-p.exited:
			if !strings.Contains(p.stderr.String(), s) {
				p.fatalf("agentd exited (%v) without saying %q on stderr", p.waitErr, s)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// signal sends sig and requires a clean exit; it returns the whole output.
func (p *e2eProc) signal(sig syscall.Signal) []e2eLine {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.fatalf("sending %v: %v", sig, err)
	}
	select {
	case <-p.exited:
	case <-time.After(e2eHangGuard):
		p.fatalf("agentd did not exit within %v of %v", e2eHangGuard, sig)
	}
	if p.waitErr != nil {
		p.fatalf("agentd exited with %v after %v", p.waitErr, sig)
	}
	return p.snapshot()
}

// e2eGate is a named pipe a shell command reads (`cat <path>`) to wait
// until the test lets it go on.
type e2eGate struct {
	t    *testing.T
	path string
}

func (e *e2eEnv) gate(name string) e2eGate {
	path := filepath.Join(e.root, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return e2eGate{e.t, path}
}

// open lets the command reading the gate go on.
func (g e2eGate) open() {
	g.t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(g.path, os.O_WRONLY, 0) // blocks until the command opens it to read
		if err == nil {
			err = f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			g.t.Fatal(err)
		}
	case <-time.After(e2eHangGuard):
		g.t.Fatalf("hang guard: nothing read %s", g.path)
	}
}

// agentEnd is the last agent_end of out.
func agentEnd(t *testing.T, out []e2eLine) any {
	t.Helper()
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].typ() == "agent_end" {
			return out[i].v
		}
	}
	t.Fatalf("no agent_end in %d lines", len(out))
	return nil
}

// `echo '{"type":"prompt",...}' | agentd rpc` prints the whole answer and
// exits 0, with the offline model and no key, tools included.
func TestRPCPipedPromptFinishes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, message, answer string
	}{
		{"answer", "hi", "You said: hi"},
		{"tool", "/bash echo from-the-tool", "Tool bash returned: from-the-tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			line := fmt.Sprintf(`{"type":"prompt","message":%q}`+"\n", tt.message)
			r := run(t, home, nil, line, "rpc", "--no-session")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			var out []e2eLine
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				v, err := e2eParse([]byte(l))
				if err != nil {
					t.Fatalf("stdout line is not JSON: %q", l)
				}
				out = append(out, e2eLine{raw: l, v: v})
			}
			if out[0].typ() != "response" || e2eAt(out[0].v, "success") != true {
				t.Errorf("first line %s, want the prompt's response", out[0])
			}
			if last := out[len(out)-1]; last.typ() != "agent_end" {
				t.Errorf("last line %s, want agent_end", last)
			}
			msgs, _ := e2eAt(agentEnd(t, out), "messages").([]any)
			final := msgs[len(msgs)-1]
			if e2eStr(final, "stopReason") != "stop" || !strings.HasPrefix(strings.TrimSpace(e2eStr(final, "content", "0", "text")), tt.answer) {
				t.Errorf("final message %v, want %q and stopReason stop", final, tt.answer)
			}
		})
	}
}

// SIGTERM and SIGINT still abort at once while agentd rpc finishes what it
// accepted before stdin closed.
func TestRPCSignalAbortsAfterStdinClose(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("mid-run "+sig.String(), func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			e.tweak("hang", func(s *llmtest.Script) { s.HangAfter = 1 })
			p := e.start("--no-session")
			p.ok(`{"id":"p","type":"prompt","message":"hang"}`)
			p.event("message_update:text_delta")
			_ = p.stdin.Close()
			p.waitStderr("input ended")
			out := p.signal(sig)
			last := out[len(out)-1]
			if last.typ() != "agent_end" || e2eStr(last.v, "messages", "1", "stopReason") != "aborted" {
				t.Fatalf("last line before the exit: %s", last)
			}
		})
		t.Run("mid-bash "+sig.String(), func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			p := e.start("--no-session")
			fifo, started := e.fifo("started")
			p.send(fmt.Sprintf(`{"id":"b","type":"bash","command":"echo > %s; sleep 30"}`, fifo))
			started()
			_ = p.stdin.Close()
			p.waitStderr("input ended")
			out := p.signal(sig)
			var b *e2eLine
			for i := range out {
				if out[i].isResponse("b") {
					b = &out[i]
				}
			}
			if b == nil || e2eAt(b.v, "data", "cancelled") != true {
				t.Fatalf("bash response before the exit: %v", b)
			}
		})
	}
}
