package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// evRange is events from..to with data e<seq>.
func evRange(from, to uint64) []Event {
	var out []Event
	for s := from; s <= to; s++ {
		out = append(out, Event{Seq: s, Data: []byte("e" + strconv.FormatUint(s, 10))})
	}
	return out
}

// keysFrom is eventKeys of events after..to with data e<seq> at epoch.
func keysFrom(after, to, epoch uint64) []string {
	var w []string
	for s := after + 1; s <= to; s++ {
		w = append(w, fmt.Sprintf("%d e%d %d", s, s, epoch))
	}
	return w
}

// positions is the stream positions of evs, one per message.
func positions(evs []Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		if len(out) == 0 || out[len(out)-1] != e.StreamSeq {
			out = append(out, e.StreamSeq)
		}
	}
	return out
}

// A session's stream mixing single-event messages (as stored before
// batches, and still sent for one event) and batches reads the same way
// through every reader: Replay by direct gets and by a consumer, Follow,
// LastSeq and LastEvent, from any cursor, inside a batch too, each event
// once and in seq order.
func TestBatchMixedWithSingleEvents(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	acquire(ctx, t, a, "other")
	for _, step := range [][2]uint64{{1, 1}, {2, 2}, {3, 3}, {4, 10}, {11, 11}, {12, 20}, {21, 21}} {
		if step[0] == step[1] {
			if _, err := a.Publish(ctx, "s1", step[0], []byte("e"+strconv.FormatUint(step[0], 10))); err != nil {
				t.Fatal(err)
			}
		} else if through, err := a.PublishEvents(ctx, "s1", evRange(step[0], step[1])); err != nil || through != step[1] {
			t.Fatalf("PublishEvents %v: through %d, %v", step, through, err)
		}
		// Another session's events interleave in the stream.
		if _, err := a.PublishEvents(ctx, "other", evRange(step[0], step[1])); err != nil {
			t.Fatal(err)
		}
	}
	const n = 21
	all, err := b.Replay(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(positions(all)); got != 7 {
		t.Fatalf("the session's events take %d messages, want 7 (two batches): %v", got, positions(all))
	}
	for _, tc := range []struct {
		name            string
		batch, requests int
	}{{"direct gets", directBatch, 0}, {"direct gets of one", 1, 0}, {"consumer", directBatch, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			b.st.directBatch, b.st.directRequests = tc.batch, tc.requests
			defer func() { b.st.directBatch, b.st.directRequests = directBatch, 0 }()
			for after := uint64(0); after <= n+1; after++ {
				evs, err := b.Replay(ctx, "s1", after)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := eventKeys(evs), keysFrom(after, n, la.Epoch()); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("Replay after %d:\n got %v\nwant %v", after, got, want)
				}
			}
		})
	}
	if last, err := b.LastSeq(ctx, "s1"); err != nil || last != n {
		t.Fatalf("LastSeq: %d, %v; want %d", last, err, n)
	}

	// Follows from before, at the start of, inside and at the end of a
	// batch, then a live batch and a live single event.
	afters := []uint64{0, 3, 4, 7, 10, 15, 20, 21}
	cols := make([]*collector, len(afters))
	for i, after := range afters {
		cols[i] = newCollector()
		f, err := b.Follow(ctx, "s1", after, cols[i].deliver)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
	}
	if _, err := a.PublishEvents(ctx, "s1", evRange(22, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishEvents(ctx, "s1", evRange(31, 31)); err != nil {
		t.Fatal(err)
	}
	for i, after := range afters {
		if got, want := cols[i].waitFor(t, 31), seqRange(after+1, 31); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("follow after %d: %v, want %v", after, got, want)
		}
	}
	if _, err := a.PublishEvents(ctx, "s1", evRange(32, 35)); err != nil {
		t.Fatal(err)
	}
	ev, ok, err := b.LastEvent(ctx, "s1")
	if err != nil || !ok || ev.Seq != 35 || string(ev.Data) != "e35" || ev.Node != "a" || ev.Epoch != la.Epoch() {
		t.Fatalf("LastEvent of a batch: %+v %v, %v; want seq 35, e35", ev, ok, err)
	}
}

