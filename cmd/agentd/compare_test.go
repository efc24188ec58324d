package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestCompareAgentdAndPi measures `agentd rpc` and `pi --mode rpc` (pi
// 0.73.1 from npm, on this machine's node) side by side against the same
// mock model, and logs a table:
//
//   - startup: spawn until the response to a get_state sent at once
//     (median, min and max of cmpRuns runs);
//   - memory: peak RSS (VmHWM) after that get_state, after a prompt that
//     runs a bash tool, and after a long answer;
//   - output: bytes on stdout for one answer of pcLongDeltas small text
//     deltas (~2,000 tokens), prompt to agent_end, in pi's format, in
//     agentd's default (pi's) format and in agentd's --stream-format
//     delta.
//
// It asserts only what the agents said (successful responses, complete
// answers), never a time or a size: the figures depend on the machine.
func TestCompareAgentdAndPi(t *testing.T) {
	nm := pcNodeModules(t)
	srv := pcNewMock(t)
	home := t.TempDir()
	pcWriteHome(t, home, srv.OpenAIURL())
	work := t.TempDir()
	piCLI := filepath.Join(nm, "@mariozechner", "pi-coding-agent", "dist", "cli.js")
	common := []string{"--provider", pcProvider, "--model", pcModel, "--no-session"}
	agents := []cmpAgent{
		{name: "pi 0.73.1", argv: append([]string{"node", piCLI, "--mode", "rpc"}, common...)},
		{name: "agentd", argv: append([]string{agentdBin, "rpc"}, common...)},
		{name: "agentd --stream-format delta", argv: append([]string{agentdBin, "rpc", "--stream-format", "delta"}, common...), bytesOnly: true},
	}

	// (a) startup, the agents interleaved so that load changes on the
	// machine affect them alike.
	for run := 0; run < cmpRuns; run++ {
		for i := range agents {
			a := &agents[i]
			if a.bytesOnly {
				continue
			}
			p := cmpStart(t, a.argv, home, work)
			p.send(t, map[string]any{"id": "s", "type": "get_state"})
			r := p.response(t, "s")
			a.startup = append(a.startup, time.Since(p.started))
			if model, _ := r.Data["model"].(map[string]any); model["id"] != pcModel {
				t.Errorf("%s: get_state model %v", a.name, r.Data["model"])
			}
			p.stop(t)
		}
	}

	// (b) memory and (c) output, one process per agent.
	want := strings.Join(pcLongAnswerDeltas(), "")
	for i := range agents {
		a := &agents[i]
		p := cmpStart(t, a.argv, home, work)
		p.send(t, map[string]any{"id": "s", "type": "get_state"})
		p.response(t, "s")
		a.hwmIdle, a.rssIdle = p.memory(t)

		p.send(t, map[string]any{"id": "p1", "type": "prompt", "message": "USE_TOOL please"})
		p.response(t, "p1")
		run := p.untilAgentEnd(t)
		if !slices.Equal(run.toolOutputs, []string{"hello-from-tool\n"}) || run.lastText != "Tool said: hello-from-tool" {
			t.Errorf("%s: tool run: outputs %q, answer %q", a.name, run.toolOutputs, run.lastText)
		}
		a.hwmTool, a.rssTool = p.memory(t)

		from := p.bytes.Load()
		start := time.Now()
		p.send(t, map[string]any{"id": "p2", "type": "prompt", "message": "LONG answer please"})
		p.response(t, "p2")
		run = p.untilAgentEnd(t)
		a.longTime = time.Since(start)
		a.longBytes = p.bytes.Load() - from
		a.longDeltas = run.textDeltas
		if run.lastText != want || run.textDeltas != pcLongDeltas {
			t.Errorf("%s: long answer: %d text deltas (want %d), %d characters (want %d)", a.name, run.textDeltas, pcLongDeltas, len(run.lastText), len(want))
		}
		a.hwmLong, _ = p.memory(t)
		p.stop(t)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "agentd vs pi on this machine (%d CPUs, node %s), same mock; figures vary with load\n", runtime.NumCPU(), cmpNodeVersion())
	fmt.Fprintf(&b, "%-30s %22s %12s %12s %12s %14s %10s %12s\n", "", "spawn→get_state", "VmHWM idle", "VmHWM tool", "VmHWM long", "stdout, long", "B/delta", "long answer")
	fmt.Fprintf(&b, "%-30s %22s %12s %12s %12s %14s %10s %12s\n", "", "median (min–max)", "", "", "", "", "", "(wall)")
	for _, a := range agents {
		startup := "—"
		if len(a.startup) > 0 {
			s := slices.Clone(a.startup)
			slices.Sort(s)
			startup = fmt.Sprintf("%s (%s–%s)", cmpMs(s[len(s)/2]), cmpMs(s[0]), cmpMs(s[len(s)-1]))
		}
		perDelta := "—"
		if a.longDeltas > 0 {
			perDelta = strconv.FormatInt(a.longBytes/int64(a.longDeltas), 10)
		}
		fmt.Fprintf(&b, "%-30s %22s %12s %12s %12s %14s %10s %12s\n", a.name, startup, cmpMiB(a.hwmIdle), cmpMiB(a.hwmTool), cmpMiB(a.hwmLong),
			strconv.FormatInt(a.longBytes, 10), perDelta, cmpMs(a.longTime))
	}
	fmt.Fprintf(&b, "(VmRSS idle / after the tool run: %s)", strings.Join(func() []string {
		var out []string
		for _, a := range agents {
			out = append(out, fmt.Sprintf("%s %s / %s", a.name, cmpMiB(a.rssIdle), cmpMiB(a.rssTool)))
		}
		return out
	}(), "; "))
	t.Logf("\n%s", b.String())
}

// cmpRuns is the number of startups measured per agent.
const cmpRuns = 5

type cmpAgent struct {
	name      string
	argv      []string
	bytesOnly bool // measured for output only (same binary as another row)

	startup                   []time.Duration
	hwmIdle, hwmTool, hwmLong int64 // kB
	rssIdle, rssTool          int64 // kB
	longBytes                 int64
	longDeltas                int
	longTime                  time.Duration
}

// cmpProc is an RPC agent started directly (no wrapper process), read
// line by line on a goroutine.
type cmpProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan []byte
	bytes   atomic.Int64
	started time.Time
	stderr  cmpBuffer
	name    string
	exited  chan struct{} // closed when the process has been waited for
}

