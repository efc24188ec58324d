// Package fault is the one error type a client of agentd may see. Every
// layer that refuses or fails something a client asked for (the engine,
// the command pipeline, the shared session layer) returns an *Error with a
// Code saying what kind of failure it is; each protocol face maps the code
// once to its wire (an HTTP status, a close code, pi's error string) and
// shows Message as written. Anything else a face receives is internal: it
// is logged, and the client is told only that something went wrong.
package fault

import (
	"errors"
	"fmt"
)

// Code classifies a failure for the client.
type Code string

// The codes. The comments give the HTTP status a REST face uses, as a
// guide to what each means.
const (
	Invalid         Code = "invalid"           // 400: the request is malformed or names something impossible
	UnknownCommand  Code = "unknown_command"   // 400: no such command
	Unauthorized    Code = "unauthorized"      // 401: missing or wrong credentials
	Forbidden       Code = "forbidden"         // 403: not allowed here (a path outside the allowed places)
	NotFound        Code = "not_found"         // 404: no such session, entry, request or file
	Conflict        Code = "conflict"          // 409: clashes with what exists (an id reused for another command, a duplicate session)
	Busy            Code = "busy"              // 409: the session is doing something that must finish or be aborted first
	VersionMismatch Code = "version_mismatch"  // 412: ifSessionVersion did not match
	TooLarge        Code = "too_large"         // 413: a frame, message or queue entry over its limit
	Dependency      Code = "dependency_failed" // 424: a dependsOn command failed, is unknown or timed out
	RateLimited     Code = "rate_limited"      // 429: too many commands per minute
	Limit           Code = "limit_reached"     // 429: a capacity limit (sessions, queued messages, pending commands)
	Failed          Code = "failed"            // 500: the operation ran and failed; Message says why
	Interrupted     Code = "interrupted"       // 500: cut off by a server restart
	Unavailable     Code = "unavailable"       // 503: a dependency is refusing work for now (an open circuit breaker)
	ShuttingDown    Code = "shutting_down"     // 503: the server is draining
	Timeout         Code = "timeout"           // 504: the command ran out of time
	Internal        Code = "internal"          // 500: a bug or an environment failure; Message is not shown
)

// Error is a failure a client may be told about. Message is written for
// the client; Cause, when set, is the internal detail behind it, for logs.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Cause   error  `json:"-"`
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches another *Error with the same code and message, so sentinel
// errors built with New work with errors.Is even after a copy.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == e.Message
}

// New returns an *Error.
func New(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Errorf returns an *Error with a formatted message. A %w verb records
// its operand as the Cause, for logs; its text still appears in Message.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Cause: errors.Unwrap(err)}
}

// Wrap gives err a code and a client-facing message, keeping err as the
// cause.
func Wrap(code Code, err error, msg string) *Error {
	return &Error{Code: code, Message: msg, Cause: err}
}

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf is the code of err: the code of the *Error in its chain, or
// Internal for any other error (nil has no code).
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e := As(err); e != nil {
		return e.Code
	}
	return Internal
}

// Public is what a client may see of err: the *Error in its chain as is,
// or, for an error that is not one, an Internal error whose message says
// nothing of the detail. Callers log the detail themselves.
func Public(err error) *Error {
	if err == nil {
		return nil
	}
	if e := As(err); e != nil {
		return e
	}
	return &Error{Code: Internal, Message: "Internal error", Cause: err}
}
