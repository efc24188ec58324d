package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/fault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	t        *testing.T
	p        *Pipeline
	mu       sync.Mutex
	events   []Event
	calls    map[string]int // by command type
	started  chan string    // ids of "block"/"slow" runs as they start
	release  chan struct{}  // closing it lets "block" runs return
	lateDone chan struct{}  // "slow" runs close... nothing; signals late completion
}

func newHarness(t *testing.T, j Journal, tweak func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, calls: map[string]int{}, started: make(chan string, 100), release: make(chan struct{}), lateDone: make(chan struct{}, 100)}
	ok := func(ctx context.Context, c Command) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	}
	block := func(ctx context.Context, c Command) (json.RawMessage, error) {
		h.started <- c.ID
		select {
		case <-h.release:
			return json.RawMessage(`"released"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	reg := Registry{
		"list_sessions": {Class: ClassRead, Lane: LaneServer, Run: ok},
		"health_check":  {Class: ClassRead, Lane: LaneServer, Run: ok},
		"fail": {Class: ClassRead, Lane: LaneServer, Run: func(context.Context, Command) (json.RawMessage, error) {
			return nil, fault.Errorf(fault.Failed, "boom")
		}},
		"create_session": {Class: ClassMutate, Lane: LaneServer, Run: func(_ context.Context, c Command) (json.RawMessage, error) {
			h.p.CreateSession(c.SessionID)
			return nil, nil
		}},
		"delete_session": {Class: ClassMutate, Lane: LaneServer, Run: func(_ context.Context, c Command) (json.RawMessage, error) {
			h.p.DeleteSession(c.SessionID)
			return nil, nil
		}},
		"get_messages":     {Class: ClassRead, Lane: LaneSession, Run: ok},
		"get_state":        {Class: ClassControl, Lane: LaneSession, Run: ok},
		"abort":            {Class: ClassControl, Lane: LaneSession, Run: ok},
		"set_session_name": {Class: ClassMutate, Lane: LaneSession, Mutating: true, Run: ok},
		"bad_mutate": {Class: ClassMutate, Lane: LaneSession, Mutating: true, Run: func(context.Context, Command) (json.RawMessage, error) {
			return nil, fault.Errorf(fault.Failed, "nope")
		}},
		"prompt":       {Class: ClassLong, Lane: LaneSession, Mutating: true, Run: block},
		"server_block": {Class: ClassLong, Lane: LaneServer, Run: block},
		// slow ignores cancellation and completes late, after its timeout.
		"slow": {Class: ClassRead, Lane: LaneSession, Mutating: true, Timeout: time.Second, Run: func(ctx context.Context, c Command) (json.RawMessage, error) {
			time.Sleep(5 * time.Second)
			h.lateDone <- struct{}{}
			return json.RawMessage(`"late"`), nil
		}},
	}
	for typ, hd := range reg {
		run := hd.Run
		hd.Run = func(ctx context.Context, c Command) (json.RawMessage, error) {
			h.mu.Lock()
			h.calls[typ]++
			h.mu.Unlock()
			return run(ctx, c)
		}
		reg[typ] = hd
	}
	opts := Options{Registry: reg, Journal: j, Emit: func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	}}
	if tweak != nil {
		tweak(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	t.Cleanup(func() { p.Close() })
	return h
}

func (h *harness) count(typ string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[typ]
}

// phases returns the lifecycle event types seen for command id.
func (h *harness) phases(id string) []EventType {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []EventType
	for _, e := range h.events {
		if e.CommandID == id {
			out = append(out, e.Type)
		}
	}
	return out
}

func (h *harness) nEvents() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

func errMsg(r Response) string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Message
}

func ip(v int) *int { return &v }

func wantFail(t *testing.T, r Response, msg string) {
	t.Helper()
	if r.Success || errMsg(r) != msg {
		t.Fatalf("got success=%v error=%q, want failure %q", r.Success, errMsg(r), msg)
	}
}

var (
	normal  = []EventType{CommandAccepted, CommandStarted, CommandFinished}
	noStart = []EventType{CommandAccepted, CommandFinished}
)

func TestAdmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cmd      Command
		shutdown bool
		err      string
		code     fault.Code
	}{
		{"shutdown", Command{Type: "list_sessions", ID: "a"}, true, "Server is shutting down", fault.ShuttingDown},
		{"missing type", Command{ID: "a"}, false, "Validation failed: type is required", fault.Invalid},
		{"unknown type", Command{Type: "nope", ID: "a"}, false, "Validation failed: type: Unknown command type 'nope'", fault.UnknownCommand},
		{"session command without session", Command{Type: "get_messages", ID: "a"}, false, "Validation failed: sessionId is required for get_messages", fault.Invalid},
		{"ifSessionVersion without session", Command{Type: "list_sessions", ID: "a", IfSessionVersion: ip(0)}, false, "Validation failed: ifSessionVersion requires sessionId", fault.Invalid},
		{"empty dependency", Command{Type: "list_sessions", ID: "a", DependsOn: []string{""}}, false, "Validation failed: dependsOn entries must be non-empty", fault.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, nil)
			if tc.shutdown {
				if err := h.p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			r := h.p.Do(tc.cmd)
			wantFail(t, r, tc.err)
			if r.Err.Code != tc.code || r.ID != "a" || r.Command != tc.cmd.Type {
				t.Fatalf("response %+v", r)
			}
			if n := h.nEvents(); n != 0 {
				t.Fatalf("non-admitted command emitted %d events", n)
			}
			// A rejected command leaves no trace: the id is still free.
			if !tc.shutdown && tc.cmd.Type != "list_sessions" {
				if r := h.p.Do(Command{Type: "list_sessions", ID: "a"}); !r.Success || r.Replayed {
					t.Fatalf("id reused after rejection: %+v", r)
				}
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t, nil, nil)
	r := h.p.Do(Command{Type: "list_sessions", ID: "ok"})
	if !r.Success || string(r.Data) != `{"ok":true}` || r.ID != "ok" || r.Command != "list_sessions" {
		t.Fatalf("response %+v", r)
	}
	r = h.p.Do(Command{Type: "fail", ID: "bad"})
	wantFail(t, r, "boom")
	if r.Err.Code != fault.Failed {
		t.Fatalf("code %v", r.Err.Code)
	}
	for _, id := range []string{"ok", "bad"} {
		if got := h.phases(id); !slices.Equal(got, normal) {
			t.Fatalf("%s: phases %v", id, got)
		}
	}
	h.mu.Lock()
	last := h.events[len(h.events)-1]
	h.mu.Unlock()
	if last.Success || last.Err.Message != "boom" || last.Lane != "server" {
		t.Fatalf("finished event %+v", last)
	}
}

// A command its face announced already has its accepted and started
// events marked Announced, and nothing else: its finished event, and
// every event of a command not announced, are unmarked. Announced is not
// part of the request, so the same command sent again unannounced
// replays.
func TestAnnounced(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.p.Do(Command{Type: "list_sessions", ID: "told", Announced: true})
	h.p.Do(Command{Type: "list_sessions", Announced: true})
	h.p.Do(Command{Type: "list_sessions", ID: "plain"})
	if r := h.p.Do(Command{Type: "list_sessions", ID: "told"}); !r.Replayed {
		t.Errorf("the announced command sent again unannounced: %+v, want a replay", r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var got []string
	for _, e := range h.events {
		id := e.CommandID
		if strings.HasPrefix(id, "anon:") {
			id = "anon"
		}
		if e.Announced {
			got = append(got, id+" "+string(e.Type))
		}
	}
	want := []string{"told command_accepted", "told command_started", "anon command_accepted", "anon command_started"}
	if !slices.Equal(got, want) {
		t.Errorf("events marked announced: %q, want %q", got, want)
	}
}

// A read whose Keep is RunAgain leaves nothing of its answer behind, in
// memory or in the journal, and the same command sent again runs again.
func TestRunAgain(t *testing.T) {
	j := NewMemJournal()
	runs := 0
	h := newHarness(t, j, func(o *Options) {
		o.Registry["secret_read"] = Handler{Class: ClassRead, Lane: LaneServer, ReadOnly: true, Keep: RunAgain,
			Run: func(context.Context, Command) (json.RawMessage, error) {
				runs++
				return json.RawMessage(fmt.Sprintf(`{"cause":"token s3cret","run":%d}`, runs)), nil
			}}
	})
	first := h.p.Do(Command{Type: "secret_read", ID: "r1"})
	again := h.p.Do(Command{Type: "secret_read", ID: "r1"})
	if string(first.Data) != `{"cause":"token s3cret","run":1}` || string(again.Data) != `{"cause":"token s3cret","run":2}` {
		t.Errorf("answers %s then %s; want run 1, then run 2", first.Data, again.Data)
	}
	recs, err := j.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Response != nil && strings.Contains(string(r.Response.Data), "s3cret") {
			t.Errorf("the journal kept the answer: %+v", r.Response)
		}
	}
}

func TestLaneOrder(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.p.Do(Command{Type: "create_session", SessionID: "s"})
	var mu sync.Mutex
	var order []string
	done := make(chan struct{}, 50)
	for i := range 50 {
		id := fmt.Sprint(i)
		h.p.Submit(Command{Type: "set_session_name", SessionID: "s", ID: id}, func(r Response) {
			mu.Lock()
			order = append(order, r.ID)
			mu.Unlock()
			done <- struct{}{}
		})
	}
	for range 50 {
		<-done
	}
	for i, id := range order {
		if id != fmt.Sprint(i) {
			t.Fatalf("lane order %v", order)
		}
	}
	if v, _ := h.p.SessionVersion("s"); v != 50 {
		t.Fatalf("version %d", v)
	}
}

// TestControlNotBehindPrompt runs in a synctest bubble: its 20ms wait for
// a read that must not run is the bubble's clock, which moves only when
// every goroutine is blocked, so a late-scheduled read cannot slip past it.
func TestControlNotBehindPrompt(t *testing.T) { synctest.Test(t, testControlNotBehindPrompt) }

func testControlNotBehindPrompt(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.p.Do(Command{Type: "create_session", SessionID: "s"})
	prompt := make(chan Response, 1)
	h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "p"}, func(r Response) { prompt <- r })
	<-h.started
	for _, typ := range []string{"abort", "get_state"} {
		if r := h.p.Do(Command{Type: typ, SessionID: "s"}); !r.Success {
			t.Fatalf("%s: %+v", typ, r)
		}
	}
	// A queued read is behind the prompt.
	read := make(chan Response, 1)
	h.p.Submit(Command{Type: "get_messages", SessionID: "s"}, func(r Response) { read <- r })
	select {
	case <-read:
		t.Fatal("get_messages ran while the prompt held the lane")
	case <-time.After(20 * time.Millisecond):
	}
	close(h.release)
	<-prompt
	<-read
}

func TestReplay(t *testing.T) {
	first := Command{Type: "list_sessions", ID: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"x":1,"y":[1,2]}`)}
	for _, tc := range []struct {
		name     string
		setup    []Command
		cmd      Command
		err      string // "" means replayed success
		wantID   string
		executes bool // the command runs again instead of replaying
	}{
		{name: "same id same payload", setup: []Command{first}, cmd: Command{Type: "list_sessions", ID: "a", Payload: json.RawMessage(`{ "y":[1,2], "x":1 }`)}, wantID: "a"},
		{name: "same id different payload", setup: []Command{first}, cmd: Command{Type: "list_sessions", ID: "a", Payload: json.RawMessage(`{"x":2}`)}, err: "Conflicting id 'a': previously used for 'list_sessions', now used for 'list_sessions'", wantID: "a"},
		{name: "same id different type", setup: []Command{{Type: "list_sessions", ID: "dup-id"}}, cmd: Command{Type: "health_check", ID: "dup-id"}, err: "Conflicting id 'dup-id': previously used for 'list_sessions', now used for 'health_check'", wantID: "dup-id"},
		{name: "same key same payload new id", setup: []Command{first}, cmd: Command{Type: "list_sessions", ID: "b", IdempotencyKey: "k", Payload: first.Payload}, wantID: "b"},
		{name: "same key different payload", setup: []Command{first}, cmd: Command{Type: "health_check", ID: "c", IdempotencyKey: "k"}, err: "Conflicting idempotencyKey 'k': previously used for 'list_sessions', now used for 'health_check'", wantID: "c"},
		{name: "replay without id does not leak id", setup: []Command{first}, cmd: Command{Type: "list_sessions", IdempotencyKey: "k", Payload: first.Payload}, wantID: ""},
		{name: "key scoped per session", setup: []Command{{Type: "create_session", SessionID: "s1"}, {Type: "create_session", SessionID: "s2"}, {Type: "get_messages", SessionID: "s1", IdempotencyKey: "k"}}, cmd: Command{Type: "get_messages", SessionID: "s2", IdempotencyKey: "k"}, executes: true},
		{name: "server scope separate from session scope", setup: []Command{{Type: "create_session", SessionID: "s1"}, {Type: "get_messages", SessionID: "s1", IdempotencyKey: "k"}}, cmd: Command{Type: "list_sessions", IdempotencyKey: "k"}, executes: true},
		{name: "failed outcome replays as failure", setup: []Command{{Type: "fail", ID: "f"}}, cmd: Command{Type: "fail", ID: "f"}, err: "boom", wantID: "f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, nil)
			for _, c := range tc.setup {
				h.p.Do(c)
			}
			before := h.count(tc.cmd.Type)
			n := h.nEvents()
			r := h.p.Do(tc.cmd)
			if r.ID != tc.wantID {
				t.Fatalf("id %q, want %q", r.ID, tc.wantID)
			}
			ran := h.count(tc.cmd.Type) - before
			h.mu.Lock()
			evs := h.events[n:]
			h.mu.Unlock()
			types := []EventType{}
			for _, e := range evs {
				types = append(types, e.Type)
			}
			switch {
			case tc.executes:
				if ran != 1 || r.Replayed || !r.Success || !slices.Equal(types, normal) {
					t.Fatalf("want a fresh execution: ran=%d %+v %v", ran, r, types)
				}
			case tc.err != "" && r.Err.Code == fault.Conflict:
				wantFail(t, r, tc.err)
				if ran != 0 || r.Replayed || !slices.Equal(types, noStart) {
					t.Fatalf("conflict: ran=%d %+v %v", ran, r, types)
				}
			default:
				if tc.err != "" {
					wantFail(t, r, tc.err)
				} else if !r.Success {
					t.Fatalf("replay failed: %+v", r)
				}
				if ran != 0 || !r.Replayed || !slices.Equal(types, noStart) || !evs[1].Replayed {
					t.Fatalf("want replay: ran=%d %+v %v", ran, r, types)
				}
			}
		})
	}
}

