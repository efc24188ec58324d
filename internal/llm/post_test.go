package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// TestEndpoint pins how a model's base URL and an endpoint path join: the
// way the provider SDKs joined them, so that no configured baseUrl
// reaches a different path than it did.
func TestEndpoint(t *testing.T) {
	tests := []struct {
		base, path, want string
	}{
		{"https://api.openai.com/v1", "chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/v1/", "chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"http://127.0.0.1:11434/v1", "responses", "http://127.0.0.1:11434/v1/responses"},
		{"https://api.anthropic.com/", "v1/messages", "https://api.anthropic.com/v1/messages"},
		{"https://api.anthropic.com", "v1/messages", "https://api.anthropic.com/v1/messages"},
		// A proxy that mounts Anthropic under a prefix keeps it; a base
		// that already ends in /v1 gets a second one, as before.
		{"https://gw.example/anthropic", "v1/messages", "https://gw.example/anthropic/v1/messages"},
		{"https://gw.example/v1", "v1/messages", "https://gw.example/v1/v1/messages"},
		{"https://openrouter.ai/api/v1", "chat/completions", "https://openrouter.ai/api/v1/chat/completions"},
		// A query on the base URL does not survive the join.
		{"https://h.example/v1?x=1", "chat/completions", "https://h.example/v1/chat/completions"},
		// An escaped slash in the base path is unescaped, as the SDKs did.
		{"https://h.example/a%2Fb", "responses", "https://h.example/a/b/responses"},
	}
	for _, tt := range tests {
		got, err := llm.Endpoint(tt.base, tt.path)
		if err != nil || got != tt.want {
			t.Errorf("Endpoint(%q, %q) = %q, %v; want %q", tt.base, tt.path, got, err, tt.want)
		}
	}
	if _, err := llm.Endpoint("http://[::1", "x"); err == nil {
		t.Error("a malformed base URL was accepted")
	}
}

func TestPostJSON(t *testing.T) {
	type seen struct {
		method, path string
		header       http.Header
		body         map[string]any
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.method, s.path, s.header = r.Method, r.URL.Path, r.Header.Clone()
		_ = json.NewDecoder(r.Body).Decode(&s.body)
		got <- s
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	}))
	defer srv.Close()

	h := http.Header{}
	h.Set("X-Api-Key", "k")
	h.Set("User-Agent", "custom") // the caller's headers win
	resp, err := llm.PostJSON(context.Background(), srv.Client(), srv.URL+"/v1/messages", h, map[string]any{"stream": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Any status comes back for the caller to read.
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusTeapot || string(b) != "short and stout" {
		t.Fatalf("status %d body %q", resp.StatusCode, b)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/v1/messages" || s.body["stream"] != true {
		t.Fatalf("request %s %s %v", s.method, s.path, s.body)
	}
	if s.header.Get("Content-Type") != "application/json" || s.header.Get("X-Api-Key") != "k" || s.header.Get("User-Agent") != "custom" {
		t.Fatalf("headers %v", s.header)
	}
	if e := llm.StatusError(resp); e.Error() != `POST "`+srv.URL+`/v1/messages": 418 I'm a teapot` {
		t.Fatalf("StatusError = %q", e)
	}
}

// TestPostJSONCancel: a request whose context ends before an answer comes
// fails with the context's error, not a network error.
func TestPostJSONCancel(t *testing.T) {
	arrived := make(chan struct{})
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	defer close(stop) // before srv.Close, which waits for the handler
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := llm.PostJSON(ctx, srv.Client(), srv.URL, nil, struct{}{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestPostJSONRefusesUnencodable(t *testing.T) {
	if _, err := llm.PostJSON(context.Background(), nil, "http://127.0.0.1:1/", nil, func() {}); err == nil {
		t.Fatal("a body JSON cannot encode was sent")
	}
}

// TestStreamRequestOpen: an accepted request returns its response, an
// error answer becomes the provider's error, and a failure to build or
// send is worded with the provider's prefix, except an ended context's.
func TestStreamRequestOpen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/fail" {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there now
	answerErr := errors.New("the provider's error")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name      string
		ctx       context.Context
		base      string
		path      string
		prefix    string
		wantBody  string // an accepted request's answer
		wantErr   error  // errors.Is
		wantText  string // the error's text starts so
		unwrapped bool   // the error is wantErr itself
	}{
		{name: "accepted", base: srv.URL + "/v1", path: "ok", wantBody: "/v1/ok"},
		{name: "error answer", base: srv.URL + "/v1", path: "fail", prefix: "p", wantErr: answerErr, unwrapped: true},
		{name: "bad base", base: "http://[::1", path: "x", prefix: "openai-responses", wantText: "openai-responses: base URL"},
		{name: "bad base no prefix", base: "http://[::1", path: "x", wantText: "base URL"},
		{name: "send fails", base: downURL, path: "x", prefix: "openai-responses", wantText: "openai-responses: Post"},
		{name: "send fails no prefix", base: downURL, path: "x", wantText: "Post"},
		{name: "ctx ended", ctx: canceled, base: srv.URL, path: "x", prefix: "p", wantErr: context.Canceled, unwrapped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			req := llm.StreamRequest{
				Base: tt.base, Path: tt.path, Body: struct{}{}, ErrPrefix: tt.prefix,
				AnswerError: func(resp *http.Response) error {
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusTooManyRequests {
						t.Errorf("AnswerError got status %d", resp.StatusCode)
					}
					return answerErr
				},
			}
			resp, err := req.Open(ctx, srv.Client())
			if tt.wantBody != "" {
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if b, _ := io.ReadAll(resp.Body); string(b) != tt.wantBody {
					t.Fatalf("body %q, want %q", b, tt.wantBody)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if tt.unwrapped && err != tt.wantErr {
				t.Fatalf("err %q was wrapped", err)
			}
			if tt.wantText != "" && !strings.HasPrefix(err.Error(), tt.wantText) {
				t.Fatalf("err %q, want it to start %q", err, tt.wantText)
			}
		})
	}
}

// countCloser counts its Close calls.
type countCloser struct{ n int }

func (c *countCloser) Read([]byte) (int, error) { return 0, io.EOF }
func (c *countCloser) Close() error             { c.n++; return nil }

// TestCloseBody: a decoder's Close closes its body once however often it
// is called, and one that never opened is closed at no cost.
func TestCloseBody(t *testing.T) {
	var none io.ReadCloser
	if err := llm.CloseBody(&none); err != nil {
		t.Fatal(err)
	}
	c := &countCloser{}
	var body io.ReadCloser = c
	for range 2 {
		if err := llm.CloseBody(&body); err != nil {
			t.Fatal(err)
		}
	}
	if c.n != 1 || body != nil {
		t.Fatalf("closed %d times, body %v after; want once and nil", c.n, body)
	}
}

// TestBearerHeader: the key as a bearer token, none for an empty key,
// and the model's then the caller's headers over it.
func TestBearerHeader(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		model map[string]string
		opts  map[string]string
		want  map[string]string // "" for absent
	}{
		{"key", "sk-1", nil, nil, map[string]string{"Authorization": "Bearer sk-1", "Accept": "application/json"}},
		{"no key", "", nil, nil, map[string]string{"Authorization": ""}},
		{"model header", "sk-1", map[string]string{"X-Org": "m"}, nil, map[string]string{"X-Org": "m", "Authorization": "Bearer sk-1"}},
		{"caller replaces", "sk-1", map[string]string{"Authorization": "Bearer m"}, map[string]string{"Authorization": "Bearer o"}, map[string]string{"Authorization": "Bearer o"}},
	}
	for _, tt := range tests {
		h := llm.BearerHeader(&llm.Model{Headers: tt.model}, &llm.StreamOptions{APIKey: tt.key, Headers: tt.opts})
		for k, v := range tt.want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got, v)
			}
		}
	}
}
