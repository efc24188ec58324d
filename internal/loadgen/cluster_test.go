package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	agentd "github.com/agentd-dev/agentd/internal/server"
)

// Three real nodes, a handful of sessions, each driven through a node
// that does not own it; then a node is killed and its sessions must all
// answer through the others.
func TestRunCluster(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 6, Rounds: 2, Chunks: 5, ClusterNodes: 3, Settle: 100 * time.Millisecond,
		CommandTimeout: 30 * time.Second, ServerArgs: []string{"--cluster-lease-ttl", "1s"}, ServerLog: &syncWriter{w: &log}})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	t.Logf("report: %+v, cluster %+v", rep, *rep.Cluster)
	// A prompt's answer comes after its events, as from one server.
	for kind, n := range rep.ErrorKinds {
		t.Errorf("%d errors of kind %q: %q", n, kind, rep.ErrorSamples)
	}
	// 6 sessions x 2 rounds x (1 prompt + 1 get_state).
	if rep.Commands != 24 || rep.Prompts != 12 || rep.ModelRequests != 12 || rep.AnswersChecked != 12 {
		t.Errorf("commands %d, prompts %d, model requests %d, answers checked %d; want 24, 12, 12, 12",
			rep.Commands, rep.Prompts, rep.ModelRequests, rep.AnswersChecked)
	}
	if rep.PromptP50 <= 0 || rep.AddedP99 <= 0 || rep.GetStateP50 <= 0 || rep.CommandsPerSec <= 0 {
		t.Errorf("prompt p50 %v, added p99 %v, get_state p50 %v, commands/s %.0f", rep.PromptP50, rep.AddedP99, rep.GetStateP50, rep.CommandsPerSec)
	}
	c := rep.Cluster
	if c == nil {
		t.Fatal("no cluster report")
	}
	// Every client is on a node that does not own its session. A command
	// can count twice: a node that got it from a stale owners entry
	// passes it on again (a 1 s lease moves on a loaded machine); the
	// model requests above say it ran once.
	if c.Nodes != 3 || c.Forwarded < int64(rep.Commands) {
		t.Errorf("nodes %d, forwarded %d of %d commands; want 3, all", c.Nodes, c.Forwarded, rep.Commands)
	}
	leases := 0
	for _, n := range c.Leases {
		leases += n
	}
	if leases != 6 || c.Killed == "n1" || c.KilledSessions == 0 || c.KilledSessions != c.Leases[c.Killed] {
		t.Errorf("leases %v, killed %s with %d sessions: want 6 leases, a node other than n1 (NATS) that owned sessions", c.Leases, c.Killed, c.KilledSessions)
	}
	// With a 1 s lease the sessions cannot be taken over sooner, and
	// within the command timeout they must be.
	if c.TakenOver != c.KilledSessions || c.Takeover < time.Second || c.TakeoverP50 > c.Takeover {
		t.Errorf("taken over %d of %d, all in %v, p50 %v", c.TakenOver, c.KilledSessions, c.Takeover, c.TakeoverP50)
	}
	if rep.ServerExit != 0 {
		t.Errorf("surviving nodes' exit code %d", rep.ServerExit)
	}
	// Watchers on every face, on each session's node and on another,
	// got the run's events (lag.go): none failed, none missed one.
	if l := c.Lag; l == nil || l.Sessions != 6 || len(l.Failed) != 0 {
		t.Errorf("lag report %+v: want 6 sessions watched, no watcher failed", l)
	} else {
		for _, face := range lagFaces {
			for name, f := range map[string]LagFigures{"single": l.Single[face], "cross": l.Cross[face]} {
				if f.Events == 0 || f.Max < f.P99 || f.P99 < f.P50 {
					t.Errorf("lag of %s, %s node: %+v", face, name, f)
				}
			}
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, []Report{rep}); err != nil || !strings.Contains(b.String(), "takeover: all / p50") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	// Memory as on one node: every reading made, the sessions' RSS from
	// the reading after each node's first session.
	if len(c.RSSErrors) != 0 || rep.RSSBaseline <= 0 || rep.RSSFirstSession <= 0 || rep.RSSSessions <= 0 || rep.RSSAfter <= 0 {
		t.Errorf("RSS baseline %d, first %d, sessions %d, after %d; failed readings %q", rep.RSSBaseline, rep.RSSFirstSession, rep.RSSSessions, rep.RSSAfter, c.RSSErrors)
	}
	if want := (rep.RSSSessions - rep.RSSFirstSession) / 6; rep.RSSPerSession != want {
		t.Errorf("RSS per session %d, want %d: (sessions %d - first %d) / 6", rep.RSSPerSession, want, rep.RSSSessions, rep.RSSFirstSession)
	}
}

// A node whose memory cannot be read (here a process that exited and
// was not yet waited for: its status has no VmRSS) fails the reading
// with a warning and a line for the report; the others are still read.
func TestNodesMemoryUnreadable(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readMemory(self.Pid); err != nil {
		t.Skipf("no memory readings here: %v", err)
	}
	gone := exec.Command("true")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	defer gone.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := readMemory(gone.Process.Pid); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exited process's memory is still readable")
		}
		time.Sleep(time.Millisecond)
	}
	node := func(id string, p *os.Process) clusterNode {
		return clusterNode{id: id, srv: &server{cmd: &exec.Cmd{Process: p}, exited: make(chan struct{})}}
	}
	var logged bytes.Buffer
	var rssErrors []string
	nm := &nodesMemory{nodes: []clusterNode{node("n1", self), node("n2", gone.Process)},
		log: slog.New(slog.NewTextHandler(&logged, nil)), failed: &rssErrors}
	m, ok := nm.read(context.Background(), "baseline", -1)
	if ok || m.RSS <= 0 {
		t.Errorf("read: ok %t, RSS %d; want not ok, n1's RSS", ok, m.RSS)
	}
	if len(rssErrors) != 1 || !strings.HasPrefix(rssErrors[0], "baseline: node n2: ") {
		t.Errorf("failed readings %q, want one of node n2", rssErrors)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "node=n2") {
		t.Errorf("log %q, want a warning about n2", logged.String())
	}
	b, err := json.Marshal(ClusterReport{RSSErrors: rssErrors})
	if err != nil || !strings.Contains(string(b), `"rss_errors":["baseline: node n2: `) {
		t.Errorf("JSON %s (%v), want rss_errors", b, err)
	}
}

// A client never connects to its session's home, and the clients of
// sessions with one home alternate over the other nodes.
func TestAwayFrom(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	used := map[string]map[string]bool{} // home -> nodes used
	for i := range 30 {
		sid := fmt.Sprintf("%06d-bench", i)
		home := agentd.PlaceSession(sid, ids)
		got := ids[awayFrom(sid, ids, i)]
		if got == home {
			t.Errorf("session %s (client %d): connects to its home %s", sid, i, home)
		}
		if used[home] == nil {
			used[home] = map[string]bool{}
		}
		used[home][got] = true
	}
	for home, nodes := range used {
		if len(nodes) != 2 {
			t.Errorf("sessions at home %s: clients on %v, want both other nodes", home, nodes)
		}
	}
}

// syncWriter lets several servers' stderr copiers write to one builder.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