func TestReplayWhileInFlight(t *testing.T) {
	h := newHarness(t, nil, nil)
	first := make(chan Response, 1)
	h.p.Submit(Command{Type: "server_block", ID: "x"}, func(r Response) { first <- r })
	<-h.started
	dup := make(chan Response, 1)
	h.p.Submit(Command{Type: "server_block", ID: "x"}, func(r Response) { dup <- r })
	if r := h.p.Do(Command{Type: "server_block", ID: "x", Payload: json.RawMessage(`1`)}); errMsg(r) != "Conflicting id 'x': previously used for 'server_block', now used for 'server_block'" {
		t.Fatalf("%+v", r)
	}
	close(h.release)
	r1, r2 := <-first, <-dup
	if !r1.Success || r1.Replayed || !r2.Success || !r2.Replayed || string(r2.Data) != `"released"` || h.count("server_block") != 1 {
		t.Fatalf("%+v %+v", r1, r2)
	}
}

func TestIdempotencyTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		c := Command{Type: "list_sessions", IdempotencyKey: "ttl"}
		h.p.Do(c)
		time.Sleep(DefaultIdempotencyTTL - time.Second)
		if r := h.p.Do(c); !r.Replayed {
			t.Fatalf("inside TTL: %+v", r)
		}
		time.Sleep(2 * time.Second)
		if r := h.p.Do(c); r.Replayed || !r.Success || h.count("list_sessions") != 2 {
			t.Fatalf("after TTL: %+v", r)
		}
		h.p.Close()
	})
}

