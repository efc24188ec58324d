package wiremock

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
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
	wires map[string]Wire

	// srv, url, closed and running belong to Start and Close: running
	// counts the started server's requests so that Close can wait for
	// them, and closed turns away any that arrive while it does.
	srvMu   sync.Mutex
	srv     *http.Server
	url     string
	closed  bool
	running sync.WaitGroup
	served  chan struct{}

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

// NewUnstarted returns a mock that is not yet listening: call Start to
// serve it on 127.0.0.1, or mount it (ServeHTTP) behind another handler.
// Close it in either case.
func NewUnstarted() *Server {
	return &Server{wires: map[string]Wire{
		PathAnthropicMessages: anthropicWire{},
		PathChatCompletions:   chatWire{},
		PathResponses:         responsesWire{},
	}}
}

// Start starts listening on a port of its own on 127.0.0.1. Like
// net/http/httptest, it panics if it cannot listen: the mock is for tests
// and benchmarks, where that leaves nothing to do.
func (s *Server) Start() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("wiremock: cannot listen: %v", err))
	}
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serveStarted), ReadHeaderTimeout: time.Minute}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
}

// serveStarted answers one request of the started server, counted for
// Close.
func (s *Server) serveStarted(w http.ResponseWriter, r *http.Request) {
	s.srvMu.Lock()
	if s.closed {
		s.srvMu.Unlock()
		http.Error(w, `{"error":{"message":"llmtest: closed"}}`, http.StatusServiceUnavailable)
		return
	}
	s.running.Add(1)
	s.srvMu.Unlock()
	defer s.running.Done()
	s.serve(w, r)
}

// ServeHTTP answers one request as the started server would, so the mock
// can be mounted behind another handler: the bench command wraps it to
// time each answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// Close stops the server, closes every connection it holds, and waits
// for the requests it was answering to end.
func (s *Server) Close() {
	s.srvMu.Lock()
	srv, already := s.srv, s.closed
	s.closed = true
	s.srvMu.Unlock()
	if srv == nil || already {
		return
	}
	_ = srv.Close()
	<-s.served
	s.running.Wait()
	// As httptest does: a test's next client must not reuse a pooled
	// connection to this server.
	if t, ok := http.DefaultTransport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// URL is the server's root, the base URL for the Anthropic SDK.
func (s *Server) URL() string { return s.url }

// AnthropicURL is the base URL an Anthropic client is pointed at.
func (s *Server) AnthropicURL() string { return s.url }

// OpenAIURL is the base URL an OpenAI client is pointed at ("<root>/v1").
func (s *Server) OpenAIURL() string { return s.url + "/v1" }

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

// TB is what LastRequest needs of a test (testing.TB has it), so that
// this package need not import testing.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// LastRequest returns the most recent request; it fails the test if there
// was none.
func (s *Server) LastRequest(t TB) Request {
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
