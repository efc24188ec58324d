package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// bigRegistry has a read and a write whose answers are {"n":N} padded to
// N bytes, made fresh on every call as a real handler's would be.
func bigRegistry(reads, writes *atomic.Int64) Registry {
	run := func(calls *atomic.Int64) func(context.Context, Command) (json.RawMessage, error) {
		return func(_ context.Context, c Command) (json.RawMessage, error) {
			calls.Add(1)
			var p struct{ N int }
			json.Unmarshal(c.Payload, &p)
			return padded(p.N, calls.Load()), nil
		}
	}
	return Registry{
		"big_read":  {Class: ClassRead, Lane: LaneServer, ReadOnly: true, Run: run(reads)},
		"big_write": {Class: ClassMutate, Lane: LaneServer, Run: run(writes)},
	}
}

// padded is a JSON object of n bytes that says which call made it.
func padded(n int, call int64) json.RawMessage {
	head := fmt.Sprintf(`{"call":%d,"pad":"`, call)
	pad := max(n-len(head)-2, 0)
	return json.RawMessage(head + strings.Repeat("x", pad) + `"}`)
}

func call(r Response) int {
	var d struct{ Call int }
	json.Unmarshal(r.Data, &d)
	return d.Call
}

func sized(typ, id string, n int) Command {
	return Command{Type: typ, ID: id, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// Issue 9: 60 get_messages of a session with two large images made a
// 1.1 GB journal and a 2.2 GiB heap. A read's large answer is not kept: a
// replay reads again, before and after a restart; small answers replay
// as they were.
func TestLargeReadIsReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var reads, writes atomic.Int64
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	p, err := New(Options{Registry: bigRegistry(&reads, &writes), Journal: j, Emit: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	big := sized("big_read", "r1", 1<<20)
	first := p.Do(big)
	if !first.Success || len(first.Data) != 1<<20 || call(first) != 1 {
		t.Fatalf("first answer: %d bytes, call %d", len(first.Data), call(first))
	}
	small := p.Do(sized("big_read", "r2", 100))
	if fi, _ := os.Stat(path); fi.Size() > 4<<10 {
		t.Fatalf("journal holds %d bytes after a 1 MiB read", fi.Size())
	}
	events = events[:0]
	again := p.Do(big)
	if !again.Replayed || !again.Success || len(again.Data) != 1<<20 || call(again) != 3 || again.DataDropped {
		t.Fatalf("replay of the large read: replayed=%v %d bytes call %d", again.Replayed, len(again.Data), call(again))
	}
	var phases []EventType
	for _, e := range events {
		phases = append(phases, e.Type)
	}
	if !slices.Equal(phases, noStart) || !events[1].Replayed {
		t.Fatalf("replay lifecycle %v (spec §7.4: no command_started)", phases)
	}
	if r := p.Do(sized("big_read", "r2", 100)); !r.Replayed || !bytes.Equal(r.Data, small.Data) || reads.Load() != 3 {
		t.Fatalf("small read replay ran again or changed: replayed=%v %d bytes, %d reads", r.Replayed, len(r.Data), reads.Load())
	}
	wantFail(t, p.Do(sized("big_read", "r1", 5)), "Conflicting id 'r1': previously used for 'big_read', now used for 'big_read'")
	p.Close()
	j.Close()

	j, err = OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	p, err = New(Options{Registry: bigRegistry(&reads, &writes), Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if r := p.Do(big); !r.Replayed || len(r.Data) != 1<<20 || call(r) != 4 {
		t.Fatalf("after a restart: replayed=%v %d bytes call %d", r.Replayed, len(r.Data), call(r))
	}
	if r := p.Do(sized("big_read", "r2", 100)); !r.Replayed || !bytes.Equal(r.Data, small.Data) {
		t.Fatalf("small read after a restart: replayed=%v %d bytes", r.Replayed, len(r.Data))
	}
}

// A command that is not read-only never runs twice: when its answer was
// too large to keep, the replay gives its outcome without the data.
func TestLargeWriteReplaysWithoutData(t *testing.T) {
	var reads, writes atomic.Int64
	p, err := New(Options{Registry: bigRegistry(&reads, &writes), KeepDataBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := sized("big_write", "w1", 5000)
	if r := p.Do(c); !r.Success || len(r.Data) != 5000 {
		t.Fatalf("%+v", r)
	}
	r := p.Do(c)
	if !r.Replayed || !r.Success || r.Data != nil || !r.DataDropped || writes.Load() != 1 {
		t.Fatalf("replay: replayed=%v success=%v %d bytes dataDropped=%v, after %d runs", r.Replayed, r.Success, len(r.Data), r.DataDropped, writes.Load())
	}
	if r := p.Do(sized("big_write", "w2", 999)); !r.Success || p.Do(sized("big_write", "w2", 999)).DataDropped {
		t.Fatal("an answer within KeepDataBytes was not kept")
	}
}

// In memory, outcomes are bounded in count (the oldest are forgotten) and
// in data (the oldest lose their data, never their identity).
func TestOutcomeMemoryBounds(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		var reads, writes atomic.Int64
		p, err := New(Options{Registry: bigRegistry(&reads, &writes), MaxOutcomes: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range 15 {
			p.Do(sized("big_write", fmt.Sprint(i), 10))
		}
		for i := 14; i >= 0; i-- { // newest first: a fresh run evicts the oldest
			r := p.Do(sized("big_write", fmt.Sprint(i), 10))
			if forgotten := i < 5; r.Replayed == forgotten {
				t.Fatalf("outcome %d: replayed=%v", i, r.Replayed)
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.out.live != 10 || len(p.out.ids) != 10 {
			t.Fatalf("%d outcomes kept, %d by id", p.out.live, len(p.out.ids))
		}
	})
	t.Run("data", func(t *testing.T) {
		var reads, writes atomic.Int64
		p, err := New(Options{Registry: bigRegistry(&reads, &writes), MaxOutcomeMemory: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range 10 {
			p.Do(sized("big_write", fmt.Sprint("w", i), 3000))
			p.Do(sized("big_read", fmt.Sprint("r", i), 1000))
		}
		p.mu.Lock()
		held, live := p.out.bytes, p.out.live
		p.mu.Unlock()
		if held > 10_000 || live != 20 {
			t.Fatalf("%d bytes held by %d outcomes", held, live)
		}
		old, recent := p.Do(sized("big_write", "w0", 3000)), p.Do(sized("big_write", "w9", 3000))
		if !old.Replayed || !old.DataDropped || !recent.Replayed || len(recent.Data) != 3000 || writes.Load() != 10 {
			t.Fatalf("old: replayed=%v dataDropped=%v; recent: replayed=%v %d bytes; %d writes", old.Replayed, old.DataDropped, recent.Replayed, len(recent.Data), writes.Load())
		}
		if r := p.Do(sized("big_read", "r0", 1000)); !r.Replayed || len(r.Data) != 1000 || reads.Load() != 11 {
			t.Fatalf("an old read whose data was dropped was not read again: replayed=%v %d bytes, %d reads", r.Replayed, len(r.Data), reads.Load())
		}
	})
}

func lines(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(raw, []byte{'\n'})
}

// The journal is compacted while the server runs, and stays within its
// count and size bounds; a bound never costs a command its identity
// before the count bound does.
func TestFileJournalBoundedWhileRunning(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		opt := FileJournalOptions{MaxRecords: 10}
		j, err := OpenFileJournalWith(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		var reads, writes atomic.Int64
		p, err := New(Options{Registry: bigRegistry(&reads, &writes), Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			p.Do(sized("big_write", fmt.Sprint(i), 10))
		}
		if n := lines(t, path); n > 2*(10+1) {
			t.Fatalf("%d lines for at most 11 outcomes", n)
		}
		if info := j.Info(); info.Compactions < 10 || info.Records > 11 {
			t.Fatalf("%+v", info)
		}
		p.Close()
		j.Close()
		j, err = OpenFileJournalWith(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		recs, _ := j.Load()
		if len(recs) != 10 || recs[0].ID != "190" || recs[9].ID != "199" {
			t.Fatalf("%d records, from %s to %s", len(recs), recs[0].ID, recs[len(recs)-1].ID)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		opt := FileJournalOptions{MaxBytes: 64 << 10}
		j, err := OpenFileJournalWith(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		var reads, writes atomic.Int64
		p, err := New(Options{Registry: bigRegistry(&reads, &writes), Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			p.Do(sized("big_write", fmt.Sprint(i), 10_000))
		}
		if fi, _ := os.Stat(path); fi.Size() > 64<<10+8<<10+20<<10 {
			t.Fatalf("journal of %d bytes, bound 64 KiB", fi.Size())
		}
		p.Close()
		j.Close()
		j, err = OpenFileJournalWith(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		p, err = New(Options{Registry: bigRegistry(&reads, &writes), Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		old, recent := p.Do(sized("big_write", "0", 10_000)), p.Do(sized("big_write", "99", 10_000))
		if !old.Replayed || !old.DataDropped || !recent.Replayed || len(recent.Data) != 10_000 || writes.Load() != 100 {
			t.Fatalf("old: replayed=%v dataDropped=%v; recent: replayed=%v %d bytes; %d writes", old.Replayed, old.DataDropped, recent.Replayed, len(recent.Data), writes.Load())
		}
	})
	t.Run("age", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			j, err := OpenFileJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			var reads, writes atomic.Int64
			p, err := New(Options{Registry: bigRegistry(&reads, &writes), Journal: j, OutcomeRetention: time.Hour, IdempotencyTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for i := range 20 {
				p.Do(sized("big_write", fmt.Sprint("old", i), 10))
			}
			time.Sleep(2 * time.Hour)
			p.Do(sized("big_write", "new", 10))
			if n := lines(t, path); n != 2 {
				t.Fatalf("%d lines after the old outcomes expired", n)
			}
		})
	})
}

// A journal written before outcomes were bounded (issue 9: 1.1 GB) is read
// line by line and comes back small, with every command still known.
func TestOpenUnboundedJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var old bytes.Buffer
	exp := time.Now().Add(time.Hour)
	for i, typ := range []string{"big_read", "big_write", "big_read"} {
		id := fmt.Sprint("c", i)
		data := padded(1<<20+1000, 1)
		for _, r := range []Record{
			{Op: OpBegin, Command: typ, ID: id, Fingerprint: Fingerprint(nil, sized(typ, id, 1<<20+1000)), At: time.Now(), Expires: exp},
			{Op: OpFinish, Command: typ, ID: id, Fingerprint: Fingerprint(nil, sized(typ, id, 1<<20+1000)), At: time.Now(), Expires: exp,
				Response: &Response{ID: id, Command: typ, Success: true, Data: data}},
		} {
			b, _ := MarshalRecord(&r)
			old.Write(append(b, '\n'))
		}
	}
	if err := os.WriteFile(path, old.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if fi, _ := os.Stat(path); fi.Size() > 4<<10 {
		t.Fatalf("reopened journal of %d bytes", fi.Size())
	}
	var reads, writes atomic.Int64
	p, err := New(Options{Registry: bigRegistry(&reads, &writes), Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if r := p.Do(sized("big_read", "c0", 1<<20+1000)); !r.Replayed || len(r.Data) != 1<<20+1000 || reads.Load() != 1 {
		t.Fatalf("read: replayed=%v %d bytes, %d reads", r.Replayed, len(r.Data), reads.Load())
	}
	if r := p.Do(sized("big_write", "c1", 1<<20+1000)); !r.Replayed || !r.DataDropped || writes.Load() != 0 {
		t.Fatalf("write: replayed=%v dataDropped=%v %d bytes", r.Replayed, r.DataDropped, len(r.Data))
	}
}

// A dropped read replayed with ifSessionVersion is read at that version or
// not at all; its dependencies are not checked again.
func TestReadAgainChecksVersion(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) {
		o.KeepReadBytes = 4
		reg := Registry{}
		for k, v := range o.Registry {
			reg[k] = v
		}
		r := reg["get_messages"]
		r.ReadOnly = true
		reg["get_messages"] = r
		o.Registry = reg
	})
	h.p.Do(Command{Type: "create_session", SessionID: "s"})
	h.p.Do(Command{Type: "list_sessions", ID: "dep"})
	read := Command{Type: "get_messages", SessionID: "s", ID: "m", IfSessionVersion: ip(0), DependsOn: []string{"dep"}}
	if r := h.p.Do(read); !r.Success || r.Replayed {
		t.Fatalf("%+v", r)
	}
	if r := h.p.Do(read); !r.Success || !r.Replayed || h.count("get_messages") != 2 {
		t.Fatalf("%+v", r)
	}
	h.p.Do(Command{Type: "set_session_name", SessionID: "s"})
	wantFail(t, h.p.Do(read), "Session version mismatch: expected 0, got 1")
}
