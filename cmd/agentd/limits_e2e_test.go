//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/proclimit"
)

// limitsHealthBound is how long /healthz may take to answer while a tool
// misbehaves. Generous: CI runs this with -race on 2 shared cores; a
// server that stopped answering (as one did under a fork bomb) takes
// forever.
const limitsHealthBound = 5 * time.Second

// healthWatch asks /healthz again and again until stopped, keeping the
// longest answer time and any failure.
type healthWatch struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu       sync.Mutex
	max      time.Duration
	answers  int
	failures []string
}

func watchHealth(url string) *healthWatch {
	h := &healthWatch{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 2 * limitsHealthBound}
	go func() {
		defer close(h.done)
		// Paced, so that the watch itself does not load the 2 cores the
		// tests share; it measures, it does not order anything.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			resp, err := client.Get(url)
			took := time.Since(start)
			h.mu.Lock()
			h.answers++
			h.max = max(h.max, took)
			switch {
			case err != nil:
				h.failures = append(h.failures, err.Error())
			case resp.StatusCode != http.StatusOK:
				h.failures = append(h.failures, resp.Status)
			}
			h.mu.Unlock()
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()
	return h
}

// finish stops the watch and returns the longest answer time, the number
// of answers and the failures.
func (h *healthWatch) finish() (time.Duration, int, []string) {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max, h.answers, h.failures
}

// processesWith counts live processes whose command line holds word: a
// shell's forks keep its command line, so a word in a comment of the
// command marks every process of it.
func processesWith(word string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		// The supervisor's command line holds the command too; it may
		// still be exiting when the call has returned.
		if err != nil || !strings.Contains(string(b), word) || strings.Contains(string(b), "__supervise") {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			s := string(stat)
			if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && s[i+2] == 'Z' {
				continue // a zombie is gone
			}
		}
		n++
	}
	return n
}

func limitsMarker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "agentd-e2e-limits-" + hex.EncodeToString(b)
}

// limitsSession is one session of an agentd serve started with args,
// whose /healthz is watched from the start.
type limitsSession struct {
	t      *testing.T
	e      *e2eEnv
	health *healthWatch
	conn   *svConn
	n      int
}

const limitsSid = "limits"

func startLimits(t *testing.T, args ...string) *limitsSession {
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, args...)
	h := watchHealth("http://" + s.loopback() + "/healthz")
	t.Cleanup(func() { h.finish() })
	A := s.dial("A")
	svCreate(A, limitsSid)
	return &limitsSession{t: t, e: e, health: h, conn: A}
}

// run has the model run command with bash and returns the tool's result
// and how long after the prompt was sent it came.
func (l *limitsSession) run(command string) (text string, isError bool, took time.Duration) {
	l.t.Helper()
	l.n++
	id := fmt.Sprintf("p%d", l.n)
	start := time.Now()
	l.conn.send(svM{"id": id, "type": "prompt", "sessionId": limitsSid, "message": "CMD:" + command})
	te := l.conn.waitEvent(limitsSid, "tool_execution_end")
	took = time.Since(start)
	l.conn.waitEvent(limitsSid, "agent_end")
	svWantOK(l.t, l.conn.response(id))
	isError, _ = svAt(te.m, "event", "isError").(bool)
	return svStr(te.m, "event", "result", "content", "0", "text"), isError, took
}

// healthy checks that /healthz answered every time, in time, and logs
// how fast.
func (l *limitsSession) healthy() {
	l.t.Helper()
	worst, answers, failures := l.health.finish()
	l.t.Logf("/healthz: %d answers, the slowest in %v", answers, worst)
	if len(failures) > 0 || worst > limitsHealthBound || answers == 0 {
		l.t.Fatalf("/healthz failed %d times (%v), slowest answer %v", len(failures), failures, worst)
	}
}