func TestDependsOn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup []Command
		cmd   Command
		err   string
	}{
		{"unknown", nil, Command{Type: "list_sessions", ID: "c", DependsOn: []string{"missing-command"}}, "Dependency 'missing-command' is unknown"},
		{"failed", []Command{{Type: "fail", ID: "d"}}, Command{Type: "list_sessions", ID: "c", DependsOn: []string{"d"}}, "Dependency 'd' failed: boom"},
		{"succeeded", []Command{{Type: "list_sessions", ID: "d"}}, Command{Type: "list_sessions", ID: "c", DependsOn: []string{"d"}}, ""},
		{"one of two failed", []Command{{Type: "list_sessions", ID: "d1"}, {Type: "fail", ID: "d2"}}, Command{Type: "list_sessions", ID: "c", DependsOn: []string{"d1", "d2"}}, "Dependency 'd2' failed: boom"},
		{"self", nil, Command{Type: "list_sessions", ID: "c", DependsOn: []string{"c"}}, "Command 'c' cannot depend on itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, nil)
			for _, c := range tc.setup {
				h.p.Do(c)
			}
			r := h.p.Do(tc.cmd)
			if tc.err == "" {
				if !r.Success || !slices.Equal(h.phases("c"), normal) {
					t.Fatalf("%+v", r)
				}
				return
			}
			wantFail(t, r, tc.err)
			if r.Err.Code != fault.Dependency || !slices.Equal(h.phases("c"), noStart) {
				t.Fatalf("%+v %v", r, h.phases("c"))
			}
		})
	}
}

func TestDependsOnWaitsAcrossLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "dep"}, nil)
		<-h.started
		got := make(chan Response, 1)
		h.p.Submit(Command{Type: "list_sessions", ID: "c", DependsOn: []string{"dep"}}, func(r Response) { got <- r })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("dependent ran before its dependency finished")
		}
		close(h.release)
		if r := <-got; !r.Success {
			t.Fatalf("%+v", r)
		}
		h.p.Close()
	})
}

func TestDependsOnWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "dep"}, nil)
		<-h.started
		start := time.Now()
		r := h.p.Do(Command{Type: "list_sessions", ID: "c", DependsOn: []string{"dep"}})
		wantFail(t, r, "Command 'dependsOn:dep' timed out after 30000ms")
		if d := time.Since(start); d != DefaultDependencyTimeout {
			t.Fatalf("waited %v", d)
		}
		h.p.Close()
	})
}

func TestDependsOnSameLaneInversion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		// The lane is busy, so A (depends on B) is queued, then B behind it.
		h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "busy"}, nil)
		<-h.started
		a := make(chan Response, 1)
		b := make(chan Response, 1)
		h.p.Submit(Command{Type: "get_messages", SessionID: "s", ID: "dep-invert-a", DependsOn: []string{"dep-invert-b"}}, func(r Response) { a <- r })
		h.p.Submit(Command{Type: "get_messages", SessionID: "s", ID: "dep-invert-b"}, func(r Response) { b <- r })
		start := time.Now()
		close(h.release)
		ra, rb := <-a, <-b
		wantFail(t, ra, "Dependency 'dep-invert-b' is queued in the same lane and cannot be awaited from this command")
		if !rb.Success || time.Since(start) != 0 {
			t.Fatalf("b %+v after %v", rb, time.Since(start))
		}
		h.p.Close()
	})
}