// cmpWait bounds every wait for a line: a hang guard, far above what any
// step takes on a loaded machine, not a performance limit.
const cmpWait = 2 * time.Minute

func cmpStart(t *testing.T, argv []string, home, dir string) *cmpProc {
	t.Helper()
	p := &cmpProc{lines: make(chan []byte, 4096), name: filepath.Base(argv[0]), exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Env = pcNodeEnv(home)
	p.cmd.Stderr = &p.stderr
	dieWithTest(p.cmd)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReaderSize(out, 1<<16)
		for {
			line, err := r.ReadBytes('\n')
			p.bytes.Add(int64(len(line)))
			if len(bytes.TrimSpace(line)) > 0 {
				p.lines <- line
			}
			if err != nil {
				break
			}
		}
		close(p.lines)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		p.drain()
	})
	return p
}

func (p *cmpProc) send(t *testing.T, cmd map[string]any) {
	t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("%s: writing %s: %v\nstderr: %s", p.name, b, err, p.stderr.String())
	}
}

// cmpLine is the part of a line the comparison reads.
type cmpLine struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	Command    string         `json:"command"`
	Success    bool           `json:"success"`
	Error      string         `json:"error"`
	Data       map[string]any `json:"data"`
	ToolCallID string         `json:"toolCallId"`
	Result     *struct {
		Content []struct{ Text string } `json:"content"`
	} `json:"result"`
	Message *struct {
		Role    string `json:"role"`
		Content []struct {
			Type, Text string
		} `json:"content"`
	} `json:"message"`
	AssistantMessageEvent *struct {
		Type string `json:"type"`
	} `json:"assistantMessageEvent"`
}