// TestToolLimitsServe: agentd serve with the default sandbox and the
// default limits; the model's bash runs a fork bomb (one whose shell
// waits, and the one reported, whose shell exits at once) and a command
// that leaves `sleep 1000 &` behind. The bomb ends with an error that
// names the process limit, nothing of any of them is left when its call
// returns, the session goes on, and /healthz answers throughout.
func TestToolLimitsServe(t *testing.T) {
	t.Parallel()
	if e := proclimit.Probe(proclimit.Default(), true, ""); e.Procs == "" {
		// An unlimited bomb would take the machine's pids.
		t.Skipf("processes of a command cannot be limited on this machine: %v", e.Missing)
	}
	l := startLimits(t)

	mark := limitsMarker(t)
	got, isErr, took := l.run("bomb(){ bomb | bomb & }; bomb; sleep 600 # " + mark)
	if !isErr || !strings.Contains(got, fmt.Sprintf("Command stopped: it reached the limit of %d processes and threads at once", proclimit.DefaultProcs)) {
		t.Fatalf("fork bomb: error %v, %q", isErr, got)
	}
	if left := processesWith(mark); left != 0 {
		t.Fatalf("%d processes of the fork bomb left after its call returned", left)
	}
	t.Logf("fork bomb: stopped at the process limit, everything gone %v after the prompt was sent", took)

	mark = limitsMarker(t)
	_, _, took = l.run("bomb(){ bomb | bomb & }; bomb # " + mark)
	if left := processesWith(mark); left != 0 {
		t.Fatalf("%d processes of the fork bomb whose shell exits at once left after its call returned", left)
	}
	t.Logf("fork bomb (shell exits at once): everything gone %v after the prompt was sent", took)

	// Found by its command line: the pid the command sees is its PID
	// namespace's, which names another process on the host.
	mark = limitsMarker(t)
	if got, isErr, _ = l.run(fmt.Sprintf("(exec -a %s sleep 1000) & echo started", mark)); isErr || got != "started\n" {
		t.Fatalf("background job: error %v, %q", isErr, got)
	}
	if left := processesWith(mark); left != 0 {
		t.Fatalf("sleep 1000 & outlived the command (%d processes)", left)
	}

	if got, isErr, _ = l.run("echo next"); isErr || got != "next\n" {
		t.Fatalf("the next command: error %v, %q", isErr, got)
	}
	l.healthy()
}

// TestToolMemoryAndCPULimitsServe: with --tool-max-memory and
// --tool-cpu-time, a memory hog and a CPU spinner are each stopped with
// an error that names the limit; the session goes on and /healthz
// answers throughout.
func TestToolMemoryAndCPULimitsServe(t *testing.T) {
	t.Parallel()
	lim := proclimit.Limits{Memory: 64 << 20, CPU: 2 * time.Second}
	enf := proclimit.Probe(lim, true, "")
	l := startLimits(t, "--tool-max-memory", "64MiB", "--tool-cpu-time", "2s")

	got, isErr, took := l.run("head -c 1G /dev/zero | tail; echo tail ended $?")
	if strings.Contains(enf.Memory, "cgroup") {
		if !isErr || !strings.Contains(got, "Command stopped: it reached the memory limit of 64 MiB") {
			t.Fatalf("memory hog: error %v, %q", isErr, got)
		}
	} else if !strings.Contains(got, "memory exhausted") {
		t.Fatalf("memory hog under %s: %q", enf.Memory, got)
	}
	if strings.Contains(got, "tail ended 0") {
		t.Fatalf("the memory hog got its 1 GiB: %q", got)
	}
	t.Logf("memory hog (%s): stopped after %v", enf.Memory, took)

	got, isErr, took = l.run("while :; do :; done")
	want := "Command stopped: it reached the limit of 2s of CPU time"
	if !strings.Contains(enf.CPU, "cgroup") {
		want = "Command was killed by signal SIGXCPU"
	}
	if !isErr || !strings.Contains(got, want) {
		t.Fatalf("CPU spinner: error %v, %q", isErr, got)
	}
	t.Logf("CPU spinner (%s): stopped after %v", enf.CPU, took)

	if got, isErr, _ = l.run("echo next"); isErr || got != "next\n" {
		t.Fatalf("the next command: error %v, %q", isErr, got)
	}
	l.healthy()
}