func TestSessionVersion(t *testing.T) {
	h := newHarness(t, nil, nil)
	ver := func(r Response) int {
		t.Helper()
		if r.SessionVersion == nil {
			t.Fatalf("no sessionVersion in %+v", r)
		}
		return *r.SessionVersion
	}
	steps := []struct {
		cmd  Command
		err  string
		want int // -1: no version in the response
	}{
		{Command{Type: "create_session", SessionID: "s"}, "", 0},
		{Command{Type: "get_messages", SessionID: "s"}, "", 0},
		{Command{Type: "get_state", SessionID: "s"}, "", 0},
		{Command{Type: "set_session_name", SessionID: "s"}, "", 1},
		{Command{Type: "bad_mutate", SessionID: "s"}, "nope", 1},
		{Command{Type: "set_session_name", SessionID: "s", IfSessionVersion: ip(1)}, "", 2},
		{Command{Type: "set_session_name", SessionID: "s", IfSessionVersion: ip(1)}, "Session version mismatch: expected 1, got 2", 2},
		{Command{Type: "set_session_name", SessionID: "nope", IfSessionVersion: ip(0)}, "Session nope not found", -1},
		{Command{Type: "delete_session", SessionID: "s"}, "", -1},
		{Command{Type: "set_session_name", SessionID: "s", IfSessionVersion: ip(2)}, "Session s not found", -1},
	}
	for i, st := range steps {
		r := h.p.Do(st.cmd)
		if st.err != "" {
			wantFail(t, r, st.err)
		} else if !r.Success {
			t.Fatalf("step %d: %+v", i, r)
		}
		if st.want < 0 || !r.Success {
			// Deleted sessions have no version; failures carry none.
			if r.SessionVersion != nil {
				t.Fatalf("step %d: version %d on %+v", i, *r.SessionVersion, r)
			}
			continue
		}
		if v := ver(r); v != st.want {
			t.Fatalf("step %d: version %d, want %d", i, v, st.want)
		}
	}
	if _, ok := h.p.SessionVersion("s"); ok {
		t.Fatal("version survives delete")
	}
}

func TestTimeoutIsTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		start := time.Now()
		r := h.p.Do(Command{Type: "slow", SessionID: "s", ID: "t"})
		wantFail(t, r, "Command 'slow' timed out after 1000ms")
		if !r.TimedOut || r.Err.Code != fault.Timeout || time.Since(start) != time.Second {
			t.Fatalf("%+v after %v", r, time.Since(start))
		}
		// The lane moves on while the handler is still running.
		if r := h.p.Do(Command{Type: "get_messages", SessionID: "s"}); !r.Success {
			t.Fatalf("%+v", r)
		}
		<-h.lateDone // the late completion happens...
		synctest.Wait()
		r2 := h.p.Do(Command{Type: "slow", SessionID: "s", ID: "t"})
		if !r2.TimedOut || !r2.Replayed || errMsg(r2) != errMsg(r) || h.count("slow") != 1 {
			t.Fatalf("replay %+v", r2) // ...and does not overwrite the stored timeout
		}
		if v, _ := h.p.SessionVersion("s"); v != 0 {
			t.Fatalf("timed-out mutation bumped version to %d", v)
		}
		h.mu.Lock()
		var fin []Event
		for _, e := range h.events {
			if e.CommandID == "t" && e.Type == CommandFinished {
				fin = append(fin, e)
			}
		}
		h.mu.Unlock()
		if len(fin) != 2 || !fin[0].TimedOut || fin[0].Replayed || !fin[1].Replayed {
			t.Fatalf("finished events %+v", fin)
		}
		h.p.Close()
	})
}

func TestShutdownDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		got := make(chan Response, 2)
		h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "p"}, func(r Response) { got <- r })
		h.p.Submit(Command{Type: "get_messages", SessionID: "s", ID: "q"}, func(r Response) { got <- r })
		<-h.started
		done := make(chan error, 1)
		go func() { done <- h.p.Shutdown(context.Background()) }()
		synctest.Wait()
		wantFail(t, h.p.Do(Command{Type: "list_sessions", ID: "late"}), "Server is shutting down")
		if len(done) != 0 {
			t.Fatal("shutdown returned with commands in flight")
		}
		close(h.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if r1, r2 := <-got, <-got; !r1.Success || !r2.Success {
			t.Fatalf("%+v %+v", r1, r2)
		}
		if ph := h.phases("late"); len(ph) != 0 {
			t.Fatalf("rejected command has events %v", ph)
		}
	})
}

func TestShutdownDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, nil)
		h.p.Do(Command{Type: "create_session", SessionID: "s"})
		got := make(chan Response, 2)
		h.p.Submit(Command{Type: "prompt", SessionID: "s", ID: "p"}, func(r Response) { got <- r })
		h.p.Submit(Command{Type: "get_messages", SessionID: "s", ID: "q"}, func(r Response) { got <- r })
		<-h.started
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown: %v", err)
		}
		r1, r2 := <-got, <-got
		wantFail(t, r1, msgShuttingDown)
		wantFail(t, r2, msgShuttingDown)
		if !slices.Equal(h.phases("q"), noStart) || !slices.Equal(h.phases("p"), normal) {
			t.Fatalf("phases p=%v q=%v", h.phases("p"), h.phases("q"))
		}
	})
}

