package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/todo"
)

// tagOpen and tagClose bracket the id of one prompt in its text. The mock
// finds the last one in a request body (the body carries the whole
// conversation, so earlier rounds' tags are there too) to charge the time
// it spent answering to that prompt.
const (
	tagOpen  = "bench-tag:["
	tagClose = "]"
)

// mock is llmtest's wire-level model mounted behind a handler that times
// every answer: the time from the request arriving to the last byte being
// flushed is the model's share of a prompt's latency, which the report
// subtracts to get what agentd itself adds.
type mock struct {
	llm    *wiremock.Server
	srv    *http.Server
	answer string // the text of every answer
	url    string
	served chan struct{} // closed when Serve returns

	mu       sync.Mutex
	took     map[string]time.Duration // by prompt tag; summed over retries
	byTag    map[string]int           // requests, by prompt tag
	requests int
	// replay, when set, is llmtest's answer recorded once: every request
	// gets the same answer (without a plan), and encoding 2,000 chunks
	// with encoding/json per request made the mock cost more CPU than
	// the server it feeds, on the machine both share. The server still
	// gets each chunk in a flush of its own, as from wiremock.
	replay    *recorded
	same      bool          // every request has the same answer: record it
	recording chan struct{} // closed when the first answer is recorded
}

// recorded is the answer to replay, if there is one; first says the
// caller is to record it. Requests that come while the first answer is
// being recorded wait for it.
func (m *mock) recorded() (rec *recorded, first bool) {
	m.mu.Lock()
	if !m.same {
		m.mu.Unlock()
		return nil, false
	}
	if m.recording == nil {
		m.recording = make(chan struct{})
		m.mu.Unlock()
		return nil, true
	}
	wait := m.recording
	m.mu.Unlock()
	<-wait
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.replay, false
}

// recorded is an answer as llmtest wrote it: its header and the bytes
// between flushes.
type recorded struct {
	header http.Header
	status int
	parts  [][]byte
}

// startMock listens on a free loopback port. Every answer is the same
// text streamed in chunks deltas, with usage, and no delay: the model is
// as fast as a model can be, so what is left is agentd. With planSteps
// above 0 every answer but a run's last also calls the todo tool (see
// planScript), so that each prompt's run has planSteps+2 turns and its
// plan moves.
func startMock(chunks, planSteps int) (*mock, error) {
	script := textScript(chunks)
	m := &mock{llm: wiremock.NewUnstarted(), answer: strings.Join(script.Text, ""), took: map[string]time.Duration{}, byTag: map[string]int{}, served: make(chan struct{}),
		same: planSteps == 0}
	// The unstarted llmtest server is only a handler here; its own
	// listener is never served, and closing it is all Close does.
	if planSteps > 0 {
		m.llm.Handle(func(r *wiremock.Request) wiremock.Script { return planScript(script, planSteps, r) })
	} else {
		m.llm.Handle(func(*wiremock.Request) wiremock.Script { return script })
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.llm.Close()
		return nil, fmt.Errorf("mock model: listen: %w", err)
	}
	m.url = "http://" + ln.Addr().String() + "/v1"
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(ln) // ErrServerClosed after close; nothing else to do with it
	}()
	return m, nil
}

// textScript is an answer of chunks text deltas of 4 bytes each, a
// typical token's size, so that a full-format stream carries what a real
// one of as many tokens would.
func textScript(chunks int) wiremock.Script {
	text := make([]string, chunks)
	for i := range text {
		text[i] = fmt.Sprintf("w%02d ", i%100)
	}
	// One response id for all: the answers are replayed byte for byte.
	return wiremock.Script{Text: text, Usage: &wiremock.Usage{Input: 42, Output: int64(chunks)}, ResponseID: "chatcmpl-bench"}
}

