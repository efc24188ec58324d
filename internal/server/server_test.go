package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fauxBuilder makes sessions of the offline model.
type fauxBuilder struct{ p *faux.Provider }

func (b fauxBuilder) Session(spec sessionspec.Spec) (*session.Session, error) {
	return session.New(session.Config{
		Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(), Stream: b.p.Stream,
		FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq, EventLogSize: 64,
	})
}

// env is a data directory a server can be started on again and again.
type env struct {
	root, cwd, sessions, state string
	faux                       *faux.Provider
}

func newEnv(t testing.TB) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{root: root, cwd: filepath.Join(root, "cwd"), sessions: filepath.Join(root, "sessions"), state: filepath.Join(root, "state"),
		faux: faux.New(faux.Options{})}
	if err := os.MkdirAll(e.cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) start(t testing.TB, lim Limits) *Server {
	t.Helper()
	return e.startConfig(t, Config{Limits: lim})
}

// startConfig starts a server of c in e's directories, with e's faux
// model unless c names a builder.
func (e *env) startConfig(t testing.TB, c Config) *Server {
	t.Helper()
	if c.Builder == nil {
		c.Builder = fauxBuilder{e.faux}
	}
	c.Cwd, c.SessionsDir, c.StateDir = e.cwd, e.sessions, e.state
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// crash drops a server as kill -9 would: nothing is closed or recorded.
// Only its goroutines are stopped, so the test can go on in-process.
func crash(s *Server) {
	s.mu.Lock()
	s.closing = true
	hosted := s.sessions
	s.sessions = map[string]*Hosted{}
	s.mu.Unlock()
	for _, h := range hosted {
		if h != nil {
			h.unsub()
			_ = h.sess.Close() // the session's goroutines only; the index is not told
		}
	}
	_ = s.index.close()
	_ = s.pipe.Close()
	s.cancel()
	s.wg.Wait()
}

func run(t *testing.T, h *Hosted, text string) {
	t.Helper()
	if err := h.Session().Prompt(session.UserMessage(text, nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	if err := h.Session().Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCreateGetDelete(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, Limits{MaxSessions: 2})
	ctx := context.Background()
	h, err := s.Create(ctx, CreateRequest{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if h.ID() != "a" || h.Cwd() != e.cwd {
		t.Errorf("created %q in %q", h.ID(), h.Cwd())
	}
	if got, err := s.Session(ctx, "a"); err != nil || got != h {
		t.Errorf("Session(a) = %v, %v", got, err)
	}
	if _, err := s.Create(ctx, CreateRequest{ID: "a"}); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("duplicate create: %v", err)
	}
	auto, err := s.Create(ctx, CreateRequest{})
	if err != nil || !strings.HasPrefix(auto.ID(), "session-") {
		t.Fatalf("auto id: %v, %v", auto, err)
	}
	if _, err := s.Create(ctx, CreateRequest{ID: "c"}); fault.CodeOf(err) != fault.Limit || err.Error() != "Session limit reached (2 sessions)" {
		t.Errorf("over the limit: %v", err)
	}
	for _, bad := range []CreateRequest{{ID: "a b"}, {ID: strings.Repeat("x", 257)}, {ID: "d", Cwd: "relative"}, {ID: "d", Cwd: "/no/such/dir"}, {ID: "d", Cwd: e.cwd + "/../cwd"}} {
		if _, err := s.Create(ctx, bad); fault.CodeOf(err) != fault.Invalid {
			t.Errorf("Create(%+v): %v, want invalid", bad, err)
		}
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, "a"); fault.CodeOf(err) != fault.NotFound || err.Error() != "Session a not found" {
		t.Errorf("after delete: %v", err)
	}
	if err := s.Delete(ctx, "a"); fault.CodeOf(err) != fault.NotFound {
		t.Errorf("second delete: %v", err)
	}
	// The id is free again: a new session, with seqs above the old ones.
	old := h.Session().Seq()
	h2, err := s.Create(ctx, CreateRequest{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if h2.Session().Seq() < old {
		t.Errorf("a reused id starts at seq %d, below %d", h2.Session().Seq(), old)
	}
}

// A command that bypasses the session's lane, sent right behind the
// create, waits for it; one behind a failed create learns it failed.
func TestExpectedSessionIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		s := e.start(t, Limits{})
		settled := s.Expect("w")
		got := make(chan error, 1)
		go func() {
			_, err := s.Session(context.Background(), "w")
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("Session returned before the create: %v", err)
		default:
		}
		if _, err := s.Create(context.Background(), CreateRequest{ID: "w"}); err != nil {
			t.Fatal(err)
		}
		settled()
		if err := <-got; err != nil {
			t.Fatalf("after the create: %v", err)
		}

		settled = s.Expect("never")
		go func() {
			_, err := s.Session(context.Background(), "never")
			got <- err
		}()
		synctest.Wait()
		settled()
		settled() // idempotent
		if err := <-got; fault.CodeOf(err) != fault.NotFound {
			t.Fatalf("after a create that never came: %v", err)
		}
		// The wait is bounded by the caller's context.
		s.Expect("slow")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := s.Session(ctx, "slow"); fault.CodeOf(err) != fault.Timeout {
			t.Errorf("bounded wait: %v", err)
		}
	})
}

// After a restart a known id just works: loaded on first use, under the
// same id, with its messages and a seq that does not go backwards; it is
// listed as known until then; a deleted one stays deleted.
func TestRestartKeepsSessions(t *testing.T) {
	for _, how := range []string{"shutdown", "crash"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			s := e.start(t, Limits{})
			h, err := s.Create(ctx, CreateRequest{ID: "keep"})
			if err != nil {
				t.Fatal(err)
			}
			run(t, h, "hello")
			head := h.Session().Seq()
			gone, _ := s.Create(ctx, CreateRequest{ID: "gone"})
			if err := s.Delete(ctx, gone.ID()); err != nil {
				t.Fatal(err)
			}
			if how == "shutdown" {
				if err := s.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				crash(s)
			}

			s2 := e.start(t, Limits{})
			if n := s2.SessionCount(); n != 0 {
				t.Errorf("%d sessions loaded at start; want lazy", n)
			}
			known := s2.KnownSessions()
			if len(known) != 1 || known[0].ID != "keep" || known[0].Info.MessageCount != 2 {
				t.Fatalf("known = %+v", known)
			}
			h2, err := s2.Session(ctx, "keep")
			if err != nil {
				t.Fatal(err)
			}
			if n := len(h2.Session().Messages()); n != 2 {
				t.Errorf("%d messages after the restart", n)
			}
			seq := h2.Session().Seq()
			switch {
			case how == "shutdown" && seq != head:
				t.Errorf("seq after a clean restart = %d, want exactly %d", seq, head)
			case how == "crash" && seq < head:
				t.Errorf("seq after a crash = %d, below %d", seq, head)
			}
			if evs, ok := h2.Session().EventsSince(head); ok != (how == "shutdown") || len(evs) != 0 {
				t.Errorf("cursor at the old head: %d events, ok %v", len(evs), ok)
			}
			if len(s2.KnownSessions()) != 0 {
				t.Errorf("still known-unloaded after loading")
			}
			if _, err := s2.Session(ctx, "gone"); fault.CodeOf(err) != fault.NotFound {
				t.Errorf("deleted session after a restart: %v", err)
			}
			if _, err := s2.Create(ctx, CreateRequest{ID: "keep"}); fault.CodeOf(err) != fault.Conflict {
				t.Errorf("create of a loaded known id: %v", err)
			}
		})
	}
}

// A known session that was never loaded again can be deleted, and its id
// is then free.
func TestDeleteKnownUnloaded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.start(t, Limits{})
	if _, err := s.Create(ctx, CreateRequest{ID: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := e.start(t, Limits{})
	if _, err := s2.Create(ctx, CreateRequest{ID: "k"}); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("create of a known id: %v", err)
	}
	if err := s2.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if s2.SessionCount() != 0 {
		t.Error("delete loaded the session")
	}
	if _, err := s2.Session(ctx, "k"); fault.CodeOf(err) != fault.NotFound {
		t.Errorf("after delete: %v", err)
	}
	if _, err := s2.Create(ctx, CreateRequest{ID: "k"}); err != nil {
		t.Errorf("create after delete: %v", err)
	}
}

// One file is one session, whatever name reaches it.
func TestLoadRefusesTheSameFileTwice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.start(t, Limits{})
	h, err := s.Create(ctx, CreateRequest{ID: "orig"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, h, "x")
	file := h.Session().File()
	link := filepath.Join(filepath.Dir(file), "hardlink.jsonl")
	if err := os.Link(file, link); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(filepath.Dir(file), "symlink.jsonl")
	if err := os.Symlink(file, sym); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link, sym} {
		_, err := s.Load(ctx, LoadRequest{ID: "copy", Path: p})
		if fault.CodeOf(err) != fault.Conflict || !strings.Contains(err.Error(), "already loaded as session orig") {
			t.Errorf("Load(%s): %v", filepath.Base(p), err)
		}
	}
	other, err := s.Create(ctx, CreateRequest{ID: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SwitchFile(other, link); fault.CodeOf(err) != fault.Conflict {
		t.Errorf("switch to a hard link of a loaded file: %v", err)
	}
}

// sink records what a client is sent.
type sink struct {
	gate chan struct{} // when set, writes wait for it: a client that does not read

	mu     sync.Mutex
	frames []string
	closed []Close
}

func (k *sink) Write(ctx context.Context, frames [][]byte) error {
	if k.gate != nil {
		select {
		case <-k.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	k.mu.Lock()
	for _, f := range frames {
		k.frames = append(k.frames, string(f))
	}
	k.mu.Unlock()
	return nil
}

func (k *sink) Close(c Close) {
	k.mu.Lock()
	k.closed = append(k.closed, c)
	k.mu.Unlock()
}

func (k *sink) snapshot() ([]string, []Close) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.frames...), append([]Close(nil), k.closed...)
}

// seqCodec encodes an event as its seq and type.
type seqCodec struct{}

func (*seqCodec) Encode(id string, ev session.Event) Frame {
	return Frame{Data: fmt.Appendf(nil, "%s:%d:%s", id, ev.Seq, ev.Type)}
}

func seqs(frames []string) []string {
	var out []string
	for _, f := range frames {
		if p := strings.SplitN(f, ":", 3); len(p) == 3 {
			out = append(out, p[1])
		}
	}
	return out
}

func TestSubscribeCursors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		s := e.start(t, Limits{})
		h, _ := s.Create(ctx, CreateRequest{ID: "s"})
		run(t, h, "one")
		head := h.Session().Seq()
		codec := &seqCodec{}
		attach := func() (*Client, *sink) {
			k := &sink{}
			c, err := s.Attach(k, ClientOptions{Face: "test"})
			if err != nil {
				t.Fatal(err)
			}
			return c, k
		}
		u64 := func(v uint64) *uint64 { return &v }

		c1, k1 := attach()
		r := s.Subscribe(c1, h, codec, u64(head-2), nil)
		if !r.Resumed || r.TooOld || r.Seq != head {
			t.Errorf("resume: %+v", r)
		}
		c2, k2 := attach()
		if r := s.Subscribe(c2, h, codec, u64(head+58), nil); !r.TooOld || r.Resumed || r.Seq != head {
			t.Errorf("future cursor: %+v", r)
		}
		c3, k3 := attach()
		hold := NewHold()
		if r := s.Subscribe(c3, h, codec, u64(head-1), hold); !r.Resumed {
			t.Errorf("held resume: %+v", r)
		}
		synctest.Wait()
		if f, _ := k3.snapshot(); len(f) != 0 {
			t.Errorf("a held subscription sent %v", f)
		}
		run(t, h, "two")
		synctest.Wait()
		if f, _ := k3.snapshot(); len(f) != 0 {
			t.Errorf("a held subscription sent live events %v", f)
		}
		c3.Send([]byte("the response"))
		hold.Release()
		synctest.Wait()
		last := h.Session().Seq()
		want := func(from uint64) []string {
			var out []string
			for i := from + 1; i <= last; i++ {
				out = append(out, fmt.Sprint(i))
			}
			return out
		}
		f1, _ := k1.snapshot()
		f2, _ := k2.snapshot()
		f3, _ := k3.snapshot()
		if got := strings.Join(seqs(f1), ","); got != strings.Join(want(head-2), ",") {
			t.Errorf("resumed client got %s, want %v", got, want(head-2))
		}
		if got := strings.Join(seqs(f2), ","); got != strings.Join(want(head), ",") {
			t.Errorf("too-old client got %s, want only live %v", got, want(head))
		}
		if len(f3) == 0 || f3[0] != "the response" || strings.Join(seqs(f3[1:]), ",") != strings.Join(want(head-1), ",") {
			t.Errorf("held client got %v", f3)
		}
		for _, c := range []*Client{c1, c2, c3} {
			c.Close(Close{})
		}
	})
}

