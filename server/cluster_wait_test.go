package server

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/llm/faux"
	"github.com/agentd-dev/agentd/session"
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

// A session is handed over the moment its run ends, or when the hand-over's
// context does, not at the next poll.
func TestClusterSettle(t *testing.T) {
	tests := []struct {
		name  string
		run   time.Duration // how long the session's run takes; 0: no run
		limit time.Duration // the hand-over's context
		want  time.Duration
	}{
		{"idle", 0, time.Minute, 0},
		{"run ends", 3005 * time.Millisecond, time.Minute, 3005 * time.Millisecond},
		{"context ends first", 3005 * time.Millisecond, 1001 * time.Millisecond, 1001 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := faux.New(faux.Options{})
				dir := t.TempDir()
				sess, err := session.New(session.Config{Cwd: dir, SessionsDir: dir, Model: faux.Model(), Stream: p.Stream, EventLogSize: 64})
				if err != nil {
					t.Fatal(err)
				}
				h := &Hosted{sess: sess, cl: &hosted{}}
				unsub := sess.Subscribe(func(session.Event) { h.cl.onEvent() }) // as Hosted.onEvent does
				defer func() {
					unsub()
					_ = sess.Close()
				}()
				if tc.run > 0 {
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
