package convapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/agentd-dev/agentd/internal/fault"
)

// codeMethodNotAllowed is this face's one code of its own: a path that
// exists, asked with a method it does not take (405). It never leaves
// the face, so fault has no code for it.
const codeMethodNotAllowed fault.Code = "method_not_allowed"

// keptMessage rides as the cause of a fault whose message must not be
// kept for replays: it is the message that is (see keepable).
type keptMessage string

func (k keptMessage) Error() string { return string(k) }

// fieldsError is a fault whose error body carries more top-level fields
// than "error", where gptme's wire has them (step's early failure carries
// "status" and "session_id").
type fieldsError struct {
	err    *fault.Error
	fields map[string]any
}

func (e *fieldsError) Error() string { return e.err.Error() }
func (e *fieldsError) Unwrap() error { return e.err }

func withFields(err *fault.Error, fields map[string]any) error {
	return &fieldsError{err: err, fields: fields}
}

// statusOf maps a fault code to its HTTP status, once for the face.
func statusOf(code fault.Code) int {
	switch code {
	case fault.Invalid, fault.UnknownCommand:
		return http.StatusBadRequest
	case fault.Unauthorized:
		return http.StatusUnauthorized
	case fault.Forbidden:
		return http.StatusForbidden
	case fault.NotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case fault.Conflict, fault.Busy:
		return http.StatusConflict
	case fault.VersionMismatch:
		return http.StatusPreconditionFailed
	case fault.TooLarge:
		return http.StatusRequestEntityTooLarge
	case fault.Dependency:
		return http.StatusFailedDependency
	case fault.RateLimited, fault.Limit:
		return http.StatusTooManyRequests
	case fault.Unavailable, fault.ShuttingDown:
		return http.StatusServiceUnavailable
	case fault.Timeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// errorBody is every error response: {"error": "..."}.
type errorBody struct {
	Error string `json:"error"`
}

// writeError is the face's one error path: a fault is answered with its
// code's status (statusOf) and its message in gptme's error body;
// anything else, and an Internal fault, is logged and answered 500
// "Internal error", its detail never shown.
func writeError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	fe := fault.As(err)
	if fe == nil || fe.Code == fault.Internal {
		// A command's internal failure comes back from the pipeline as an
		// Internal fault: its cause is the detail.
		detail := err
		if fe != nil && fe.Cause != nil {
			detail = fe.Cause
		}
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", detail)
		writeJSON(w, http.StatusInternalServerError, errorBody{"Internal error"})
		return
	}
	switch fe.Code {
	case fault.RateLimited, fault.Limit:
		// A client that backs off for a minute is always within the
		// sliding window again.
		w.Header().Set("Retry-After", "60")
	case fault.Unauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentd"`)
	}
	var fields *fieldsError
	if errors.As(err, &fields) && len(fields.fields) > 0 {
		body := map[string]any{"error": fe.Message}
		for k, v := range fields.fields {
			body[k] = v
		}
		writeJSON(w, statusOf(fe.Code), body)
		return
	}
	writeJSON(w, statusOf(fe.Code), errorBody{fe.Message})
}

// marshal encodes v without HTML escaping (a client reads the JSON, not a
// browser's HTML parser), with no trailing newline.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`null`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeRaw(w, status, marshal(v))
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