// next returns the next line, decoded.
func (p *cmpProc) next(t *testing.T) cmpLine {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s: stdout closed; stderr: %s", p.name, p.stderr.String())
		}
		var l cmpLine
		// message_update lines are most of the output (in pi's format each
		// carries the whole partial message twice): classify them without
		// decoding, so the reader keeps up and the agents' output buffers,
		// which count in their peak RSS, stay small.
		if bytes.HasPrefix(line, []byte(`{"type":"message_update","assistantMessageEvent":{"type":"`)) {
			l.Type = "message_update"
			rest := line[len(`{"type":"message_update","assistantMessageEvent":{"type":"`):]
			if i := bytes.IndexByte(rest, '"'); i >= 0 {
				l.AssistantMessageEvent = &struct {
					Type string `json:"type"`
				}{string(rest[:i])}
			}
			return l
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("%s: not JSON: %.200s", p.name, line)
		}
		return l
	case <-time.After(cmpWait):
		t.Fatalf("%s: no output for %v; stderr: %s", p.name, cmpWait, p.stderr.String())
	}
	return cmpLine{}
}

// response skips events until the response with id, which must succeed.
func (p *cmpProc) response(t *testing.T, id string) cmpLine {
	t.Helper()
	for {
		l := p.next(t)
		if l.Type != "response" {
			continue
		}
		if l.ID != id || !l.Success {
			t.Fatalf("%s: response %+v, want success for id %s", p.name, l, id)
		}
		return l
	}
}

type cmpDigest struct {
	textDeltas  int
	toolOutputs []string
	lastText    string
}

func (p *cmpProc) untilAgentEnd(t *testing.T) cmpDigest {
	t.Helper()
	var d cmpDigest
	for {
		l := p.next(t)
		switch l.Type {
		case "message_update":
			if l.AssistantMessageEvent != nil && l.AssistantMessageEvent.Type == "text_delta" {
				d.textDeltas++
			}
		case "tool_execution_end":
			if l.Result != nil && len(l.Result.Content) > 0 {
				d.toolOutputs = append(d.toolOutputs, l.Result.Content[0].Text)
			}
		case "message_end":
			if l.Message != nil && l.Message.Role == "assistant" {
				d.lastText = ""
				for _, c := range l.Message.Content {
					if c.Type == "text" {
						d.lastText += c.Text
					}
				}
			}
		case "agent_end":
			return d
		case "response":
			if !l.Success {
				t.Fatalf("%s: unexpected failed response %+v", p.name, l)
			}
		}
	}
}

// memory reads the process's peak and current resident set (kB).
func (p *cmpProc) memory(t *testing.T) (hwm, rss int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			hwm = n
		case "VmRSS":
			rss = n
		}
	}
	if hwm == 0 {
		t.Fatalf("%s: no VmHWM in /proc/%d/status", p.name, p.cmd.Process.Pid)
	}
	return hwm, rss
}

// stop ends the agent as a client does: stdin closed and SIGTERM (pi
// keeps running after EOF on stdin), then SIGKILL if it lingers.
func (p *cmpProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			p.kill()
		}
	}()
	p.drain()
}

// drain discards the rest of the output and waits for the process.
func (p *cmpProc) drain() {
	for range p.lines {
	}
	<-p.exited
}

func (p *cmpProc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
	}
}

func cmpMs(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}

func cmpMiB(kb int64) string {
	if kb == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
}

func cmpNodeVersion() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// cmpBuffer is a bytes.Buffer safe for the process's stderr copier and
// the test reading it in failure messages.
type cmpBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *cmpBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *cmpBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