// A shutdown with no time to drain, of a pipeline that has nothing in
// flight (a server stopped because its port was taken), reports no cut
// drain: nothing was cancelled. Repeated, because select chose at random
// between the finished drain and the expired context.
func TestShutdownWithNothingInFlightIsNotCutShort(t *testing.T) {
	for i := 0; i < 50; i++ {
		h := newHarness(t, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.p.Shutdown(ctx); err != nil {
			t.Fatalf("run %d: shutdown of an idle pipeline: %v", i, err)
		}
	}
}

// TestCrashReplay simulates a crash by copying the journal file while one
// command is finished and another is still running, then restarting on the
// copy.
func TestCrashReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, j, nil)
	done := h.p.Do(Command{Type: "list_sessions", ID: "done", Payload: json.RawMessage(`{"a":1}`)})
	h.p.Do(Command{Type: "health_check", IdempotencyKey: "key"})
	h.p.Do(Command{Type: "list_sessions"}) // anonymous: not journaled
	h.p.Submit(Command{Type: "server_block", ID: "running"}, nil)
	<-h.started

	image, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.jsonl")
	if err := os.WriteFile(crashed, image, 0o600); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	h.p.Close()
	j.Close()

	for restart := range 2 { // the second restart reads the compacted file
		j2, err := OpenFileJournal(crashed)
		if err != nil {
			t.Fatal(err)
		}
		h2 := newHarness(t, j2, nil)
		r := h2.p.Do(Command{Type: "list_sessions", ID: "done", Payload: json.RawMessage(`{"a":1}`)})
		if !r.Success || !r.Replayed || string(r.Data) != string(done.Data) || h2.count("list_sessions") != 0 {
			t.Fatalf("restart %d: done: %+v", restart, r)
		}
		wantFail(t, h2.p.Do(Command{Type: "list_sessions", ID: "done"}), "Conflicting id 'done': previously used for 'list_sessions', now used for 'list_sessions'")
		r = h2.p.Do(Command{Type: "server_block", ID: "running"})
		wantFail(t, r, "Command interrupted by server restart")
		if !r.Replayed || r.Err.Code != fault.Interrupted || h2.count("server_block") != 0 {
			t.Fatalf("restart %d: running: %+v", restart, r)
		}
		r = h2.p.Do(Command{Type: "health_check", IdempotencyKey: "key"})
		if !r.Replayed || r.ID != "" || h2.count("health_check") != 0 {
			t.Fatalf("restart %d: key: %+v", restart, r)
		}
		wantFail(t, h2.p.Do(Command{Type: "list_sessions", ID: "x", DependsOn: []string{"running"}}), "Dependency 'running' failed: Command interrupted by server restart")
		h2.p.Close()
		j2.Close()
	}
}

func TestFileJournalCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	resp := &Response{Command: "c", Success: true}
	for _, r := range []Record{
		{Op: OpBegin, Command: "c", ID: "old", Expires: now.Add(-time.Second)},
		{Op: OpFinish, Command: "c", ID: "old", Response: resp, Expires: now.Add(-time.Second)},
		{Op: OpBegin, Command: "c", ID: "live", Expires: now.Add(time.Hour)},
		{Op: OpFinish, Command: "c", ID: "live", Response: resp, Expires: now.Add(time.Hour)},
		{Op: OpBegin, Command: "c", ID: "cut", Expires: now.Add(time.Hour)},
	} {
		if err := j.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"op":"fin`) // torn last line
	f.Close()

	j, err = OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	recs, _ := j.Load()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"live", "cut"}) || recs[1].Response.Err.Code != fault.Interrupted {
		t.Fatalf("loaded %+v", recs)
	}
	raw, _ := os.ReadFile(path)
	if n := len(slices.DeleteFunc(splitLines(raw), func(s string) bool { return s == "" })); n != 2 {
		t.Fatalf("compacted file has %d lines:\n%s", n, raw)
	}
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return append(out, string(b[start:]))
}

