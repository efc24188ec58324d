package health

import (
	"context"
	"errors"
	"net"

	"github.com/agentd-dev/agentd/internal/llm"
)

// ErrBashTimeout is what a bash caller reports (wrapped or not) when a
// command timed out; [BashFailure] counts it.
var ErrBashTimeout = errors.New("bash command timed out")

// ProviderFailure reports whether a model request failed on the
// provider's side: 5xx, overloaded, network, a cut stream or an idle
// timeout. Client-side errors (4xx including 429, auth, context
// overflow) and the caller's own abort are not failures. Errors that are
// not *llm.Error count when they are net.Error values, which includes
// context.DeadlineExceeded: a deadline that ran out on a model call means
// the provider was too slow.
func ProviderFailure(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := llm.AsError(err); ok {
		switch e.Kind {
		case llm.ErrServer, llm.ErrOverloaded, llm.ErrNetwork, llm.ErrStream, llm.ErrIdleTimeout:
			return true
		}
		return false
	}
	if Aborted(err) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// BashFailure reports whether a bash command timed out: [ErrBashTimeout],
// context.DeadlineExceeded or an error with Timeout() true. Non-zero exit
// statuses are not failures.
func BashFailure(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrBashTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// Aborted reports whether err is the caller's own cancellation
// (context.Canceled or an llm error of kind aborted); such outcomes count
// neither as success nor failure.
func Aborted(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := llm.AsError(err); ok && e.Kind == llm.ErrAborted {
		return true
	}
	return errors.Is(err, context.Canceled)
}
