package interaction

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type askResult struct {
	resp Response
	err  error
}

// ask runs Ask on its own goroutine and waits until the request is
// published (or Ask returned), so the caller can look at Pending and answer.
// It must run inside a synctest bubble.
func ask(ctx context.Context, b *Broker, req Request) <-chan askResult {
	ch := make(chan askResult, 1)
	go func() {
		resp, err := b.Ask(ctx, req)
		ch <- askResult{resp, err}
	}()
	synctest.Wait()
	return ch
}

func onlyPending(t *testing.T, b *Broker) Request {
	t.Helper()
	p := b.Pending()
	if len(p) != 1 {
		t.Fatalf("pending = %d requests, want 1", len(p))
	}
	return p[0]
}

var confirmReq = Request{Kind: KindConfirm, Title: "Proceed?"}

func TestAskAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		done := ask(t.Context(), b, Request{Kind: KindSelect, Title: "Pick", Options: []string{"A", "B"}})
		req := onlyPending(t, b)
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(req.ID) {
			t.Errorf("id %q is not 16 hex digits", req.ID)
		}
		if req.CreatedAt.IsZero() || !req.ExpiresAt.IsZero() {
			t.Errorf("createdAt %v expiresAt %v: want created, never expiring", req.CreatedAt, req.ExpiresAt)
		}
		if got, ok := b.Get(req.ID); !ok || got.Title != "Pick" {
			t.Errorf("Get = %+v, %v", got, ok)
		}
		// A stray confirmed alongside the value is dropped by normalizing.
		if err := b.Answer(req.ID, Response{Value: "B", Confirmed: true}); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.resp.Value != "B" || r.resp.Confirmed {
			t.Fatalf("Ask = %+v, %v", r.resp, r.err)
		}
		if len(b.Pending()) != 0 {
			t.Error("request still pending after the answer")
		}
		err := b.Answer(req.ID, Response{Value: "A"})
		var re *ResolvedError
		if !errors.As(err, &re) || re.By != ResolvedAnswered || !errors.Is(err, ErrAlreadyResolved) {
			t.Errorf("second answer: %v, want already answered", err)
		}
	})
}

func TestUniqueIDs(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		id := newID()
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
}

func TestFirstAnswerWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		done := ask(t.Context(), b, confirmReq)
		id := onlyPending(t, b).ID

		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() { errs[i] = b.Answer(id, Response{Confirmed: i == 0}) })
		}
		wg.Wait()
		r := <-done

		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatal("both answers won")
				}
				winner = i
			case !errors.Is(err, ErrAlreadyResolved):
				t.Fatalf("loser got %v, want ErrAlreadyResolved", err)
			}
		}
		if winner < 0 {
			t.Fatal("no answer won")
		}
		if r.err != nil || r.resp.Confirmed != (winner == 0) {
			t.Errorf("Ask = %+v, %v; winner was answerer %d", r.resp, r.err, winner)
		}
	})
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name        string
		def, own    time.Duration
		wantExpires time.Duration // 0: never
	}{
		{"broker default", 30 * time.Second, 0, 30 * time.Second},
		{"own timeout overrides", 30 * time.Second, 5 * time.Second, 5 * time.Second},
		{"own timeout without default", 0, 5 * time.Second, 5 * time.Second},
		{"negative waits forever", 30 * time.Second, -1, 0},
		{"no timeout at all", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBroker(BrokerOptions{Timeout: tt.def})
				req := confirmReq
				req.Timeout = tt.own
				start := time.Now()
				done := ask(t.Context(), b, req)
				p := onlyPending(t, b)
				if tt.wantExpires == 0 {
					if !p.ExpiresAt.IsZero() {
						t.Fatalf("expiresAt = %v, want none", p.ExpiresAt)
					}
					time.Sleep(24 * time.Hour)
					synctest.Wait()
					if len(b.Pending()) != 1 {
						t.Fatal("request without timeout expired")
					}
					if err := b.Answer(p.ID, Response{Confirmed: true}); err != nil {
						t.Fatal(err)
					}
					<-done
					return
				}
				if got := p.ExpiresAt.Sub(p.CreatedAt); got != tt.wantExpires {
					t.Errorf("expiresAt - createdAt = %v, want %v", got, tt.wantExpires)
				}
				r := <-done
				if !errors.Is(r.err, ErrTimeout) {
					t.Fatalf("Ask = %v, want ErrTimeout", r.err)
				}
				if waited := time.Since(start); waited != tt.wantExpires {
					t.Errorf("Ask returned after %v, want %v", waited, tt.wantExpires)
				}
				err := b.Answer(p.ID, Response{Confirmed: true})
				var re *ResolvedError
				if !errors.As(err, &re) || re.By != ResolvedTimeout {
					t.Errorf("late answer: %v, want already timed out", err)
				}
				if err.Error() != "interaction "+p.ID+" already timed out" {
					t.Errorf("late answer says %q", err)
				}
			})
		})
	}
}

func TestContextCancelReleasesAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		done := ask(ctx, b, confirmReq)
		id := onlyPending(t, b).ID
		cancel()
		r := <-done
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Ask = %v, want context.Canceled", r.err)
		}
		var re *ResolvedError
		if err := b.Answer(id, Response{}); !errors.As(err, &re) || re.By != ResolvedCancelled {
			t.Errorf("answer after cancel: %v, want already cancelled", err)
		}
	})
}

func TestAskWithDoneContextPublishesNothing(t *testing.T) {
	var events []Event
	b := NewBroker(BrokerOptions{OnEvent: func(e Event) { events = append(events, e) }})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Ask(ctx, confirmReq); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ask = %v", err)
	}
	if len(events) != 0 || len(b.Pending()) != 0 {
		t.Errorf("events %v, pending %v: want nothing published", events, b.Pending())
	}
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		done := ask(t.Context(), b, confirmReq)
		id := onlyPending(t, b).ID
		if err := b.Cancel(id); err != nil {
			t.Fatal(err)
		}
		if r := <-done; !errors.Is(r.err, ErrCancelled) {
			t.Errorf("Ask = %v, want ErrCancelled", r.err)
		}
		if err := b.Cancel(id); !errors.Is(err, ErrAlreadyResolved) {
			t.Errorf("second cancel: %v", err)
		}
		if err := b.Cancel("0123456789abcdef"); !errors.Is(err, ErrNotFound) {
			t.Errorf("cancel unknown: %v", err)
		}
		if err := b.Answer("0123456789abcdef", Response{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("answer unknown: %v", err)
		}
	})
}

func TestCancelAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		a := ask(t.Context(), b, confirmReq)
		c := ask(t.Context(), b, Request{Kind: KindInput, Title: "Name?"})
		if n := b.CancelAll("aborted"); n != 2 {
			t.Errorf("CancelAll = %d, want 2", n)
		}
		for _, ch := range []<-chan askResult{a, c} {
			r := <-ch
			var ce *CancelledError
			if !errors.As(r.err, &ce) || ce.Reason != "aborted" {
				t.Errorf("Ask = %v, want cancelled: aborted", r.err)
			}
		}
		// An abort ends the run, not the session: the next question works.
		d := ask(t.Context(), b, confirmReq)
		if err := b.Answer(onlyPending(t, b).ID, Response{Confirmed: true}); err != nil {
			t.Fatal(err)
		}
		if r := <-d; r.err != nil || !r.resp.Confirmed {
			t.Errorf("Ask after CancelAll = %+v, %v", r.resp, r.err)
		}
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		a := ask(t.Context(), b, confirmReq)
		b.Close("session closed")
		if r := <-a; !errors.Is(r.err, ErrCancelled) {
			t.Errorf("pending Ask = %v, want ErrCancelled", r.err)
		}
		if _, err := b.Ask(t.Context(), confirmReq); !errors.Is(err, ErrClosed) {
			t.Errorf("Ask after Close = %v, want ErrClosed", err)
		}
	})
}

func TestPendingOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		titles := []string{"first", "second", "third", "fourth"}
		var dones []<-chan askResult
		for _, title := range titles {
			dones = append(dones, ask(t.Context(), b, Request{Kind: KindInput, Title: title}))
			time.Sleep(time.Millisecond) // distinct CreatedAt, not that order depends on it
		}
		order := func() []string {
			var got []string
			for _, r := range b.Pending() {
				got = append(got, r.Title)
			}
			return got
		}
		for range 5 { // map iteration order varies; the result must not
			if got := order(); !equal(got, titles) {
				t.Fatalf("pending = %v, want %v", got, titles)
			}
		}
		if err := b.Answer(b.Pending()[1].ID, Response{Value: "x"}); err != nil {
			t.Fatal(err)
		}
		if got, want := order(), []string{"first", "third", "fourth"}; !equal(got, want) {
			t.Errorf("pending after answering the second = %v, want %v", got, want)
		}
		b.CancelAll("done")
		for _, d := range dones {
			<-d
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInvalidAnswerKeepsRequestPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		done := ask(t.Context(), b, Request{Kind: KindSelect, Title: "Pick", Options: []string{"A", "B"}})
		id := onlyPending(t, b).ID
		var ve *ValidationError
		if err := b.Answer(id, Response{Value: "C"}); !errors.As(err, &ve) || ve.Field != "value" {
			t.Fatalf("answer C: %v, want a validation error on value", err)
		}
		if err := b.Answer(id, Response{Value: "A"}); err != nil {
			t.Fatalf("corrected answer: %v", err)
		}
		if r := <-done; r.resp.Value != "A" {
			t.Errorf("Ask = %+v", r.resp)
		}
	})
}

func TestInvalidRequest(t *testing.T) {
	b := NewBroker(BrokerOptions{})
	var ve *ValidationError
	if _, err := b.Ask(t.Context(), Request{Kind: KindSelect}); !errors.As(err, &ve) || ve.Field != "options" {
		t.Errorf("Ask = %v, want a validation error on options", err)
	}
}

func TestRememberIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{Remember: 2})
		var ids []string
		for range 3 {
			done := ask(t.Context(), b, confirmReq)
			id := onlyPending(t, b).ID
			ids = append(ids, id)
			if err := b.Answer(id, Response{}); err != nil {
				t.Fatal(err)
			}
			<-done
		}
		if err := b.Answer(ids[0], Response{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("oldest id: %v, want ErrNotFound once forgotten", err)
		}
		for _, id := range ids[1:] {
			if err := b.Answer(id, Response{}); !errors.Is(err, ErrAlreadyResolved) {
				t.Errorf("recent id: %v, want ErrAlreadyResolved", err)
			}
		}
	})
}

type eventRec struct {
	typ   EventType
	title string
	by    ResolvedBy
}

func TestObserverOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []eventRec
		b := NewBroker(BrokerOptions{OnEvent: func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			r := eventRec{typ: e.Type, title: e.Request.Title}
			if e.Resolution != nil {
				r.by = e.Resolution.By
			}
			got = append(got, r)
		}})
		ctx, cancel := context.WithCancel(t.Context())
		a := ask(t.Context(), b, Request{Kind: KindConfirm, Title: "A", Timeout: time.Minute})
		bb := ask(t.Context(), b, Request{Kind: KindConfirm, Title: "B"})
		c := ask(ctx, b, Request{Kind: KindConfirm, Title: "C"})
		if err := b.Answer(b.Pending()[1].ID, Response{Confirmed: true}); err != nil {
			t.Fatal(err)
		}
		<-bb
		cancel()
		<-c
		<-a // times out after a minute of fake time
		want := []eventRec{
			{EventRequested, "A", ""},
			{EventRequested, "B", ""},
			{EventRequested, "C", ""},
			{EventResolved, "B", ResolvedAnswered},
			{EventResolved, "C", ResolvedCancelled},
			{EventResolved, "A", ResolvedTimeout},
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("events = %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("event %d = %v, want %v", i, got[i], want[i])
			}
		}
	})
}

// An observer that answers from inside the callback must not deadlock, and
// the resolution still comes after the request.
func TestObserverMayCallBack(t *testing.T) {
	var b *Broker
	var types []EventType
	b = NewBroker(BrokerOptions{OnEvent: func(e Event) {
		types = append(types, e.Type)
		if e.Type == EventRequested {
			if err := b.Answer(e.Request.ID, Response{Confirmed: true}); err != nil {
				t.Error(err)
			}
			if len(b.Pending()) != 0 {
				t.Error("still pending after answering from the observer")
			}
		}
	}})
	resp, err := b.Ask(t.Context(), confirmReq)
	if err != nil || !resp.Confirmed {
		t.Fatalf("Ask = %+v, %v", resp, err)
	}
	if len(types) != 2 || types[0] != EventRequested || types[1] != EventResolved {
		t.Errorf("events = %v", types)
	}
}

// A panicking observer must not wedge delivery for everyone after it.
func TestObserverPanicDoesNotStopDelivery(t *testing.T) {
	calls := 0
	b := NewBroker(BrokerOptions{OnEvent: func(e Event) {
		calls++
		if calls == 1 {
			panic("observer bug")
		}
	}})
	func() {
		defer func() { _ = recover() }()
		b.CancelAll("x")
		_, _ = b.Ask(context.Background(), Request{Kind: KindConfirm, Timeout: time.Nanosecond})
	}()
	before := calls
	_, _ = b.Ask(context.Background(), Request{Kind: KindConfirm, Timeout: time.Nanosecond})
	if calls <= before {
		t.Errorf("no events delivered after the panic (%d calls)", calls)
	}
}

// An Ask returns only once the event of its resolution has reached the
// observer, whichever goroutine delivers it, so what the asker does next
// (a tool running) is never observed before the answer that allowed it.
func TestAskReturnsAfterResolutionIsObserved(t *testing.T) {
	tests := []struct {
		name    string
		resolve func(b *Broker, id string)
	}{
		{"answered", func(b *Broker, id string) { _ = b.Answer(id, Response{Confirmed: true}) }},
		{"cancelled", func(b *Broker, id string) { _ = b.Cancel(id) }},
		{"all cancelled", func(b *Broker, _ string) { b.CancelAll("stop") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				b := NewBroker(BrokerOptions{OnEvent: func(e Event) {
					if e.Type == EventResolved {
						<-release // the observer is slow with this one
					}
				}})
				done := ask(t.Context(), b, confirmReq)
				id := onlyPending(t, b).ID
				go tt.resolve(b, id)
				synctest.Wait()
				select {
				case <-done:
					t.Fatal("Ask returned before its resolution was observed")
				default:
				}
				close(release)
				<-done
			})
		})
	}
}