// planScript is the answer to r in a run that works through a plan of
// steps items: the text of every answer, and while the plan is not done a
// todo call that rewrites the whole list one step further (the first
// answer starts step 1, the one after step k's result starts step k+1,
// the one after the last step's marks everything completed), then the
// text alone. Where a run is comes from the request itself, the tool
// results since its last user message, so the mock keeps no state per
// session and a retried request gets the same answer.
func planScript(text wiremock.Script, steps int, r *wiremock.Request) wiremock.Script {
	done := 0
	msgs, _ := r.JSON["messages"].([]any)
	for _, m := range slices.Backward(msgs) {
		role, _ := m.(map[string]any)["role"].(string)
		if role == "user" {
			break
		}
		if role == "tool" {
			done++
		}
	}
	if done > steps {
		return text
	}
	type item struct {
		Content string `json:"content"`
		Status  string `json:"status"`
	}
	list := make([]item, steps)
	for i := range list {
		list[i] = item{Content: fmt.Sprintf("bench step %d of %d", i+1, steps), Status: "pending"}
		switch {
		case i < done:
			list[i].Status = "completed"
		case i == done:
			list[i].Status = "in_progress"
		}
	}
	args, _ := json.Marshal(map[string]any{"todos": list}) // strings only: cannot fail
	s := text
	s.ToolCalls = []wiremock.ToolCall{{ID: fmt.Sprintf("bench-call-%d", done), Name: todo.ToolName, Args: []string{string(args)}}}
	return s
}

// openAIURL is the base URL for an openai-completions provider.
func (m *mock) openAIURL() string { return m.url }

func (m *mock) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if rec, first := m.recorded(); rec != nil {
		rec.play(w)
	} else if first {
		rw := &recorder{w: w, rc: http.NewResponseController(w)}
		m.llm.ServeHTTP(rw, r)
		rw.end()
		m.mu.Lock()
		// An answer cut short (its client went away) is not the answer.
		if rw.status == http.StatusOK && rw.err == nil && r.Context().Err() == nil {
			m.replay = &recorded{header: w.Header().Clone(), status: rw.status, parts: rw.parts}
		}
		close(m.recording)
		m.same = m.replay != nil
		m.mu.Unlock()
	} else {
		m.llm.ServeHTTP(w, r)
	}
	took := time.Since(start)
	tag := lastTag(body)
	m.mu.Lock()
	m.took[tag] += took
	m.byTag[tag]++
	m.requests++
	m.mu.Unlock()
}

// lastTag is the id of the newest prompt in a request body, "" if none.
func lastTag(body []byte) string {
	i := bytes.LastIndex(body, []byte(tagOpen))
	if i < 0 {
		return ""
	}
	rest := body[i+len(tagOpen):]
	j := bytes.Index(rest, []byte(tagClose))
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// time is the mock's time answering the prompt tagged tag.
func (m *mock) time(tag string) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.took[tag]
	return d, ok
}

// requestsBy is how many requests the mock answered, by prompt tag.
func (m *mock) requestsBy() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.byTag)
}

func (m *mock) requestCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

// close stops serving, drops held connections and waits for Serve to
// return.
func (m *mock) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if err != nil {
		// A stream still held by a server that did not hang up: cut it.
		err = m.srv.Close()
	}
	<-m.served
	m.llm.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// play writes the recorded answer, flushing where llmtest flushed.
func (rec *recorded) play(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	w.WriteHeader(rec.status)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	for _, p := range rec.parts {
		if _, err := w.Write(p); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// recorder passes an answer through to the client and keeps a copy of it,
// part by part between flushes.
type recorder struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	status  int
	pending []byte
	parts   [][]byte
	err     error // the first write or flush that failed
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.w.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.pending = append(r.pending, b...)
	n, err := r.w.Write(b)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// FlushError is what http.ResponseController calls.
func (r *recorder) FlushError() error {
	r.end()
	err := r.rc.Flush()
	if err != nil && r.err == nil {
		r.err = err
	}
	return err
}

// end closes the part being written.
func (r *recorder) end() {
	if len(r.pending) > 0 {
		r.parts = append(r.parts, r.pending)
		r.pending = nil
	}
}