// Follow marks every event of a stream message but its last More (a
// subscriber's frame of the last one goes out at once and takes the
// others along), also when it resumes inside a batch.
func TestFollowMarksMore(t *testing.T) {
	a, b, ctx := pair(t)
	acquire(ctx, t, a, "s1")
	tests := []struct {
		after uint64
		ends  []uint64
	}{{0, []uint64{5, 6, 9}}, {2, []uint64{5, 6, 9}}, {5, []uint64{6, 9}}, {7, []uint64{9}}}
	cols := make([]*collector, len(tests))
	for i, tc := range tests {
		cols[i] = newCollector()
		f, err := b.Follow(ctx, "s1", tc.after, cols[i].deliver)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
	}
	for _, r := range [][2]uint64{{1, 5}, {6, 6}, {7, 9}} {
		if _, err := a.PublishEvents(ctx, "s1", evRange(r[0], r[1])); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range tests {
		if got, want := cols[i].waitFor(t, 9), seqRange(tc.after+1, 9); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("follow after %d: %v, want %v", tc.after, got, want)
		}
		cols[i].mu.Lock()
		ends := slices.Clone(cols[i].ends)
		cols[i].mu.Unlock()
		if fmt.Sprint(ends) != fmt.Sprint(tc.ends) {
			t.Errorf("follow after %d: delivered without More %v, want %v", tc.after, ends, tc.ends)
		}
	}
}

// A flush larger than a message goes as several, each under the byte and
// count bounds; an event larger than the byte bound goes alone.
func TestBatchSplitAtTheBound(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	acquire(ctx, t, a, "big")
	acquire(ctx, t, a, "many")
	const size = 300 << 10
	var big []Event
	for s := uint64(1); s <= 5; s++ {
		big = append(big, Event{Seq: s, Data: bytes.Repeat([]byte{byte('a' + s)}, size)})
	}
	if a.batchBytes() >= 4*size || a.batchBytes() < 3*size+3*2*10 {
		t.Fatalf("batch bound %d: the test wants room for 3 events of %d and not 4", a.batchBytes(), size)
	}
	if through, err := a.PublishEvents(ctx, "big", big); err != nil || through != 5 {
		t.Fatalf("PublishEvents: through %d, %v", through, err)
	}
	evs, err := a.Replay(ctx, "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 5 || evs[0].StreamSeq != evs[2].StreamSeq || evs[3].StreamSeq != evs[4].StreamSeq || evs[2].StreamSeq == evs[3].StreamSeq {
		t.Fatalf("%d events at positions %v, want 1-3 in one message and 4-5 in the next", len(evs), positions(evs))
	}
	for i, e := range evs {
		if !bytes.Equal(e.Data, big[i].Data) {
			t.Fatalf("event %d: %d bytes back, not what was published", e.Seq, len(e.Data))
		}
	}

	const count = 2*maxBatchEvents + 100
	if through, err := a.PublishEvents(ctx, "many", evRange(1, count)); err != nil || through != count {
		t.Fatalf("PublishEvents: through %d, %v", through, err)
	}
	evs, err = a.Replay(ctx, "many", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := eventKeys(evs), keysFrom(0, count, a.Lease("many").Epoch()); !slices.Equal(got, want) {
		t.Fatalf("%d events back, want %d in order", len(got), len(want))
	}
	if got := len(positions(evs)); got != 3 {
		t.Fatalf("%d events in %d messages, want 3", count, got)
	}
}

func TestBatchLen(t *testing.T) {
	ev := func(n int) Event { return Event{Data: make([]byte, n)} }
	const per = 2 * 10 // two uvarints at their longest
	tests := []struct {
		name  string
		evs   []Event
		limit int
		want  int
	}{
		{"one", []Event{ev(5)}, 100, 1},
		{"all fit", []Event{ev(10), ev(10), ev(10)}, 3 * (10 + per), 3},
		{"split", []Event{ev(10), ev(10), ev(10)}, 3*(10+per) - 1, 2},
		{"a first event over the bound goes alone", []Event{ev(500), ev(1)}, 100, 1},
		{"count", make([]Event, maxBatchEvents+5), 1 << 30, maxBatchEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := batchLen(tc.evs, tc.limit); got != tc.want {
				t.Fatalf("batchLen: %d, want %d", got, tc.want)
			}
		})
	}
}

