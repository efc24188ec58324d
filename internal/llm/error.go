package llm

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrorKind classifies a failed model request by what the caller should do
// about it.
type ErrorKind string

// Error kinds.
const (
	ErrBadRequest      ErrorKind = "bad_request"      // 400 and other 4xx: fix the request
	ErrAuth            ErrorKind = "auth"             // 401: the key is missing or wrong
	ErrPermission      ErrorKind = "permission"       // 403
	ErrNotFound        ErrorKind = "not_found"        // 404: usually an unknown model id or base URL
	ErrTooLarge        ErrorKind = "too_large"        // 413
	ErrRateLimit       ErrorKind = "rate_limit"       // 429
	ErrOverloaded      ErrorKind = "overloaded"       // 529 / overloaded_error
	ErrServer          ErrorKind = "server"           // 5xx
	ErrNetwork         ErrorKind = "network"          // could not connect or the connection dropped
	ErrStream          ErrorKind = "stream"           // the stream was cut or malformed
	ErrIdleTimeout     ErrorKind = "idle_timeout"     // no data for longer than the idle timeout
	ErrContextOverflow ErrorKind = "context_overflow" // the prompt does not fit the model's window
	ErrAborted         ErrorKind = "aborted"          // the caller cancelled
)

// Error is a failed model request. Its Error() text is what a user sees in
// an assistant message's errorMessage: "<status> <provider message>" when
// the provider answered with an HTTP error.
type Error struct {
	Kind    ErrorKind
	Status  int    // HTTP status, 0 when there was none
	Message string // the provider's own message, or ours when it sent none
	// RetryAfter is the delay the provider asked for (retry-after,
	// retry-after-ms), 0 when it did not say.
	RetryAfter time.Duration
	// Hint says what to do about it, in words for a person: which key a
	// 401 refused and where it comes from. The provider's own body ("401
	// invalid x-api-key") does not say what to fix. Empty when there is
	// nothing to add.
	Hint string
	Err  error // underlying cause, for logs
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%d %s", e.Status, e.Explained())
	}
	return e.Explained()
}

// Explained is Message with the Hint after it in parentheses: the
// provider's words and ours, without the status.
func (e *Error) Explained() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + " (" + e.Hint + ")"
}

// AuthHint is the Hint for a provider's 401: which key it refused. key
// names where the key comes from (an environment variable, or the apiKey
// in models.json); empty when agentd knows of none.
func AuthHint(provider, key string) string {
	if key != "" {
		return provider + " refused the API key: check " + key
	}
	return provider + " refused the API key; models.json can set one with apiKey"
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed if sent again
// later: rate limits, overload, server errors, dropped connections and
// stalled streams.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case ErrRateLimit, ErrOverloaded, ErrServer, ErrNetwork, ErrStream, ErrIdleTimeout:
		return true
	}
	return false
}

// ContextOverflow reports whether the request failed because the prompt is
// larger than the model's context window; the engine compacts and retries.
func (e *Error) ContextOverflow() bool { return e.Kind == ErrContextOverflow }

// AsError returns err as an *Error if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// HTTPError classifies an HTTP error answer. message is the provider's own
// error message from the body (empty to use the status text); errType is
// its error type, if the body had one (Anthropic's "overloaded_error",
// OpenAI's "context_length_exceeded" code).
func HTTPError(status int, header http.Header, errType, message string, cause error) *Error {
	if message == "" {
		message = http.StatusText(status)
		if message == "" {
			message = "request failed"
		}
	}
	e := &Error{Status: status, Message: message, RetryAfter: RetryAfter(header), Err: cause}
	switch {
	case IsContextOverflow(errType, message):
		e.Kind = ErrContextOverflow
	case errType == "overloaded_error" || status == 529:
		e.Kind = ErrOverloaded
	case status == http.StatusUnauthorized:
		e.Kind = ErrAuth
	case status == http.StatusForbidden:
		e.Kind = ErrPermission
	case status == http.StatusNotFound:
		e.Kind = ErrNotFound
	case status == http.StatusRequestEntityTooLarge:
		e.Kind = ErrTooLarge
	case status == http.StatusTooManyRequests || errType == "rate_limit_error":
		e.Kind = ErrRateLimit
	case status == http.StatusRequestTimeout || status >= 500:
		e.Kind = ErrServer
	default:
		e.Kind = ErrBadRequest
	}
	return e
}

// StreamError is an error event received inside an otherwise successful
// stream (Anthropic's "event: error", an OpenAI chunk carrying "error", a
// Responses "response.failed"). It has no HTTP status of its own.
func StreamError(errType, message string) *Error {
	if message == "" {
		message = "the provider reported an error in the stream"
	}
	e := &Error{Message: message}
	switch {
	case IsContextOverflow(errType, message):
		e.Kind = ErrContextOverflow
	case errType == "overloaded_error":
		e.Kind = ErrOverloaded
	case errType == "rate_limit_error" || errType == "rate_limit_exceeded":
		e.Kind = ErrRateLimit
	case errType == "invalid_request_error":
		e.Kind = ErrBadRequest
	default:
		e.Kind = ErrServer
	}
	if errType != "" && !strings.Contains(message, errType) {
		e.Message = errType + ": " + message
	}
	return e
}

// overflowPatterns are the ways providers and OpenAI-compatible servers
// say that a prompt is too long for the model; compiled on first use, as
// most commands never see a provider's error.
var overflowPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)prompt is too long|input is too long|exceeds? (the )?(model'?s? )?(maximum )?context|maximum context length|context[ _]length[ _]exceeded|context window|too many tokens|reduce the length of the messages|token limit|request_too_large|maximum prompt length|prompt too long`)
})

// IsContextOverflow reports whether an error type or message says the
// prompt overflowed the context window.
func IsContextOverflow(errType, message string) bool {
	if errType == "context_length_exceeded" || errType == "request_too_large" {
		return true
	}
	return overflowPattern().MatchString(message)
}

// RetryAfter reads the delay a provider asked for from retry-after-ms or
// retry-after (seconds or an HTTP date). It returns 0 when there is none.
func RetryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
