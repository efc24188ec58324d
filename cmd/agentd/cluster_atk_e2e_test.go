package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/server"
)

// A client resuming an event stream names where it resumes from
// (Last-Event-ID or ?after=): it may name any seq, 0 included. The owner
// replays from its event log, which holds --event-log-size events, and
// tells a client whose cursor is older to reload (resync). A node serving
// the stream of a conversation another node runs replays from the
// cluster's event stream, which keeps every event for as long as the
// operator says (by default for ever): it must refuse the same cursors
// the owner does, or one request with Last-Event-ID: 0 makes it read and
// hold the conversation's whole history, and every stream another copy.
func TestClusterSSEOldCursorAsTheOwner(t *testing.T) {
	t.Parallel()
	const logSize = 8
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e, "--event-log-size", fmt.Sprint(logSize))
	id := clSessionOn("B", "A", "B", "C")
	rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{})
	// Grow the conversation well past what the logs and the bound on the
	// stream's replay (two logs: one more for a takeover's jump) reach.
	st := rsOpen(t, nodes["B"], rsConvPath(id)+"/events")
	st.waitType(0, "connected")
	for i := 0; ; i++ {
		from := st.mark()
		rsOK(t, nodes["B"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": fmt.Sprintf("message %d", i)})
		_, ev := st.waitFor(from, "an event of the message", func(e rsEvent) bool { return e.id != "" && e.typ() != "ping" })
		if seq, _, _ := clEventID(ev.id); seq > 6*logSize {
			break
		}
	}

	for _, via := range []string{"B", "C"} {
		t.Run("via "+via, func(t *testing.T) {
			st := rsOpen(t, nodes[via], rsConvPath(id)+"/events", "Last-Event-ID", "0")
			_, conn := st.waitType(0, "connected")
			ping, _ := st.waitType(0, "ping")
			resync := false
			for _, ev := range st.snapshot()[:ping] {
				resync = resync || ev.typ() == "resync"
			}
			if !resync {
				t.Errorf("no resync before the first ping of a stream resumed at 0, the conversation at seq %d: %s", conn.num("seq"), st.dump(0))
			}
			// Whatever was replayed came before the next live event.
			from := st.mark()
			rsOK(t, nodes["B"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": "one more"})
			st.waitFor(from, "a live event", func(e rsEvent) bool { return e.id != "" && e.typ() != "ping" })
			n := 0
			for _, ev := range st.snapshot() {
				if seq, _, ok := clEventID(ev.id); ok && ev.typ() != "ping" && ev.typ() != "resync" && ev.typ() != "connected" && seq < conn.num("seq") {
					n++
				}
			}
			if n > 0 {
				t.Errorf("%d events replayed from before the stream opened, the cursor 0 beyond the event log's %d: %s", n, logSize, st.dump(0))
			}
		})
	}
}

// A message larger than NATS's max_payload (1 MB by default) is an event
// no single stream message can carry. A client may send one (a request
// body may be --max-frame-bytes, 10 MB), a model too (a tool result with
// a large image): the conversation's later events must still reach the
// streams other nodes serve. The owner's publisher retried the event for
// ever, each attempt waiting out its publish timeout, and every later
// event waited behind it: watchers on other nodes saw nothing more, and
// a node taking the conversation over found none of them in the stream.
// Now the owner leaves that one event out of the stream (its clients of
// other nodes read it with the conversation).
func TestClusterSSEEventBeyondMaxPayload(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e)
	id := clSessionOn("B", "A", "B", "C")
	rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{})
	t.Cleanup(func() {
		if t.Failed() {
			n := 0
			for _, l := range strings.Split(nodes["B"].stderr.String(), "\n") {
				if strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
					if n++; n <= 8 {
						t.Log("node B: " + e2eClip(l, 300))
					}
				}
			}
			t.Logf("node B: %d warnings", n)
		}
	})
	st := rsOpen(t, nodes["C"], rsConvPath(id)+"/events")
	st.waitType(0, "connected")
	rsOK(t, nodes["B"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": strings.Repeat("x", 2<<20)})
	from := st.mark()
	rsOK(t, nodes["B"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": "after the big one"})
	st.waitFor(from, "the message after the big one on node C", func(e rsEvent) bool { return strings.Contains(e.raw, "after the big one") })
}

// An attachment's stream served on another node is not one of its
// streams on the owner, so the owner counts the attachment idle while
// its client streams: the owner's table of attachments (10000, the ones
// idle the longest evicted first, those with streams never) drops it
// first when a client floods the table with streams opened and closed on
// any conversation of the owner. The victim's next request naming its
// attachment (a step) then finds none, its stream still open. A stream
// served by the owner itself is safe from the flood, and now so is one
// served elsewhere: the owner evicts those last.
func TestClusterSSEAttachmentSurvivesAFlood(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e)
	victim := clSessionOn("B", "A", "B", "C")
	flood := ""
	for i := 0; flood == ""; i++ {
		if o := fmt.Sprintf("s-flood-%d", i); server.PlaceSession(o, clABC) == "B" {
			flood = o
		}
	}
	rsOK(t, nodes["B"], "PUT", rsConvPath(victim), map[string]any{})
	rsOK(t, nodes["B"], "PUT", rsConvPath(flood), map[string]any{})
	st := rsOpen(t, nodes["C"], rsConvPath(victim)+"/events")
	_, conn := st.waitType(0, "connected")
	sid := conn.str("session_id")

	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000/8+10; i++ {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+nodes["B"].loopback()+rsConvPath(flood)+"/events", nil)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	// A request on the owner naming the attachment: a stream of it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+nodes["B"].loopback()+rsConvPath(victim)+"/events?session_id="+sid, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the owner dropped attachment %s, its stream still open on node C: %d", sid, resp.StatusCode)
	}
}