func TestMemJournalRestart(t *testing.T) {
	j := NewMemJournal()
	h := newHarness(t, j, nil)
	h.p.Do(Command{Type: "list_sessions", ID: "a"})
	h.p.Close()
	h2 := newHarness(t, j, nil)
	if r := h2.p.Do(Command{Type: "list_sessions", ID: "a"}); !r.Replayed || h2.count("list_sessions") != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestHandlerPanic(t *testing.T) {
	p, err := New(Options{Registry: Registry{"p": {Run: func(context.Context, Command) (json.RawMessage, error) { panic("x") }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wantFail(t, p.Do(Command{Type: "p"}), "handler panic: x")
}

func BenchmarkSubmit(b *testing.B) {
	for _, bc := range []struct {
		name string
		id   bool
		file bool
	}{{"anonymous", false, false}, {"with-id-memjournal", true, false}, {"with-id-filejournal-fsync", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var j Journal
			if bc.file {
				fj, err := OpenFileJournal(filepath.Join(b.TempDir(), "j.jsonl"))
				if err != nil {
					b.Fatal(err)
				}
				defer fj.Close()
				j = fj
			}
			p, err := New(Options{Registry: Registry{"noop": {Class: ClassRead, Lane: LaneServer,
				Run: func(context.Context, Command) (json.RawMessage, error) { return nil, nil }}},
				Journal: j, Emit: func(Event) {}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ch := make(chan Response, 1)
			respond := func(r Response) { ch <- r }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c := Command{Type: "noop", Payload: json.RawMessage(`{"a":1}`)}
				if bc.id {
					c.ID = fmt.Sprint(i)
					i++
				}
				p.Submit(c, respond)
				<-ch
			}
		})
	}
}

func TestMemJournalBounded(t *testing.T) {
	j := NewMemJournal()
	exp := time.Now().Add(time.Hour)
	for i := range 5000 {
		j.Append(Record{Op: OpBegin, Command: "c", ID: fmt.Sprint(i % 10), Expires: exp})
		j.Append(Record{Op: OpFinish, Command: "c", ID: fmt.Sprint(i % 10), Response: &Response{Success: true}, Expires: exp})
	}
	j.mu.Lock()
	n := len(j.recs)
	j.mu.Unlock()
	if n > 2000 {
		t.Fatalf("%d records kept for 10 commands", n)
	}
	if recs, _ := j.Load(); len(recs) != 10 {
		t.Fatalf("loaded %d", len(recs))
	}
}

// Concurrent appends share fsyncs (group commit) and every one of them is
// in the file when Append returns.
func TestFileJournalGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%d", i)
			ok := Response{ID: id, Command: "get_state", Success: true}
			for _, r := range []Record{
				{Op: OpBegin, Command: "get_state", ID: id, Fingerprint: "f", At: time.Now(), Expires: exp},
				{Op: OpFinish, Command: "get_state", ID: id, Fingerprint: "f", Response: &ok, At: time.Now(), Expires: exp},
			} {
				if err := j.Append(r); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(Record{Op: OpBegin, ID: "late"}); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	j2, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	recs, _ := j2.Load()
	got := map[string]bool{}
	for _, r := range recs {
		if r.Response != nil && r.Response.Success {
			got[r.ID] = true
		}
	}
	if len(got) != n {
		t.Fatalf("%d of %d outcomes survived", len(got), n)
	}
}

// A handler's error that is not a fault.Error is the operator's to read:
// the client gets "Internal error" (also on replay), the log the cause.
func TestPlainErrorIsInternal(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	h := newHarness(t, nil, func(o *Options) {
		o.Registry["oops"] = Handler{Class: ClassRead, Lane: LaneServer, Run: func(context.Context, Command) (json.RawMessage, error) {
			return nil, errors.New("open /var/lib/agentd/secret: permission denied")
		}}
		o.Log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	})
	for _, id := range []string{"o1", "o1"} { // the second is a replay
		r := h.p.Do(Command{Type: "oops", ID: id})
		wantFail(t, r, "Internal error")
		if r.Err.Code != fault.Internal {
			t.Fatalf("code %v", r.Err.Code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "permission denied"); n != 1 || !strings.Contains(logged.String(), "command=oops") {
		t.Fatalf("the cause is logged %d times:\n%s", n, logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
