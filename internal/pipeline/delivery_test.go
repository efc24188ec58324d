package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// A face calls Submit from its reader goroutine, maybe holding something
// its callbacks wait for (issue 10: a replayed create_session wedged its
// connection). Every answer and every lifecycle event must come from a
// goroutine of the pipeline's, so a callback may wait for the submitting
// goroutine to move on. Inline, each case below deadlocks, which synctest
// reports.
func TestAnswersNeverInline(t *testing.T) {
	first := Command{Type: "list_sessions", ID: "a", IdempotencyKey: "k"}
	for _, tc := range []struct {
		name     string
		setup    []Command
		cmd      Command
		shutdown bool
		events   bool // the command is admitted
	}{
		{name: "validation rejection", cmd: Command{Type: "nope", ID: "x"}},
		{name: "shutdown rejection", cmd: Command{Type: "list_sessions", ID: "x"}, shutdown: true},
		{name: "conflicting id", setup: []Command{first}, cmd: Command{Type: "health_check", ID: "a"}, events: true},
		{name: "conflicting key", setup: []Command{first}, cmd: Command{Type: "health_check", ID: "b", IdempotencyKey: "k"}, events: true},
		{name: "replay by id", setup: []Command{first}, cmd: first, events: true},
		{name: "replay by key", setup: []Command{first}, cmd: Command{Type: "list_sessions", IdempotencyKey: "k"}, events: true},
		{name: "executed", cmd: Command{Type: "list_sessions", ID: "fresh"}, events: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				submitted := make(chan struct{})
				var mu sync.Mutex
				var log []string
				note := func(s string) {
					mu.Lock()
					log = append(log, s)
					mu.Unlock()
				}
				var armed atomic.Bool // past the setup
				sender := new(int)    // the Sender and Origin of the commands under test
				h := newHarness(t, nil, func(o *Options) {
					emit := o.Emit
					o.Emit = func(e Event) {
						if armed.Load() && e.Origin == sender && e.Command == tc.cmd.Type {
							<-submitted // the submitting goroutine must have moved on
							note(string(e.Type))
						}
						emit(e)
					}
				})
				for _, c := range tc.setup {
					h.p.Do(c)
				}
				if tc.shutdown {
					h.p.Shutdown(context.Background())
				}
				armed.Store(true)
				got := make(chan Response, 2)
				tc.cmd.Origin, tc.cmd.Sender = sender, sender
				h.p.Submit(tc.cmd, func(r Response) {
					<-submitted
					note("respond")
					got <- r
				})
				// Another command from the same goroutine, as a reader
				// goroutine would send it; answered at once, so after the
				// first.
				h.p.Submit(Command{Type: "unknown", Origin: sender, Sender: sender}, func(r Response) { got <- r })
				close(submitted)
				r1, r2 := <-got, <-got
				if tc.name == "executed" && r1.Command == "unknown" {
					r1, r2 = r2, r1 // it ran in its lane: no order to keep
				}
				if r1.Command != tc.cmd.Type || r2.Command != "unknown" {
					t.Fatalf("answers out of order: %+v then %+v", r1, r2)
				}
				want := []string{"respond"}
				switch {
				case !tc.events:
				case tc.name == "executed":
					want = []string{"command_accepted", "command_started", "command_finished", "respond"}
				default:
					want = []string{"command_accepted", "command_finished", "respond"}
				}
				if !slices.Equal(log, want) {
					t.Fatalf("callbacks %v, want %v", log, want)
				}
				h.p.Close()
			})
		})
	}
}

