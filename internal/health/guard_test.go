package health

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// guardDecoder is a one-message wire: Open fails with openErr, or the
// message is text in one chunk.
type guardDecoder struct {
	openErr error
	text    string
	sent    bool
}

func (d *guardDecoder) Open(context.Context) error { return d.openErr }

func (d *guardDecoder) Next(b *llm.Builder) error {
	if d.sent {
		return io.EOF
	}
	d.sent = true
	b.Chunk()
	i := b.TextStart()
	b.TextDelta(i, d.text)
	b.Finish(llm.StopStop)
	return nil
}

func (d *guardDecoder) Close() error { return nil }

// guarded is a provider behind bs.Guard whose streams fail on Open with
// the error fail returns (nil: they answer "ok"); calls counts the
// requests that reached it.
type guarded struct {
	calls atomic.Int32
	fail  atomic.Pointer[llm.Error]
	g     StreamFunc
}

func newGuarded(bs *Breakers) *guarded {
	p := &guarded{}
	p.g = bs.Guard(func(ctx context.Context, m *llm.Model, _ *llm.Context, _ *llm.StreamOptions) *llm.Stream {
		p.calls.Add(1)
		d := &guardDecoder{text: "ok"}
		if e := p.fail.Load(); e != nil {
			d.openErr = e
		}
		return llm.NewStream(ctx, m, d, 0)
	})
	return p
}

func (p *guarded) stream(provider string) *llm.Stream {
	m := &llm.Model{ID: "m1", Provider: provider, API: "test-api"}
	return p.g(context.Background(), m, &llm.Context{}, &llm.StreamOptions{})
}

// run streams one request to the end.
func (p *guarded) run(provider string) (*llm.Message, error) {
	return llm.Collect(p.stream(provider))
}

var serverFailure = &llm.Error{Kind: llm.ErrServer, Status: 503, Message: "upstream unavailable"}

func TestGuardOpensOnProviderFailures(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 3, Cooldown: time.Minute}, Options{})
	p := newGuarded(bs)
	p.fail.Store(serverFailure)
	b := bs.Provider("acme")
	for i := range 3 {
		if b.State() != StateClosed {
			t.Fatalf("breaker %s after %d failures", b.State(), i)
		}
		_, err := p.run("acme")
		if e, ok := llm.AsError(err); !ok || e.Kind != llm.ErrServer {
			t.Fatalf("stream %d ended with %v, want the provider's failure", i, err)
		}
	}
	if b.State() != StateOpen {
		t.Fatalf("breaker %s after 3 provider failures, want open", b.State())
	}
	if n := p.calls.Load(); n != 3 {
		t.Fatalf("provider called %d times, want 3", n)
	}

	// Refused: the provider is not called; the stream ends at once with
	// the breaker's error.
	msg, err := p.run("acme")
	if n := p.calls.Load(); n != 3 {
		t.Errorf("the open breaker let a request through to the provider (%d calls)", n)
	}
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "circuit breaker open") {
		t.Fatalf("refused stream ended with %v, want circuit breaker open", err)
	}
	if !errors.Is(err, ErrOpen) {
		t.Errorf("refused stream's error %v does not match ErrOpen", err)
	}
	if msg.StopReason != llm.StopError || !strings.Contains(msg.ErrorMessage, ProviderOpenText) {
		t.Errorf("refused message: stop %s, error %q", msg.StopReason, msg.ErrorMessage)
	}
	if b.Rejected() != 1 {
		t.Errorf("Rejected = %d, want 1", b.Rejected())
	}
	// The refusal itself is not reported: the breaker is still open with
	// the same counts.
	if st := b.Status(); st.State != StateOpen {
		t.Errorf("status after refusal: %+v", st)
	}

	// Other providers have breakers of their own.
	p.fail.Store(nil)
	if _, err := p.run("other"); err != nil {
		t.Errorf("another provider: %v", err)
	}
	if n := p.calls.Load(); n != 4 {
		t.Errorf("provider calls = %d, want 4", n)
	}
}