// Over the server-wide budget, the clients furthest behind are cut off
// first, with a reason; the rest go on.
func TestSendBudgetCutsTheFurthestBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		s := e.start(t, Limits{MaxQueuedBytes: 1 << 20, MaxQueuedBytesTotal: 30_000})
		type cl struct {
			c *Client
			k *sink
		}
		attach := func(gated bool) cl {
			k := &sink{}
			if gated {
				k.gate = make(chan struct{})
			}
			c, err := s.Attach(k, ClientOptions{Face: "test"})
			if err != nil {
				t.Fatal(err)
			}
			return cl{c, k}
		}
		frame := make([]byte, 1000)
		send := func(x cl, n int) {
			for range n {
				x.c.Send(frame)
			}
			synctest.Wait()
		}
		// Four clients that stopped reading, 3, 5, 9 and 7 KB behind:
		// 24 KB, within the budget.
		var slow []cl
		for _, n := range []int{3, 5, 9, 7} {
			x := attach(true)
			send(x, n)
			slow = append(slow, x)
		}
		fast := attach(false)
		for range 50 {
			send(fast, 1) // it keeps up: nothing piles up for it
		}
		for i, x := range slow {
			if x.c.Closing() {
				t.Fatalf("client %d cut off within the budget", i)
			}
		}
		// One more falls 7 KB behind: 31 KB. The one 9 KB behind goes.
		trigger := attach(true)
		send(trigger, 7)
		for i, x := range slow {
			if got, want := x.c.Closing(), i == 2; got != want {
				t.Errorf("client %d (%d KB behind) cut off: %v, want %v", i, []int{3, 5, 9, 7}[i], got, want)
			}
		}
		if q := s.budget.total.Load(); q > 30_000 {
			t.Errorf("%d bytes queued, over the budget", q)
		}
		// It falls 9 KB further behind: 31 KB again, and now it is the
		// furthest behind.
		send(trigger, 9)
		if !trigger.c.Closing() || slow[0].c.Closing() || slow[1].c.Closing() || slow[3].c.Closing() {
			t.Errorf("after the second overflow: want only the client 16 KB behind cut off too")
		}
		for range 10 {
			send(fast, 1)
		}
		if fast.c.Closing() {
			t.Errorf("the client that reads was cut off")
		}
		for _, x := range append(slow, trigger) {
			close(x.k.gate)
		}
		synctest.Wait()
		_, closes := slow[2].k.snapshot()
		if len(closes) != 1 || closes[0].Kind != CloseOverloaded || !strings.Contains(closes[0].Reason, "furthest behind") {
			t.Errorf("closes = %+v", closes)
		}
		// Its writer had taken what was queued before it stopped reading
		// (one batch, bounded); nothing queued later reached it.
		if got, _ := slow[2].k.snapshot(); len(got) > 9 {
			t.Errorf("a cut-off client was sent %d frames, more than it had before it fell behind", len(got))
		}
		if n := s.SendBudgetCuts(); n != 2 {
			t.Errorf("budget cuts counted: %d, want 2", n)
		}
		if q := s.budget.total.Load(); q < 0 || q > 30_000 {
			t.Errorf("%d bytes counted as queued after the cuts", q)
		}
		for _, x := range append(slow, trigger, fast) {
			x.c.Close(Close{})
		}
		synctest.Wait()
		if q := s.budget.total.Load(); q != 0 {
			t.Errorf("%d bytes still counted after every client closed", q)
		}
	})
}

