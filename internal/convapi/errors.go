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

// apiError is a refusal with the HTTP status a client sees and the
// message it reads. Handlers return one where gptme's wire fixes the
// status or the words; everything else is a *fault.Error mapped by
// statusOf.
type apiError struct {
	status int
	msg    string
	// extra are more top-level fields of the error body (step's early
	// failure carries "status" and "session_id").
	extra map[string]any
	// kept, when set, is the message kept for replays (the command
	// journal) in place of msg, which quotes what must not be kept.
	kept string
}

func (e *apiError) Error() string { return e.msg }

// keptMessage rides as the cause of a fault whose message must not be
// kept for replays: it is the message that is (see keepable).
type keptMessage string

func (k keptMessage) Error() string { return string(k) }

func errorf(status int, msg string) *apiError { return &apiError{status: status, msg: msg} }

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

// writeError answers err: an apiError as it says, a fault by its code, and
// anything else as 500 "Internal error" with the detail logged, never
// shown.
func writeError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		if len(ae.extra) == 0 {
			writeJSON(w, ae.status, errorBody{ae.msg})
			return
		}
		body := map[string]any{"error": ae.msg}
		for k, v := range ae.extra {
			body[k] = v
		}
		writeJSON(w, ae.status, body)
		return
	}
	fe := fault.As(err)
	if fe == nil || fe.Code == fault.Internal {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{"Internal error"})
		return
	}
	if fe.Code == fault.RateLimited || fe.Code == fault.Limit {
		// A client that backs off for a minute is always within the
		// sliding window again.
		w.Header().Set("Retry-After", "60")
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
