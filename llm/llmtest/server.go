package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request the mock received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// JSON is Body decoded, nil if it was not a JSON object.
	JSON map[string]any
}

// Wire renders scripts in one API's streaming format.
type Wire interface {
	// Frames returns the complete event-stream frames ("event: x\ndata: y\n\n")
	// for a successful answer, terminator included.
	Frames(s *Script, r *Request) []string
	// ErrorBody is the JSON body of an HTTP error answer.
	ErrorBody(s *Script) []byte
}

// Handler picks the script for a request when none is queued.
type Handler func(r *Request) Script

// Server is a mock of all three model APIs on 127.0.0.1.
type Server struct {
	srv   *httptest.Server
	wires map[string]Wire

	mu       sync.Mutex
	queue    []Script
	handler  Handler
	requests []Request
	seq      int
}

// Paths the mock answers on.
const (
	PathAnthropicMessages = "/v1/messages"
	PathChatCompletions   = "/v1/chat/completions"
	PathResponses         = "/v1/responses"
)

// NewServer starts a mock and stops it when the test ends.
func NewServer(t testing.TB) *Server {
	s := NewUnstarted()
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// NewUnstarted returns a mock that is not yet listening, for use outside
// tests (benchmarks, the bench command). Call Start and Close.
func NewUnstarted() *Server {
	s := &Server{wires: map[string]Wire{
		PathAnthropicMessages: anthropicWire{},
		PathChatCompletions:   chatWire{},
		PathResponses:         responsesWire{},
	}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s
}

// Start starts listening.
func (s *Server) Start() { s.srv.Start() }

// ServeHTTP answers one request as the started server would, so the mock
// can be mounted behind another handler: the bench command wraps it to
// time each answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// Close stops the server and closes held connections.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// URL is the server's root, the base URL for the Anthropic SDK.
func (s *Server) URL() string { return s.srv.URL }

// AnthropicURL is the base URL an Anthropic client is pointed at.
func (s *Server) AnthropicURL() string { return s.srv.URL }

// OpenAIURL is the base URL an OpenAI client is pointed at ("<root>/v1").
func (s *Server) OpenAIURL() string { return s.srv.URL + "/v1" }

// Enqueue adds scripts to answer the next requests, in order.
func (s *Server) Enqueue(scripts ...Script) {
	s.mu.Lock()
	s.queue = append(s.queue, scripts...)
	s.mu.Unlock()
}

// Handle sets the function that picks a script when the queue is empty.
func (s *Server) Handle(h Handler) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// LastRequest returns the most recent request; it fails the test if there
// was none.
func (s *Server) LastRequest(t testing.TB) Request {
	t.Helper()
	rs := s.Requests()
	if len(rs) == 0 {
		t.Fatal("llmtest: no request received")
	}
	return rs[len(rs)-1]
}

func (s *Server) serve(w http.ResponseWriter, hr *http.Request) {
	wire, ok := s.wires[hr.URL.Path]
	if !ok || hr.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"llmtest: no such endpoint"}}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(hr.Body)
	req := Request{Method: hr.Method, Path: hr.URL.Path, Header: hr.Header.Clone(), Body: body}
	_ = json.Unmarshal(body, &req.JSON)

	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.seq++
	var sc Script
	switch {
	case len(s.queue) > 0:
		sc = s.queue[0]
		s.queue = s.queue[1:]
	case s.handler != nil:
		h := s.handler
		s.mu.Unlock()
		sc = h(&req)
		s.mu.Lock()
	default:
		sc = Script{Status: http.StatusInternalServerError, ErrorType: "api_error", ErrorMessage: "llmtest: no script queued"}
	}
	if sc.ResponseID == "" {
		sc.ResponseID = fmt.Sprintf("mock-%d", s.seq)
	}
	s.mu.Unlock()

	if !sleep(hr, sc.FirstDelay) {
		return
	}
	h := w.Header()
	for k, v := range sc.Headers {
		h.Set(k, v)
	}
	if sc.RetryAfter != "" {
		h.Set("Retry-After", sc.RetryAfter)
	}
	if sc.RetryAfterMs != "" {
		h.Set("Retry-After-Ms", sc.RetryAfterMs)
	}
	if sc.Status != 0 && sc.Status != http.StatusOK {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(sc.Status)
		_, _ = w.Write(wire.ErrorBody(&sc))
		return
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if sc.Raw != nil {
		_, _ = w.Write(sc.Raw)
		return
	}
	frames := wire.Frames(&sc, &req)
	deltas := 0
	for i, f := range frames {
		// Delay paces content, not the preamble: the real APIs send their
		// structural frames (response.created, message_start, ...) at
		// once, and a test that aborts after the first delta must not
		// wait out a delay per preamble frame.
		if strings.Contains(f, "delta") {
			if deltas > 0 && !sleep(hr, sc.Delay) {
				return
			}
			deltas++
		}
		switch {
		case sc.CutAfter > 0 && i == sc.CutAfter:
			cut(w)
			return
		case sc.MalformedAfter > 0 && i == sc.MalformedAfter:
			_, _ = io.WriteString(w, malformedFrame(f))
			_ = rc.Flush()
			return
		case sc.HangAfter > 0 && i == sc.HangAfter:
			<-hr.Context().Done()
			return
		}
		if _, err := io.WriteString(w, f); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// malformedFrame keeps the frame's event line, if any, and breaks its JSON.
func malformedFrame(f string) string {
	if strings.HasPrefix(f, "event: ") {
		if nl := strings.IndexByte(f, '\n'); nl > 0 {
			return f[:nl+1] + "data: {\"type\": \"broken\", \"oops\n\n"
		}
	}
	return "data: {\"id\": \"broken\", \"oops\n\n"
}

// cut drops the connection without finishing the chunked body, as a
// crashing upstream or a proxy timeout does.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// SSE formats one event-stream frame. An empty event name writes a
// data-only frame.
func SSE(event string, data any) string {
	var payload string
	switch d := data.(type) {
	case string:
		payload = d
	case []byte:
		payload = string(d)
	default:
		b, err := json.Marshal(d)
		if err != nil {
			panic(fmt.Sprintf("llmtest: cannot encode frame: %v", err))
		}
		payload = string(b)
	}
	if event == "" {
		return "data: " + payload + "\n\n"
	}
	return "event: " + event + "\ndata: " + payload + "\n\n"
}
