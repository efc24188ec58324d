package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

var (
	errServer = &llm.Error{Kind: llm.ErrServer, Status: 500, Message: "boom"}
	errBad    = &llm.Error{Kind: llm.ErrBadRequest, Status: 400, Message: "bad"}
	errAbort  = &llm.Error{Kind: llm.ErrAborted, Message: "aborted"}
)

type recorder struct {
	mu      sync.Mutex
	changes []string
}

func (r *recorder) listen(c StateChange) {
	r.mu.Lock()
	r.changes = append(r.changes, fmt.Sprintf("%s/%s:%s->%s", c.Kind, c.Name, c.From, c.To))
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.changes...)
}

func mustAllow(t *testing.T, b *Breaker) func(error) {
	t.Helper()
	report, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow on %s (%s): %v", b.Name(), b.State(), err)
	}
	return report
}

func wantOpen(t *testing.T, b *Breaker, text string, st State) {
	t.Helper()
	report, err := b.Allow()
	if err == nil {
		report(nil)
		t.Fatalf("Allow passed, want rejection (state %s)", b.State())
	}
	var oe *OpenError
	if !errors.As(err, &oe) || !errors.Is(err, ErrOpen) {
		t.Fatalf("err = %T %v, want *OpenError", err, err)
	}
	if err.Error() != text {
		t.Errorf("text = %q, want %q", err.Error(), text)
	}
	if oe.State != st {
		t.Errorf("OpenError.State = %s, want %s", oe.State, st)
	}
}

func TestProviderBreakerTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bs := NewBreakers(Options{FailureThreshold: 3, Cooldown: 10 * time.Second}, Options{})
		var rec recorder
		bs.OnStateChange(rec.listen)
		b := bs.Provider("anthropic")
		if bs.Provider("anthropic") != b {
			t.Fatal("Provider made a second breaker for the same name")
		}

		// Two failures, then a 4xx (the provider answered): still closed,
		// and the consecutive count restarts.
		mustAllow(t, b)(errServer)
		mustAllow(t, b)(errServer)
		mustAllow(t, b)(errBad)
		mustAllow(t, b)(errServer)
		mustAllow(t, b)(errServer)
		if b.State() != StateClosed {
			t.Fatalf("state = %s, want closed", b.State())
		}
		// Aborts count neither way.
		mustAllow(t, b)(errAbort)
		mustAllow(t, b)(context.Canceled)
		if b.State() != StateClosed {
			t.Fatalf("state = %s after aborts, want closed", b.State())
		}
		report := mustAllow(t, b)
		report(errServer)
		report(errServer) // second report is a no-op
		if b.State() != StateOpen {
			t.Fatalf("state = %s, want open", b.State())
		}
		wantOpen(t, b, "Circuit breaker open", StateOpen)
		if got := b.Rejected(); got != 1 {
			t.Errorf("Rejected = %d, want 1", got)
		}
		// Other providers are unaffected.
		mustAllow(t, bs.Provider("openai"))(nil)

		time.Sleep(9 * time.Second)
		wantOpen(t, b, "Circuit breaker open", StateOpen)
		time.Sleep(time.Second + time.Millisecond)
		if b.State() != StateHalfOpen {
			t.Fatalf("state = %s after cooldown, want half_open", b.State())
		}
		probe := mustAllow(t, b)
		wantOpen(t, b, "Circuit breaker open", StateHalfOpen) // one probe at a time
		probe(errServer)
		if b.State() != StateOpen {
			t.Fatalf("state = %s after failed probe, want open", b.State())
		}

		time.Sleep(10*time.Second + time.Millisecond)
		probe = mustAllow(t, b)
		probe(errAbort) // an aborted probe frees the slot without deciding
		if b.State() != StateHalfOpen {
			t.Fatalf("state = %s after aborted probe, want half_open", b.State())
		}
		mustAllow(t, b)(nil)
		if b.State() != StateClosed {
			t.Fatalf("state = %s after good probe, want closed", b.State())
		}

		want := []string{
			"provider/anthropic:closed->open",
			"provider/anthropic:open->half_open",
			"provider/anthropic:half_open->open",
			"provider/anthropic:open->half_open",
			"provider/anthropic:half_open->closed",
		}
		if got := rec.get(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("changes = %v\nwant %v", got, want)
		}
	})
}

func TestBashBreakerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bs := NewBreakers(Options{}, Options{}) // spec-less defaults: 10 timeouts in 2 min
		b := bs.Bash()
		exitErr := &exec.ExitError{}
		for range 9 {
			mustAllow(t, b)(ErrBashTimeout)
			mustAllow(t, b)(exitErr) // non-zero exit is not a failure
		}
		// The old timeouts leave the rolling window.
		time.Sleep(3 * time.Minute)
		mustAllow(t, b)(fmt.Errorf("run: %w", context.DeadlineExceeded))
		if b.State() != StateClosed {
			t.Fatalf("state = %s, want closed (old timeouts expired)", b.State())
		}
		for range 9 {
			mustAllow(t, b)(ErrBashTimeout)
		}
		if b.State() != StateOpen {
			t.Fatalf("state = %s after 10 timeouts, want open", b.State())
		}
		wantOpen(t, b, "Bash circuit breaker open", StateOpen)
		if err := b.Do(t.Context(), func(context.Context) error { return nil }); err == nil || err.Error() != BashOpenText {
			t.Fatalf("Do = %v, want %q", err, BashOpenText)
		}
		time.Sleep(DefaultBashOptions().Cooldown + time.Millisecond)
		if err := b.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Do after cooldown = %v", err)
		}
		if b.State() != StateClosed {
			t.Fatalf("state = %s, want closed", b.State())
		}
	})
}

func TestDoContextDoneAndPanic(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 1}, Options{})
	b := bs.Provider("p")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	if err := b.Do(ctx, func(context.Context) error { called = true; return nil }); !errors.Is(err, context.Canceled) || called {
		t.Fatalf("Do on done ctx = %v, called %v", err, called)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic not re-raised")
			}
		}()
		_ = b.Do(t.Context(), func(context.Context) error { panic("x") })
	}()
	// A panic is not a provider-side failure by the classifier: closed.
	if b.State() != StateClosed {
		t.Fatalf("state = %s", b.State())
	}
}

func TestClassifiers(t *testing.T) {
	netErr := &net.OpError{Op: "dial", Err: errors.New("refused")}
	for _, tc := range []struct {
		name               string
		err                error
		provider, bash, ab bool
	}{
		{"nil", nil, false, false, false},
		{"server", errServer, true, false, false},
		{"overloaded", &llm.Error{Kind: llm.ErrOverloaded, Status: 529}, true, false, false},
		{"network", &llm.Error{Kind: llm.ErrNetwork}, true, false, false},
		{"stream", &llm.Error{Kind: llm.ErrStream}, true, false, false},
		{"idle", &llm.Error{Kind: llm.ErrIdleTimeout}, true, false, false},
		{"wrapped server", fmt.Errorf("turn: %w", errServer), true, false, false},
		{"bad request", errBad, false, false, false},
		{"auth", &llm.Error{Kind: llm.ErrAuth, Status: 401}, false, false, false},
		{"rate limit", &llm.Error{Kind: llm.ErrRateLimit, Status: 429}, false, false, false},
		{"overflow", &llm.Error{Kind: llm.ErrContextOverflow, Status: 400}, false, false, false},
		{"aborted", errAbort, false, false, true},
		{"canceled", context.Canceled, false, false, true},
		{"raw net", netErr, true, false, false},
		{"deadline", context.DeadlineExceeded, true, true, false},
		{"bash timeout", ErrBashTimeout, false, true, false},
		{"exit", &exec.ExitError{}, false, false, false},
		{"plain", errors.New("x"), false, false, false},
	} {
		if got := ProviderFailure(tc.err); got != tc.provider {
			t.Errorf("%s: ProviderFailure = %v", tc.name, got)
		}
		if got := BashFailure(tc.err); got != tc.bash {
			t.Errorf("%s: BashFailure = %v", tc.name, got)
		}
		if got := Aborted(tc.err); got != tc.ab {
			t.Errorf("%s: Aborted = %v", tc.name, got)
		}
	}
}
