package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// journalRegistry is a session's commands as the tests run them: set_name
// answers at once, prompt runs until released or cancelled. runs counts
// handler runs, so a replay that ran a command again shows.
func journalRegistry(runs *atomic.Int32, started chan<- string, release <-chan struct{}) pipeline.Registry {
	return pipeline.Registry{
		"set_name": {Class: pipeline.ClassMutate, Lane: pipeline.LaneSession, Mutating: true,
			Run: func(_ context.Context, cmd pipeline.Command) (json.RawMessage, error) {
				runs.Add(1)
				return json.RawMessage(`{"name":"renamed"}`), nil
			}},
		"prompt": {Class: pipeline.ClassLong, Lane: pipeline.LaneSession,
			Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
				runs.Add(1)
				started <- cmd.ID
				select {
				case <-release:
					return json.RawMessage(`{"done":true}`), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}},
		"get_state": {Class: pipeline.ClassRead, Lane: pipeline.LaneServer, ReadOnly: true,
			Run: func(context.Context, pipeline.Command) (json.RawMessage, error) {
				runs.Add(1)
				return json.RawMessage(`{"state":1}`), nil
			}},
	}
}

func TestJournalTakeoverReplay(t *testing.T) {
	ns := nodes(t, "a", "b", "c")
	a, b, c := ns[0], ns[1], ns[2]
	ctx := ctxT(t)

	var runsA, runsB atomic.Int32
	started := make(chan string, 4)
	release := make(chan struct{})
	var jerrMu sync.Mutex
	var jerrs []error
	pa, err := pipeline.New(pipeline.Options{Registry: journalRegistry(&runsA, started, release), Journal: a.Journal(),
		OnJournalError: func(err error) { jerrMu.Lock(); jerrs = append(jerrs, err); jerrMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	// b's pipeline exists before the takeover, as a running node's does.
	pb, err := pipeline.New(pipeline.Options{Registry: journalRegistry(&runsB, started, release), Journal: b.Journal()})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()

	acquire(ctx, t, a, "s1")
	setName := pipeline.Command{Type: "set_name", ID: "c1", SessionID: "s1", Payload: json.RawMessage(`{"name":"renamed"}`)}
	if r := pa.Do(setName); !r.Success {
		t.Fatalf("set_name on a: %+v", r)
	}
	prompt := pipeline.Command{Type: "prompt", ID: "c2", SessionID: "s1", Payload: json.RawMessage(`{"message":"hi"}`)}
	promptDone := make(chan pipeline.Response, 1)
	pa.Submit(prompt, func(r pipeline.Response) { promptDone <- r })
	if id := <-started; id != "c2" {
		t.Fatalf("started %s", id)
	}

	// a dies mid-run (stops renewing); b takes the session over.
	takeover(ctx, t, a, b, "s1")
	recs, err := b.JournalFor(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]pipeline.Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	if r := byID["c1"]; r.Response == nil || !r.Response.Success || r.Interrupted {
		t.Fatalf("c1 after the takeover: %+v", r)
	}
	if r := byID["c2"]; r.Response == nil || r.Response.Err == nil || r.Response.Err.Code != fault.Interrupted || !r.Interrupted {
		t.Fatalf("c2 after the takeover: %+v, want interrupted", r)
	}
	if n := pb.Adopt(recs); n != 2 {
		t.Fatalf("Adopt filed %d outcomes, want 2", n)
	}

	r := pb.Do(setName)
	if !r.Success || !r.Replayed || string(r.Data) != `{"name":"renamed"}` {
		t.Fatalf("set_name replayed on b: %+v", r)
	}
	r = pb.Do(prompt)
	if r.Err == nil || r.Err.Code != fault.Interrupted || !r.Replayed {
		t.Fatalf("prompt replayed on b: %+v, want interrupted", r)
	}
	if n := runsB.Load(); n != 0 {
		t.Fatalf("b ran %d commands; replays must not run anything", n)
	}

	// The old owner's run ends; its outcome is refused.
	close(release)
	<-promptDone
	jerrMu.Lock()
	got := append([]error(nil), jerrs...)
	jerrMu.Unlock()
	var stale *StaleError
	var notOwner *NotOwnerError
	if len(got) != 1 || !(errors.As(got[0], &stale) || errors.As(got[0], &notOwner)) {
		t.Fatalf("journal errors on the stale owner: %v, want one refusal", got)
	}
	if err := a.Journal().Append(pipeline.Record{Op: pipeline.OpFinish, Command: "set_name", ID: "late", Scope: "session:s1",
		Response: &pipeline.Response{Success: true}, At: time.Now(), Expires: time.Now().Add(time.Hour)}); !errors.As(err, &notOwner) {
		t.Fatalf("a record from a node that lost the session: %v, want NotOwnerError", err)
	}

	// The interrupted command was written back as finished: a later
	// reader sees it recovered, not interrupted again.
	recs, err = c.JournalFor(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("c read %d records, want 2", len(recs))
	}
	for _, r := range recs {
		if r.Interrupted || (r.ID == "c2" && !r.Recovered) {
			t.Fatalf("record on c: %+v", r)
		}
	}
}

// TestJournalNodeRecordsSurviveRestart: a node's server-level commands
// come back from its own subject when it joins again, in-flight ones
// interrupted.
func TestJournalNodeRecordsSurviveRestart(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	a := join(t, srv.ClientURL(), "a")
	var runs atomic.Int32
	p, err := pipeline.New(pipeline.Options{Registry: journalRegistry(&runs, nil, nil), Journal: a.Journal()})
	if err != nil {
		t.Fatal(err)
	}
	get := pipeline.Command{Type: "get_state", ID: "g1"}
	if r := p.Do(get); !r.Success {
		t.Fatalf("get_state: %+v", r)
	}
	p.Close()
	now := time.Now()
	// A command the node had begun when it died.
	if err := a.Journal().Append(pipeline.Record{Op: pipeline.OpBegin, Command: "get_state", ID: "g2", Scope: "server",
		Fingerprint: "x", At: now, Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	a.Close()

	a2 := join(t, srv.ClientURL(), "a")
	recs, err := a2.Journal().Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != "g1" || !recs[0].Response.Success || recs[1].ID != "g2" || !recs[1].Interrupted {
		t.Fatalf("records after the restart: %+v", recs)
	}
	p2, err := pipeline.New(pipeline.Options{Registry: journalRegistry(&runs, nil, nil), Journal: a2.Journal()})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if r := p2.Do(get); !r.Replayed || runs.Load() != 1 {
		t.Fatalf("get_state replayed after the restart: %+v, runs %d", r, runs.Load())
	}
	// Recovered once: the next opening does not report g2 interrupted.
	recs, err = a2.Journal().Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Interrupted || !recs[1].Recovered {
		t.Fatalf("records at the second opening: %+v", recs)
	}
}

func TestJournalOwnership(t *testing.T) {
	a, b, ctx := pair(t)
	now := time.Now()
	rec := func(id, scope string) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpFinish, Command: "set_name", ID: id, Scope: scope, Fingerprint: "f",
			Response: &pipeline.Response{ID: id, Command: "set_name", Success: true}, At: now, Expires: now.Add(time.Hour)}
	}
	// A session nobody owns yet (its create command runs before the lease
	// exists): written.
	if err := a.Journal().Append(rec("c1", "session:new")); err != nil {
		t.Fatal(err)
	}
	// A session another node owns: refused.
	acquire(ctx, t, b, "owned")
	var notOwner *NotOwnerError
	if err := a.Journal().Append(rec("c2", "session:owned")); !errors.As(err, &notOwner) {
		t.Fatalf("a record for b's session from a: %v, want NotOwnerError", err)
	}
	if err := b.Journal().Append(rec("c3", "session:owned")); err != nil {
		t.Fatal(err)
	}
	// A session id no lease can exist for is kept with the node's records.
	if err := a.Journal().Append(rec("c4", "session:../x")); err != nil {
		t.Fatal(err)
	}
	recs, err := a.Journal().Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != "c4" {
		t.Fatalf("a's own records: %+v", recs)
	}
	for id, want := range map[string]string{"new": "c1", "owned": "c3"} {
		recs, err := a.JournalFor(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].ID != want {
			t.Fatalf("JournalFor(%s): %+v, want %s", id, recs, want)
		}
	}

	// An outcome too large for a message keeps its result, not its data.
	big := rec("c5", "session:owned")
	big.Response.Data = json.RawMessage(`"` + strings.Repeat("x", MaxStateMsg) + `"`)
	if err := b.Journal().Append(big); err != nil {
		t.Fatal(err)
	}
	recs, err = a.JournalFor(ctx, "owned")
	if err != nil {
		t.Fatal(err)
	}
	if last := recs[len(recs)-1]; last.ID != "c5" || !last.Response.Success || !last.Response.DataDropped || last.Response.Data != nil {
		t.Fatalf("oversized outcome: %+v", last.Response)
	}
}

// TestJournalStreamFencesStaleOwner: an owner that lost the session
// without noticing is refused by the stream once the new owner has read
// the journal; what it wrote before that is in the new owner's read.
func TestJournalStreamFencesStaleOwner(t *testing.T) {
	a, b, ctx := pair(t)
	acquire(ctx, t, a, "s1")
	now := time.Now()
	rec := func(id string) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpFinish, Command: "set_name", ID: id, Scope: "session:s1", Fingerprint: "f",
			Response: &pipeline.Response{ID: id, Command: "set_name", Success: true}, At: now, Expires: now.Add(time.Hour)}
	}
	ja := a.Journal()
	if err := ja.Append(rec("c1")); err != nil {
		t.Fatal(err)
	}
	forceTakeover(ctx, t, a, b, "s1")
	if err := ja.Append(rec("c2")); err != nil {
		t.Fatalf("a record before the new owner read anything: %v", err)
	}
	recs, err := b.JournalFor(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != "c1" || recs[1].ID != "c2" {
		t.Fatalf("b read %+v, want c1 and c2", recs)
	}
	var stale *StaleError
	if err := ja.Append(rec("c3")); !errors.As(err, &stale) || stale.Owner != "b" {
		t.Fatalf("the stale owner's record after the takeover: %v, want StaleError naming b", err)
	}
	if recs, _ := b.JournalFor(ctx, "s1"); len(recs) != 2 {
		t.Fatalf("b reads %d records after the refusal, want 2", len(recs))
	}
}