// The fence refuses a stale owner's batch as it does a single event, and a
// new owner's batch skips the seqs an old owner used before it noticed.
func TestBatchStaleOwner(t *testing.T) {
	ctx := ctxT(t)
	t.Run("new owner published first", func(t *testing.T) {
		ns := nodes(t, "a", "b")
		a, b := ns[0], ns[1]
		la := acquire(ctx, t, a, "s1")
		if _, err := a.PublishEvents(ctx, "s1", evRange(1, 3)); err != nil {
			t.Fatal(err)
		}
		lb := forceTakeover(ctx, t, a, b, "s1")
		if _, err := b.PublishEvents(ctx, "s1", evRange(4, 6)); err != nil {
			t.Fatal(err)
		}
		var stale *StaleError
		if through, err := a.PublishEvents(ctx, "s1", evRange(4, 8)); !errors.As(err, &stale) || stale.Owner != "b" || through != 0 {
			t.Fatalf("stale owner's PublishEvents: through %d, %v; want StaleError naming b", through, err)
		}
		if !errors.As(la.Err(), &stale) {
			t.Fatalf("stale lease still live: %v", la.Err())
		}
		var notOwner *NotOwnerError
		if _, err := a.PublishEvents(ctx, "s1", evRange(9, 9)); !errors.As(err, &notOwner) {
			t.Fatalf("PublishEvents after the lease ended: %v, want NotOwnerError", err)
		}
		evs, err := b.Replay(ctx, "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := append(keysFrom(0, 3, la.Epoch()), keysFrom(3, 6, lb.Epoch())...)
		if got := eventKeys(evs); !slices.Equal(got, want) {
			t.Fatalf("events: %v, want %v", got, want)
		}
	})
	t.Run("old owner published first", func(t *testing.T) {
		ns := nodes(t, "a", "b")
		a, b := ns[0], ns[1]
		la := acquire(ctx, t, a, "s1")
		lb := forceTakeover(ctx, t, a, b, "s1")
		// a writes before b's first event: nothing newer refuses it.
		if _, err := a.PublishEvents(ctx, "s1", evRange(1, 5)); err != nil {
			t.Fatal(err)
		}
		if through, err := b.PublishEvents(ctx, "s1", evRange(1, 8)); err != nil || through != 8 {
			t.Fatalf("new owner's PublishEvents over the old owner's seqs: through %d, %v", through, err)
		}
		var stale *StaleError
		if _, err := a.PublishEvents(ctx, "s1", evRange(6, 7)); !errors.As(err, &stale) {
			t.Fatalf("stale owner's PublishEvents after the new owner's: %v, want StaleError", err)
		}
		evs, err := a.Replay(ctx, "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := append(keysFrom(0, 5, la.Epoch()), keysFrom(5, 8, lb.Epoch())...)
		if got := eventKeys(evs); !slices.Equal(got, want) {
			t.Fatalf("events: %v, want %v", got, want)
		}
	})
}

// A batch stored whose acknowledgement was lost (played by rewinding what
// the owner knows of the stream) is neither refused nor stored twice when
// the next flush carries it again, the same or grown.
func TestBatchRetryAfterLostAck(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	la := acquire(ctx, t, a, "s1")
	if _, err := a.PublishEvents(ctx, "s1", evRange(1, 3)); err != nil {
		t.Fatal(err)
	}
	before := la.evLast
	if _, err := a.PublishEvents(ctx, "s1", evRange(4, 6)); err != nil {
		t.Fatal(err)
	}
	la.evLast = before
	if through, err := a.PublishEvents(ctx, "s1", evRange(4, 6)); err != nil || through != 6 {
		t.Fatalf("the same batch again: through %d, %v", through, err)
	}
	la.evLast = before
	if through, err := a.PublishEvents(ctx, "s1", evRange(4, 9)); err != nil || through != 9 {
		t.Fatalf("the batch grown: through %d, %v", through, err)
	}
	evs, err := a.Replay(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := eventKeys(evs), keysFrom(0, 9, la.Epoch()); !slices.Equal(got, want) {
		t.Fatalf("events: %v, want %v", got, want)
	}
}

// parseEvents reads what the stream holds, which a stale or damaged
// writer may have put there: it never panics, and what it accepts is
// ascending and ends at the header's seq.
func FuzzParseEvents(f *testing.F) {
	f.Add("3", "9", encodeBatch([]Event{{Seq: 7, Data: []byte("a")}, {Seq: 8}, {Seq: 9, Data: []byte("{}")}}))
	f.Add("", "1", []byte(`{"type":"x"}`))
	f.Add("2", "5", []byte{5, 1, 'x', 5, 0})
	f.Add("1", "1", []byte{1, 200, 1})
	f.Fuzz(func(t *testing.T, count, seq string, data []byte) {
		h := nats.Header{}
		h.Set(hdrSeq, seq)
		if count != "" {
			h.Set(hdrBatch, count)
		}
		evs, err := parseEvents("agentd.ev.s", h, 1, data)
		if err != nil {
			if !strings.Contains(err.Error(), "cluster:") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		head, _ := strconv.ParseUint(seq, 10, 64)
		if len(evs) == 0 || evs[len(evs)-1].Seq != head {
			t.Fatalf("%d events, the last not at seq %d", len(evs), head)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq <= evs[i-1].Seq {
				t.Fatalf("seqs not ascending: %d after %d", evs[i].Seq, evs[i-1].Seq)
			}
		}
	})
}
