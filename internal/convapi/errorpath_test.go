package convapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
)

// syncBuffer is a log sink written by the server's goroutines while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestErrorPath: the face's one error path (writeError, statusOf). A
// fault is answered with its code's status and its message in gptme's
// body; anything else, and an Internal fault, 500 "Internal error" with
// the detail in the log only.
func TestErrorPath(t *testing.T) {
	secret := "open /var/lib/agentd/sessions/x.jsonl: no space left on device"
	tests := []struct {
		name   string
		err    error
		status int
		body   map[string]any
		header [2]string // a header the answer must carry
		logged bool
	}{
		{"plain error", errors.New(secret), 500, map[string]any{"error": "Internal error"}, [2]string{}, true},
		{"wrapped plain error", fmt.Errorf("forking: %w", errors.New(secret)), 500, map[string]any{"error": "Internal error"}, [2]string{}, true},
		{"internal fault", fault.Wrap(fault.Internal, errors.New(secret), "Internal error"), 500, map[string]any{"error": "Internal error"}, [2]string{}, true},
		{"invalid", fault.New(fault.Invalid, "Invalid conversation_id"), 400, map[string]any{"error": "Invalid conversation_id"}, [2]string{}, false},
		{"unauthorized", fault.New(fault.Unauthorized, "Invalid or expired token"), 401, map[string]any{"error": "Invalid or expired token"}, [2]string{"WWW-Authenticate", `Bearer realm="agentd"`}, false},
		{"forbidden", fault.New(fault.Forbidden, "Session a does not belong to conversation b"), 403, map[string]any{"error": "Session a does not belong to conversation b"}, [2]string{}, false},
		{"not found", fault.New(fault.NotFound, "Conversation not found: c1"), 404, map[string]any{"error": "Conversation not found: c1"}, [2]string{}, false},
		{"method not allowed", fault.New(codeMethodNotAllowed, "Method PUT is not allowed on /api/v2/models; use GET"), 405, map[string]any{"error": "Method PUT is not allowed on /api/v2/models; use GET"}, [2]string{}, false},
		{"conflict", fault.New(fault.Conflict, "Conversation already exists: c1"), 409, map[string]any{"error": "Conversation already exists: c1"}, [2]string{}, false},
		{"busy", fault.New(fault.Busy, "Generation already in progress"), 409, map[string]any{"error": "Generation already in progress"}, [2]string{}, false},
		{"too large", fault.New(fault.TooLarge, "Request body too large: the limit is 10 bytes"), 413, map[string]any{"error": "Request body too large: the limit is 10 bytes"}, [2]string{}, false},
		{"limit", fault.New(fault.Limit, "Too many conversations"), 429, map[string]any{"error": "Too many conversations"}, [2]string{"Retry-After", "60"}, false},
		{"failed", fault.New(fault.Failed, "The conversation's file could not record the change"), 500, map[string]any{"error": "The conversation's file could not record the change"}, [2]string{}, false},
		{"unavailable", fault.New(fault.Unavailable, "Circuit breaker open for provider p; retry later"), 503, map[string]any{"error": "Circuit breaker open for provider p; retry later"}, [2]string{}, false},
		{"timeout", fault.New(fault.Timeout, "Interrupt requested; the run has not stopped yet"), 504, map[string]any{"error": "Interrupt requested; the run has not stopped yet"}, [2]string{}, false},
		{"with fields", withFields(fault.New(fault.Failed, "401 invalid x-api-key"), map[string]any{"status": "error", "session_id": "s1"}), 500,
			map[string]any{"error": "401 invalid x-api-key", "status": "error", "session_id": "s1"}, [2]string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			w := httptest.NewRecorder()
			writeError(w, log, httptest.NewRequest("POST", "/api/v2/conversations/c1/fork", nil), tt.err)
			var body map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if w.Code != tt.status || fmt.Sprint(body) != fmt.Sprint(tt.body) {
				t.Fatalf("got %d %s, want %d %v", w.Code, w.Body, tt.status, tt.body)
			}
			if tt.header[0] != "" && w.Header().Get(tt.header[0]) != tt.header[1] {
				t.Fatalf("%s: %q, want %q", tt.header[0], w.Header().Get(tt.header[0]), tt.header[1])
			}
			if strings.Contains(w.Body.String(), "no space left") {
				t.Fatalf("the client was told the detail: %s", w.Body)
			}
			if logged := strings.Contains(logs.String(), "no space left on device"); logged != tt.logged {
				t.Fatalf("detail logged %v, want %v: %s", logged, tt.logged, logs.String())
			}
		})
	}
}

// TestInternalErrorIsNotShown: a command that fails for a reason of the
// machine's (the conversation's file is gone when it is forked) is
// answered 500 "Internal error" over real HTTP, through the pipeline,
// and the detail (the file's path) is in the server's log, not the
// answer; a refusal of the same command keeps its status and words.
func TestInternalErrorIsNotShown(t *testing.T) {
	logs := &syncBuffer{}
	fx := newFixture(t, fixtureOptions{log: slog.New(slog.NewTextHandler(logs, nil))})
	fx.create("c1", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	file := fx.ok("GET", "/api/v2/conversations/c1", nil).str("logfile")
	if file == "" {
		t.Fatal("the conversation has no file")
	}

	wantErr(t, fx.do("POST", "/api/v2/conversations/c1/fork?after_message=9", nil), http.StatusBadRequest, "Message index 9 out of range (0-0)")
	wantErr(t, fx.do("POST", "/api/v2/conversations/c1/fork?after_message=0&branch=b2", nil), http.StatusNotFound, "Branch not found: b2")
	wantErr(t, fx.do("POST", "/api/v2/conversations/nope/fork?after_message=0", nil), http.StatusNotFound, "Conversation not found: nope")

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	r := fx.do("POST", "/api/v2/conversations/c1/fork?after_message=0", nil)
	wantErr(t, r, http.StatusInternalServerError, "Internal error")
	if strings.Contains(string(r.body), file) {
		t.Fatalf("the answer names the file: %s", r)
	}
	if !strings.Contains(logs.String(), file) {
		t.Fatalf("the log does not have the detail: %s", logs.String())
	}
}
