package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
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

// e2eNumOK is the number at path, and whether there is one.
func e2eNumOK(v any, path ...string) (float64, bool) {
	n, ok := e2eAt(v, path...).(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
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
			e.tweak("hang", func(s *wiremock.Script) { s.HangAfter = 1 })
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

// agentd version, --version and -v print the same line, made of what the
// toolchain recorded in the binary (CI builds with -buildvcs=false, so
// there may be no revision); serve announces the same version in
// server_ready; -ldflags still overrides it.
func TestVersion(t *testing.T) {
	t.Parallel()
	info, err := buildinfo.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	var want []string // what the line must contain
	if v := info.Main.Version; v != "" && v != "(devel)" {
		want = append(want, v)
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			want = append(want, "rev "+s.Value[:min(12, len(s.Value))])
		case s.Key == "vcs.modified" && s.Value == "true":
			want = append(want, ", modified)")
		}
	}
	home := t.TempDir()
	line := run(t, home, nil, "", "version")
	if line.code != 0 || !strings.HasPrefix(line.stdout, "agentd ") || strings.Count(line.stdout, "\n") != 1 {
		t.Fatalf("agentd version: exit %d, stdout %q, stderr %q", line.code, line.stdout, line.stderr)
	}
	for _, w := range want {
		if !strings.Contains(line.stdout, w) {
			t.Errorf("agentd version printed %q, which lacks %q (build info: %s)", line.stdout, w, info)
		}
	}
	if len(want) == 0 && line.stdout != "agentd dev\n" {
		t.Errorf("agentd version with no build information printed %q, want agentd dev", line.stdout)
	}
	for _, flag := range []string{"--version", "-v"} {
		if r := run(t, home, nil, "", flag); r.code != 0 || r.stdout != line.stdout {
			t.Errorf("agentd %s: exit %d, stdout %q, want %q", flag, r.code, r.stdout, line.stdout)
		}
	}
	if got := serverVersion(t, agentdBin, home); "agentd "+got+"\n" != line.stdout {
		t.Errorf("server_ready serverVersion %q, agentd version %q", got, line.stdout)
	}

	// A release build sets the version with -ldflags.
	ld := filepath.Join(t.TempDir(), "agentd")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/agentd-dev/agentd/internal/cli.Version=v9.8.7-test", "-o", ld, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags: %v\n%s", err, out)
	}
	out, err := exec.Command(ld, "--version").Output()
	if err != nil || string(out) != "agentd v9.8.7-test\n" {
		t.Errorf("-ldflags build: agentd --version printed %q (%v)", out, err)
	}
	if got := serverVersion(t, ld, home); got != "v9.8.7-test" {
		t.Errorf("-ldflags build: serverVersion %q", got)
	}
}

// serverVersion is what `serve --stdio` announces in server_ready.
func serverVersion(t *testing.T, bin, home string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--stdio")
	dieWithTest(cmd)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("serve --stdio: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, err := e2eParse([]byte(first))
	if err != nil || e2eStr(v, "type") != "server_ready" {
		t.Fatalf("serve --stdio: first line %q", first)
	}
	return e2eStr(v, "data", "serverVersion")
}

// rpc and serve bound an approval the same way: --approval-timeout or
// AGENTD_APPROVAL_TIMEOUT, 10 minutes by default; serve's old
// --ui-timeout still works (see "unanswered request times out" in
// TestServeExtensionUI).
func TestApprovalTimeout(t *testing.T) {
	t.Parallel()
	const askBash = `{"rules":[{"tool":"bash","action":"ask"}]}`
	const tenMinutes = 10 * 60 * 1000
	// wantTimeout checks the timeout (ms) an extension_ui_request carries.
	wantTimeout := func(t *testing.T, got float64, ok bool, max float64) {
		t.Helper()
		// The request says how long is left when it is sent: a little
		// under the configured timeout.
		if !ok || got <= max-5000 || got > max {
			t.Errorf("request timeout %v (present: %v), want just under %v ms", got, ok, max)
		}
	}
	t.Run("rpc default", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		p := e.start("--no-session", "--policy", e.writePolicy(askBash))
		p.ok(`{"id":"p","type":"prompt","message":"CMD:echo waiting"}`)
		req := p.event("extension_ui_request")
		n, ok := e2eNumOK(req, "timeout")
		wantTimeout(t, n, ok, tenMinutes)
		p.send(fmt.Sprintf(`{"type":"extension_ui_response","id":%q,"value":"Allow"}`, e2eStr(req, "id")))
		p.event("agent_end")
		p.close()
	})
	t.Run("rpc flag", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		p := e.start("--no-session", "--policy", e.writePolicy(askBash), "--approval-timeout", "1s")
		p.ok(`{"id":"p","type":"prompt","message":"CMD:echo never-approved"}`)
		req := p.event("extension_ui_request")
		n, ok := e2eNumOK(req, "timeout")
		wantTimeout(t, n, ok, 1000)
		te := p.event("tool_execution_end")
		if strings.Contains(e2eStr(te, "result", "content", "0", "text"), "never-approved\n") {
			t.Errorf("an unanswered approval ran the tool: %s", e2eJSON(te))
		}
		p.event("agent_end")
		p.close()
	})
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		max  float64
	}{
		{"serve default", nil, nil, tenMinutes},
		{"serve env", []string{"AGENTD_APPROVAL_TIMEOUT=1s"}, nil, 1000},
		{"serve flag over env", []string{"AGENTD_APPROVAL_TIMEOUT=1h"}, []string{"--approval-timeout", "1s"}, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svLaunch(t, e, svOpts{env: tt.env}, append([]string{"--policy", e.writePolicy(askBash)}, tt.args...)...)
			A := s.dial("A")
			const sid = "ask"
			svCreate(A, sid)
			A.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo waiting"})
			req := A.waitEvent(sid, "extension_ui_request")
			n, ok := svNum(req.m, "event", "timeout")
			wantTimeout(t, n, ok, tt.max)
			if tt.max == tenMinutes {
				A.send(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid, "requestId": svStr(req.m, "event", "requestId"),
					"response": svM{"method": "select", "value": "Allow"}})
			}
			svWantOK(t, A.response("p1"))
		})
	}
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		for _, cmd := range []string{"rpc", "serve"} {
			r := run(t, home, nil, "", cmd, "-h")
			if !strings.Contains(r.stderr, "-approval-timeout duration") || !strings.Contains(r.stderr, "(default 10m0s)") {
				t.Errorf("agentd %s -h does not show --approval-timeout with its default:\n%s", cmd, r.stderr)
			}
		}
		r := run(t, home, nil, "", "serve", "-h")
		if !strings.Contains(r.stderr, "-ui-timeout duration\n    \tdeprecated: the old name of --approval-timeout") {
			t.Errorf("agentd serve -h does not mark --ui-timeout deprecated:\n%s", r.stderr)
		}
	})
}

