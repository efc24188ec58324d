package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
)

// lockedBuffer is a log sink the conn's handler goroutines write to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestErrorsReachTheEditorOnce: the face's one error path. A handler's
// fault reaches the editor with its code's JSON-RPC code and its
// message; a JSON-RPC *Error as it is; anything else, and an Internal
// fault, as -32603 "Internal error", its detail only in the log.
func TestErrorsReachTheEditorOnce(t *testing.T) {
	secret := "open /root/.agentd/sessions/x.jsonl: permission denied"
	tests := []struct {
		method   string
		err      error
		code     int
		message  string
		internal bool // the detail is logged, not sent
	}{
		{"plain", errors.New(secret), CodeInternalError, "Internal error", true},
		{"wrapped", fmt.Errorf("listing sessions: %w", errors.New(secret)), CodeInternalError, "Internal error", true},
		{"internal-fault", fault.Wrap(fault.Internal, errors.New(secret), "reading "+secret), CodeInternalError, "Internal error", true},
		{"invalid", fault.New(fault.Invalid, "unknown mode \"yolo\""), CodeInvalidParams, "unknown mode \"yolo\"", false},
		{"not-found", fault.New(fault.NotFound, "Session s1 not found"), CodeResourceNotFound, "Session s1 not found", false},
		{"busy", fault.New(fault.Busy, "session s1 is running a prompt"), CodeInternalError, "session s1 is running a prompt", false},
		{"fault-in-a-wrapper", fmt.Errorf("opening: %w", fault.New(fault.NotFound, "Session s2 not found")), CodeResourceNotFound, "Session s2 not found", false},
		{"rpc", &Error{Code: CodeAuthRequired, Message: "authenticate first"}, CodeAuthRequired, "authenticate first", false},
		{"remote", fromRemote(errors.New("the connection to agentd serve ended: EOF")), CodeInternalError, "the connection to agentd serve ended: EOF", false},
	}
	byMethod := map[string]error{}
	for _, tt := range tests {
		byMethod[tt.method] = tt.err
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	c := newConn(func(_ context.Context, method string, _ json.RawMessage) (any, error) {
		return nil, byMethod[method]
	}, 1<<20, log)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- c.serve(context.Background(), inR, outW, func() {}) }()
	t.Cleanup(func() {
		_ = inW.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 1<<20)

	for i, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`+"\n", i, tt.method)
			if _, err := io.WriteString(inW, req); err != nil {
				t.Fatal(err)
			}
			if !lines.Scan() {
				t.Fatalf("no answer: %v", lines.Err())
			}
			var f frame
			if err := json.Unmarshal(lines.Bytes(), &f); err != nil {
				t.Fatalf("answer %s: %v", lines.Bytes(), err)
			}
			if f.Error == nil || f.Error.Code != tt.code || f.Error.Message != tt.message {
				t.Fatalf("answer %s, want error %d %q", lines.Bytes(), tt.code, tt.message)
			}
			if strings.Contains(lines.Text(), "permission denied") {
				t.Fatalf("the editor was told the detail: %s", lines.Bytes())
			}
			if logged := strings.Contains(logs.String(), "method="+tt.method+" "); logged != tt.internal {
				t.Fatalf("logged %v, want %v: %s", logged, tt.internal, logs.String())
			}
			if tt.internal && !strings.Contains(logs.String(), "permission denied") {
				t.Fatalf("the detail is not in the log: %s", logs.String())
			}
		})
	}
	_ = outR.Close()
}
