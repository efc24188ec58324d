package server

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
)

// A stopping node waits for the answers to the commands it passed on,
// and stops waiting the moment the last one arrives, or at its timeout.
func TestClusterAwaitInflight(t *testing.T) {
	tests := []struct {
		name     string
		inflight int
		answerAt []time.Duration // when each command in flight is answered
		timeout  time.Duration
		want     time.Duration
	}{
		{"nothing in flight", 0, nil, time.Minute, 0},
		{"answered", 2, []time.Duration{300 * time.Millisecond, 1005 * time.Millisecond}, time.Minute, 1005 * time.Millisecond},
		{"never answered", 1, nil, 3 * time.Second, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cs := &clusterState{inflight: map[*inflight]struct{}{}}
				var fls []*inflight
				for range tc.inflight {
					fl := &inflight{node: "b"}
					cs.inflight[fl] = struct{}{}
					fls = append(fls, fl)
				}
				start := time.Now()
				for i, at := range tc.answerAt {
					time.AfterFunc(at, func() { cs.answered(fls[i]) })
				}
				cs.awaitInflight(tc.timeout)
				if got := time.Since(start); got != tc.want {
					t.Errorf("waited %v, want %v", got, tc.want)
				}
				synctest.Wait()
			})
		})
	}
}

// A session is handed over the moment its run ends, or it waits for a
// person, or the hand-over's context ends, not at the next poll; a session
// the cluster does not host as well.
func TestClusterSettle(t *testing.T) {
	tests := []struct {
		name  string
		run   time.Duration // how long the session's run takes; 0: no run
		limit time.Duration // the hand-over's context
		want  time.Duration
		ask   bool // the run asks a person, after run, and waits
		local bool // a session the cluster does not host (its id is no cluster id)
	}{
		{"idle", 0, time.Minute, 0, false, false},
		{"run ends", 3005 * time.Millisecond, time.Minute, 3005 * time.Millisecond, false, false},
		{"context ends first", 3005 * time.Millisecond, 1001 * time.Millisecond, 1001 * time.Millisecond, false, false},
		{"asks a person", 2005 * time.Millisecond, time.Minute, 2005 * time.Millisecond, true, false},
		{"local session asks a person", 2005 * time.Millisecond, time.Minute, 2005 * time.Millisecond, true, true},
		{"local session's run ends", 3005 * time.Millisecond, time.Minute, 3005 * time.Millisecond, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, sess, h := settling(t, !tc.local)
				if tc.ask {
					p.Push(faux.Response{ToolCalls: []faux.ToolCall{{Name: "ask_user", Args: `{"question":"which one?"}`}}, Delay: tc.run})
					if err := sess.Prompt(session.UserMessage("hi", nil), session.BehaviorNone); err != nil {
						t.Fatal(err)
					}
				} else if tc.run > 0 {
					p.Push(faux.Response{Text: "done", Delay: tc.run})
					if err := sess.Prompt(session.UserMessage("hi", nil), session.BehaviorNone); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(t.Context(), tc.limit)
				defer cancel()
				start := time.Now()
				(&clusterState{}).settle(ctx, h)
				if got := time.Since(start); got != tc.want {
					t.Errorf("handed over after %v, want %v", got, tc.want)
				}
				sess.Abort()
			})
		})
	}
}

// A session busy with what emits no event as it ends (a navigation
// summarising the branch it leaves) is handed over when that ends, not
// when the hand-over's context does.
func TestClusterSettleQuietEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, sess, h := settling(t, true)
		p.Push(faux.Response{Text: "done"})
		if err := sess.Prompt(session.UserMessage("hi", nil), session.BehaviorNone); err != nil {
			t.Fatal(err)
		}
		if err := sess.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		var first string
		for _, n := range sess.Tree().Nodes {
			if n.Role == "user" {
				first = n.EntryID
			}
		}
		if first == "" {
			t.Fatal("no user message in the tree")
		}
		const summary = 3005 * time.Millisecond
		p.Push(faux.Response{Text: "a summary", Delay: summary})
		navigated := make(chan error, 1)
		go func() {
			_, err := sess.NavigateTree(t.Context(), first, session.NavigateOptions{Summarize: true})
			navigated <- err
		}()
		synctest.Wait()
		if !sess.Running() {
			t.Fatal("the navigation is not summarising")
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		(&clusterState{}).settle(ctx, h)
		if got := time.Since(start); got != summary {
			t.Errorf("handed over after %v, want %v", got, summary)
		}
		if err := <-navigated; err != nil {
			t.Fatal(err)
		}
	})
}