func TestGuardReportsSuccess(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 3, Cooldown: time.Minute}, Options{})
	p := newGuarded(bs)
	b := bs.Provider("acme")

	msg, err := p.run("acme")
	if err != nil || msg.TextContent() != "ok" {
		t.Fatalf("stream: %v, %q", err, msg.TextContent())
	}
	if st := b.Status(); st.Requests != 1 || st.Failures != 0 || st.ConsecutiveFailures != 0 {
		t.Errorf("status after a success: %+v", st)
	}

	// A success between failures restarts the consecutive count.
	p.fail.Store(serverFailure)
	p.run("acme")
	p.run("acme")
	p.fail.Store(nil)
	p.run("acme")
	p.fail.Store(serverFailure)
	p.run("acme")
	p.run("acme")
	if st := b.Status(); st.State != StateClosed || st.ConsecutiveFailures != 2 || st.Failures != 4 {
		t.Errorf("status: %+v, want closed with 2 consecutive of 4 failures", st)
	}

	// A client-side error is the provider answering: not a failure.
	p.fail.Store(&llm.Error{Kind: llm.ErrBadRequest, Status: 400, Message: "bad request"})
	p.run("acme")
	if st := b.Status(); st.ConsecutiveFailures != 0 {
		t.Errorf("a 400 counted as a failure: %+v", st)
	}
}

// A stream its consumer closes before the end was aborted by the caller:
// it counts neither as a failure nor as a success.
func TestGuardEarlyCloseIsNotAFailure(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 2, Cooldown: time.Minute}, Options{})
	p := newGuarded(bs)
	b := bs.Provider("acme")

	p.fail.Store(serverFailure)
	p.run("acme") // one failure
	p.fail.Store(nil)
	for range 3 {
		s := p.stream("acme")
		if !s.Next() {
			t.Fatal("no first event")
		}
		s.Close()
		if e := s.Err(); e != nil {
			t.Errorf("Err after Close = %v", e)
		}
	}
	// Closed without ever reading.
	p.stream("acme").Close()
	// Cancelled by the caller's context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := &llm.Model{ID: "m1", Provider: "acme", API: "test-api"}
	if _, err := llm.Collect(p.g(ctx, m, &llm.Context{}, &llm.StreamOptions{})); err == nil {
		t.Error("a stream with a cancelled context succeeded")
	}

	if st := b.Status(); st.State != StateClosed || st.Failures != 1 || st.ConsecutiveFailures != 1 {
		t.Fatalf("after one failure and five aborted streams: %+v, want closed with 1 failure", st)
	}
	// Neither did they reset the count: one more failure opens it.
	p.fail.Store(serverFailure)
	p.run("acme")
	if b.State() != StateOpen {
		t.Errorf("breaker %s after the second consecutive failure, want open", b.State())
	}
}

// After the cooldown one probe goes through; the breaker learns its
// outcome when its stream ends, and refuses others meanwhile.
func TestGuardHalfOpenProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bs := NewBreakers(Options{FailureThreshold: 1, Cooldown: 10 * time.Second, HalfOpenProbes: 1}, Options{})
		p := newGuarded(bs)
		b := bs.Provider("acme")
		p.fail.Store(serverFailure)
		p.run("acme")
		if b.State() != StateOpen {
			t.Fatalf("breaker %s, want open", b.State())
		}
		time.Sleep(10*time.Second + time.Millisecond)
		if b.State() != StateHalfOpen {
			t.Fatalf("breaker %s after the cooldown, want half_open", b.State())
		}
		p.fail.Store(nil)
		probe := p.stream("acme") // holds the probe slot until it ends
		if _, err := p.run("acme"); err == nil || !errors.Is(err, ErrOpen) {
			t.Errorf("second request while probing: %v, want refused", err)
		}
		if n := p.calls.Load(); n != 2 {
			t.Errorf("provider calls = %d, want 2 (the failure and the probe)", n)
		}
		if _, err := llm.Collect(probe); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if b.State() != StateClosed {
			t.Errorf("breaker %s after a successful probe, want closed", b.State())
		}
	})
}