// agentd ask --tools runs the prompt as an agent run with those tools:
// the offline model's markers make a newcomer's first tool call work with
// no key. Without --tools, ask stays a plain question.
func TestAskWithTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    []string // substrings
		stderr    []string
		notStderr string
		notStdout string
	}{
		{name: "ls", args: []string{"--tools", "ls", "/tool ls"}, stdout: []string{"Calling ls.\n", "Tool ls returned: hello.txt"},
			stderr: []string{"[tool ls {}]", "[tool ls done: hello.txt]", "faux/echo · stop · 1 tool call(s)"}},
		{name: "bash", args: []string{"--tools", "read,ls,bash", "/bash echo hi-from-bash"}, stdout: []string{"Tool bash returned: hi-from-bash"},
			stderr: []string{`[tool bash {"command":"echo hi-from-bash"}]`, "[tool bash done: hi-from-bash]"}},
		{name: "thinking", args: []string{"--tools", "ls", "/think\n/tool ls"}, stdout: []string{"Tool ls returned: hello.txt"},
			stderr: []string{"I will call the tools they asked for."}},
		{name: "quiet", args: []string{"--tools", "ls", "--quiet", "/tool ls"}, stdout: []string{"Tool ls returned: hello.txt"}, notStderr: "[tool"},
		{name: "a tool not enabled", args: []string{"--tools", "ls", "/bash echo never-run"}, stdout: []string{"Tool bash returned: "},
			stderr: []string{"[tool bash failed: "}, notStdout: "never-run\n"},
		{name: "a question", args: []string{"--tools", "ls", `/tool ask_user {"question":"which one?"}`},
			stdout: []string{"Tool ask_user returned: The user dismissed the question"}, stderr: []string{`[question dismissed: agentd ask cannot answer "which one?"]`}},
		{name: "no tools by default", args: []string{"/tool ls"}, stdout: []string{"[tool call ls {}]"}, notStderr: "[tool ls"},
		{name: "unknown tool", args: []string{"--tools", "ls,nope", "hi"}, code: 2, stderr: []string{`unknown tool "nope"`}},
		{name: "no tool named", args: []string{"--tools", ",", "hi"}, code: 2, stderr: []string{"names no tool"}},
		{name: "with --system", args: []string{"--tools", "ls", "--system", "be brief", "hi"}, code: 2, stderr: []string{"--system and --tools"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home, cwd := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(cwd, "hello.txt"), []byte("hi\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(agentdBin, append([]string{"ask"}, tt.args...)...)
			dieWithTest(cmd)
			cmd.Dir = cwd
			cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + t.TempDir()}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			fail := func(what string) {
				t.Helper()
				t.Errorf("%s\nexit %d\nstdout:\n%s\nstderr:\n%s", what, code, stdout.String(), stderr.String())
			}
			if code != tt.code {
				fail(fmt.Sprintf("exit code %d, want %d", code, tt.code))
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout.String(), s) {
					fail(fmt.Sprintf("stdout lacks %q", s))
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr.String(), s) {
					fail(fmt.Sprintf("stderr lacks %q", s))
				}
			}
			if tt.notStderr != "" && strings.Contains(stderr.String(), tt.notStderr) {
				fail(fmt.Sprintf("stderr has %q", tt.notStderr))
			}
			if tt.notStdout != "" && strings.Contains(stdout.String(), tt.notStdout) {
				fail(fmt.Sprintf("stdout has %q", tt.notStdout))
			}
		})
	}
}

// An interrupt stops agentd ask --tools at once, the running command too.
func TestAskWithToolsInterrupt(t *testing.T) {
	t.Parallel()
	home, cwd := t.TempDir(), t.TempDir()
	cmd := exec.Command(agentdBin, "ask", "--tools", "bash", "/bash sleep 60")
	dieWithTest(cmd)
	cmd.Dir = cwd
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + t.TempDir()}
	var stdout strings.Builder
	var stderr e2eSyncBuf
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	guard := time.After(e2eHangGuard)
	for !strings.Contains(stderr.String(), "[tool bash ") {
		select {
		case <-guard:
			_ = cmd.Process.Kill()
			t.Fatalf("the tool never started; stderr:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "[tool bash failed: Command aborted]") {
			t.Errorf("after SIGINT: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-guard:
		_ = cmd.Process.Kill()
		t.Fatalf("agentd ask did not exit after SIGINT; stderr:\n%s", stderr.String())
	}
}