// A feed's waiters are released once it delivered their seq, never
// before, and a seq already delivered is reached at once.
func TestClusterFeedReached(t *testing.T) {
	fd := &feed{}
	waits := map[uint64]<-chan struct{}{}
	for _, seq := range []uint64{3, 5, 7} {
		waits[seq] = fd.reached(seq)
	}
	steps := []struct {
		advance uint64
		done    []uint64 // the waits released by now
	}{
		{2, nil},
		{5, []uint64{3, 5}},
		{4, []uint64{3, 5}}, // an older seq does not move it back
		{9, []uint64{3, 5, 7}},
	}
	for _, st := range steps {
		fd.advance(st.advance)
		for seq, ch := range waits {
			released := false
			select {
			case <-ch:
				released = true
			default:
			}
			want := false
			for _, d := range st.done {
				want = want || d == seq
			}
			if released != want {
				t.Errorf("after advance(%d): wait for %d released %v, want %v", st.advance, seq, released, want)
			}
		}
	}
	if len(fd.waiters) != 0 {
		t.Errorf("%d waiters kept after all were released", len(fd.waiters))
	}
	if !fd.delivered(9) || fd.delivered(10) {
		t.Errorf("delivered(9) %v, delivered(10) %v; want true, false", fd.delivered(9), fd.delivered(10))
	}
	select {
	case <-fd.reached(8):
	default:
		t.Error("a seq already delivered is not reached at once")
	}
}

// An answer waits for its events to arrive through the feed, no longer
// than feedCatchUp, and less when the feed's follow or the node stops.
func TestClusterFeedCatchUp(t *testing.T) {
	tests := []struct {
		name      string
		advanceAt time.Duration // when the feed delivers the answer's seq; 0: never
		stopAt    time.Duration // when the follow stops; 0: never
		cancelAt  time.Duration // when the node stops; 0: never
		want      time.Duration
		late      bool
	}{
		{"events arrive", 2 * time.Second, 0, 0, 2 * time.Second, false},
		{"follow stops", 0, time.Second, 0, time.Second, false},
		{"node stops", 0, 0, 3 * time.Second, 3 * time.Second, false},
		{"never", 0, 0, 0, feedCatchUp, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fd := &feed{}
				fd.advance(4)
				stopped := make(chan struct{})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.advanceAt > 0 {
					time.AfterFunc(tc.advanceAt, func() { fd.advance(6) })
				}
				if tc.stopAt > 0 {
					time.AfterFunc(tc.stopAt, func() { close(stopped) })
				}
				if tc.cancelAt > 0 {
					time.AfterFunc(tc.cancelAt, cancel)
				}
				start := time.Now()
				late, got := fd.catchUp(ctx, 6, stopped)
				if d := time.Since(start); d != tc.want || late != tc.late {
					t.Errorf("ended after %v, late %v; want %v, %v", d, late, tc.want, tc.late)
				}
				if late && got != 4 {
					t.Errorf("delivered %d when late, want 4", got)
				}
				fd.mu.Lock()
				n := len(fd.waiters)
				fd.mu.Unlock()
				if n != 0 {
					t.Errorf("%d waiters left behind", n)
				}
			})
		})
	}
}

// The owners cache is bounded: full, it is emptied before the next entry.
func TestClusterOwnersBound(t *testing.T) {
	tests := []struct {
		name   string
		before int
		want   int
	}{
		{"empty", 0, 1},
		{"below the bound", ownersMax - 1, ownersMax},
		{"full", ownersMax, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := &clusterState{owners: map[string]ownerSeen{}}
			for i := range tc.before {
				cs.owners["s"+strconv.Itoa(i)] = ownerSeen{node: "b"}
			}
			cs.rememberOwner("new", "c")
			if len(cs.owners) != tc.want || cs.owners["new"].node != "c" {
				t.Errorf("%d entries, new: %+v; want %d with new on c", len(cs.owners), cs.owners["new"], tc.want)
			}
		})
	}
}

// settling is a session of the offline model, which closes with t; with
// clustered, one the cluster hosts.
func settling(t *testing.T, clustered bool) (*faux.Provider, *session.Session, *Hosted) {
	t.Helper()
	p := faux.New(faux.Options{})
	dir := t.TempDir()
	sess, err := session.New(session.Config{Cwd: dir, SessionsDir: dir, Model: faux.Model(), Stream: p.Stream, EventLogSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := &Hosted{sess: sess}
	if clustered {
		h.cl = &hosted{}
	}
	t.Cleanup(func() { _ = sess.Close() })
	return p, sess, h
}