// The immediate answers of commands sent back to back by one sender come
// in the order sent (here: commands without a Sender, each with an Origin
// of its own), and every command's lifecycle comes in phase order before
// its answer, while lanes run commands concurrently.
func TestDeliveryOrder(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.p.Do(Command{Type: "create_session", SessionID: "s"})
	h.p.Do(Command{Type: "list_sessions", ID: "seen"})
	var mu sync.Mutex
	seq := map[string][]string{} // per command: its events and its answer
	var immediate []string       // answers of the immediate commands, in order
	record := func(id, what string) {
		mu.Lock()
		seq[id] = append(seq[id], what)
		mu.Unlock()
	}
	p, err := New(Options{Registry: h.p.reg, Journal: h.p.journal, Emit: func(e Event) { record(e.CommandID, string(e.Type)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.CreateSession("s")
	var wg sync.WaitGroup
	const n = 300
	kinds := map[string]string{}
	for i := range n {
		var c Command
		id := fmt.Sprint("c", i)
		switch i % 4 {
		case 0:
			c = Command{Type: "nope", ID: id}
			kinds[id] = "rejected"
		case 1:
			c = Command{Type: "health_check", ID: "seen"} // conflict; answers carry id "seen"
			id = fmt.Sprint("seen#", i)
			kinds[id] = "conflict"
		case 2:
			c = Command{Type: "set_session_name", SessionID: "s", ID: id}
			kinds[id] = "executed"
		case 3:
			c = Command{Type: "abort", SessionID: "s", ID: id}
			kinds[id] = "executed"
		}
		c.Origin = new(int)
		kind := kinds[id]
		wg.Add(1)
		p.Submit(c, func(r Response) {
			defer wg.Done()
			if kind != "executed" {
				mu.Lock()
				immediate = append(immediate, id)
				mu.Unlock()
			}
			if r.ID != "seen" {
				record(r.ID, "respond")
			}
		})
	}
	wg.Wait()
	var want []string
	for i := range n {
		id := fmt.Sprint("c", i)
		switch i % 4 {
		case 0:
			want = append(want, id)
		case 1:
			want = append(want, fmt.Sprint("seen#", i))
		}
	}
	if !slices.Equal(immediate, want) {
		t.Fatalf("immediate answers out of submission order:\n%v\nwant\n%v", immediate, want)
	}
	full := []string{"command_accepted", "command_started", "command_finished", "respond"}
	for i := range n {
		id := fmt.Sprint("c", i)
		switch kinds[id] {
		case "executed":
			if !slices.Equal(seq[id], full) {
				t.Fatalf("%s: %v", id, seq[id])
			}
		case "rejected":
			if !slices.Equal(seq[id], []string{"respond"}) {
				t.Fatalf("%s: %v", id, seq[id])
			}
		}
	}
}

// A sender whose callback blocks holds up its own answers only, and keeps
// their order whatever Origin each command carries (a face may give every
// command an Origin of its own).
func TestSlowSenderDoesNotBlockOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "list_sessions", ID: "a"})
		slow, fast := new(int), new(int)
		hold := make(chan struct{})
		slowGot := make(chan Response, 2)
		h.p.Submit(Command{Type: "list_sessions", ID: "a", Sender: slow, Origin: new(int)}, func(r Response) { <-hold; slowGot <- r })
		h.p.Submit(Command{Type: "nope", Sender: slow, Origin: new(int)}, func(r Response) { slowGot <- r })
		for _, c := range []Command{{Type: "list_sessions", ID: "a", Sender: fast}, {Type: "nope", Sender: fast}, {Type: "list_sessions", Sender: fast}} {
			if r := doFrom(h.p, c); r.Command != c.Type {
				t.Fatalf("%+v", r)
			}
		}
		synctest.Wait()
		if len(slowGot) != 0 {
			t.Fatal("the slow sender's second answer overtook its first")
		}
		close(hold)
		if r := <-slowGot; !r.Replayed {
			t.Fatalf("%+v", r)
		}
		<-slowGot
		h.p.Close()
	})
}

func doFrom(p *Pipeline, c Command) Response {
	ch := make(chan Response, 1)
	p.Submit(c, func(r Response) { ch <- r })
	return <-ch
}

// Commands arriving after Shutdown returned (a face's readers still run)
// are refused off the caller's goroutine; Close waits for those answers.
func TestSubmitAfterShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		if err := h.p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		answered := make(chan Response, 1)
		h.p.Submit(Command{Type: "list_sessions", ID: "late"}, func(r Response) { <-release; answered <- r })
		closed := make(chan struct{})
		go func() {
			h.p.Close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned before a pending answer was delivered")
		default:
		}
		close(release)
		<-closed
		wantFail(t, <-answered, msgShuttingDown)
	})
}

// A duplicate of a command in flight gets the first one's answer when it
// finishes, after the first one's command_finished.
func TestDuplicateInFlightOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testDuplicateInFlightOrder(t) })
}

func testDuplicateInFlightOrder(t *testing.T) {
	h := newHarness(t, nil, nil)
	var mu sync.Mutex
	var log []string
	p, err := New(Options{Registry: h.p.reg, Emit: func(e Event) {
		mu.Lock()
		log = append(log, fmt.Sprint(e.Type, e.Replayed))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h.p = p
	first := make(chan Response, 1)
	p.Submit(Command{Type: "server_block", ID: "x"}, func(r Response) { first <- r })
	<-h.started
	dup := make(chan Response, 1)
	p.Submit(Command{Type: "server_block", ID: "x"}, func(r Response) { dup <- r })
	synctest.Wait()
	close(h.release)
	if r := <-dup; !r.Replayed || string(r.Data) != `"released"` {
		t.Fatalf("%+v", r)
	}
	<-first
	mu.Lock()
	defer mu.Unlock()
	want := []string{"command_acceptedfalse", "command_startedfalse", "command_acceptedfalse", "command_finishedfalse", "command_finishedtrue"}
	if !slices.Equal(log, want) {
		t.Fatalf("events %v, want %v", log, want)
	}
}