func TestHostPolicy(t *testing.T) {
	p := HostPolicy{Listen: "0.0.0.0:3141", Allowed: []string{"agent.example.com"}}
	for host, want := range map[string]bool{
		"localhost": true, "localhost:3141": true, "LOCALHOST:1": true, "app.localhost:3141": true,
		"127.0.0.1:3141": true, "[::1]:3141": true, "10.1.2.3": true, "0.0.0.0:3141": true,
		"agent.example.com": true, "agent.example.com.:3141": true, "Agent.Example.Com": true,
		"evil.com:3141": false, "localhost.evil.com": false, "evillocalhost": false, "": false,
		"agent.example.com.evil.com": false,
	} {
		if got := p.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	named := HostPolicy{Listen: "myhost:3141"}
	if !named.Allows("myhost:3141") || named.Allows("otherhost") {
		t.Error("the listen name")
	}
}

// TestSessionLimitUnloadsIdle: at the session limit the session left
// alone longest makes room (it stays known and loads again on demand);
// sessions used within the last minute are never unloaded for it.
func TestSessionLimitUnloadsIdle(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, Limits{MaxSessions: 2})
	ctx := context.Background()
	a, err := s.Create(ctx, CreateRequest{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, CreateRequest{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, CreateRequest{ID: "c"}); fault.CodeOf(err) != fault.Limit {
		t.Fatalf("over the limit with both sessions in use: %v", err)
	}
	fileA := a.Session().File()
	a.lastCmd.Store(time.Now().Add(-3 * time.Minute).UnixMilli())
	b.lastCmd.Store(time.Now().Add(-2 * time.Minute).UnixMilli())
	if _, err := s.Create(ctx, CreateRequest{ID: "c"}); err != nil {
		t.Fatalf("create at the limit with idle sessions: %v", err)
	}
	select {
	case <-a.Gone():
	default:
		t.Fatal("the session idle longest was not unloaded")
	}
	if a.Deleted() {
		t.Fatal("an unloaded session counts as deleted")
	}
	// a comes back on demand, making room in turn (b is idle now).
	again, err := s.Session(ctx, "a")
	if err != nil {
		t.Fatalf("loading the unloaded session: %v", err)
	}
	if again == a || again.Session().File() != fileA {
		t.Fatalf("reloaded %p from %s, want a new host of %s", again, again.Session().File(), fileA)
	}
	select {
	case <-b.Gone():
	default:
		t.Fatal("b was not unloaded to make room for a")
	}
}
