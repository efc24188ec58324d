package convapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/tool"
)

// Every goroutine of the face (stream handlers, client writers, pipeline
// lanes, runs) must be gone once a test has shut its server down.
// The test binary is also an MCP server over stdio (envMCPServer) when
// started with envServerVar set.
func TestMain(m *testing.M) {
	if os.Getenv(envServerVar) == "1" {
		envMCPServer()
		return
	}
	goleak.VerifyTestMain(m)
}

// wait bounds every wait for an event or a response; it only fires when
// something is broken.
const wait = 20 * time.Second

type fixedModels []*llm.Model

func (f fixedModels) Available() []*llm.Model { return f }

// All is the registry's view: the models above, and one without a key.
func (f fixedModels) All() []registry.Entry {
	var out []registry.Entry
	for _, m := range f {
		out = append(out, registry.Entry{Model: m, Available: true})
	}
	return append(out, registry.Entry{Model: &llm.Model{Provider: "anthropic", ID: "claude-test", Name: "Claude (test)"},
		Reason: "no API key for anthropic: set ANTHROPIC_API_KEY"})
}

// fixture is the face over a layer whose sessions use the faux model and
// the built-in tools, served over real HTTP on 127.0.0.1.
type fixture struct {
	t     *testing.T
	faux  *faux.Provider
	layer *server.Server
	face  *Server
	ts    *httptest.Server
	cwd   string
	root  string
	// journal is the file journal, closed after the layer; nil without
	// fixtureOptions.journal.
	journal *pipeline.FileJournal
}

type fixtureOptions struct {
	chunkDelay time.Duration
	token      string
	tokens     server.TokenVerifier // JWTs, as --jwt-secret-file gives
	origins    []string
	limits     server.Limits
	idle       time.Duration
	ping       time.Duration
	stepWait   time.Duration
	mcp        MCPStarter // the conversations' own MCP servers
	logSize    int
	// sandbox is the server's mode; the fixture's sessions get the write
	// check of the mode they run in (no Landlock: bash is not confined).
	sandbox sandbox.Mode
	// root is where sessions, state and the cwd live; "" makes one. A
	// second fixture on the same root is the server after a restart.
	root string
	// journal keeps the command journal in a file, state/journal.jsonl,
	// as agentd serve does; otherwise it is in memory.
	journal bool
	// health is the server's health registry; nil for none.
	health *health.Health
	// log is the server's logger; nil discards.
	log *slog.Logger
	// maxStreams is the event streams one subject may hold; 0 takes
	// the face's default.
	maxStreams int
}

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	root := o.root
	if root == "" {
		root = t.TempDir()
	}
	fx := &fixture{t: t, faux: faux.New(faux.Options{ChunkDelay: o.chunkDelay}), cwd: filepath.Join(root, "cwd"), root: root}
	if err := os.MkdirAll(fx.cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(root, "state")
	var journal pipeline.Journal
	if o.journal {
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		j, err := pipeline.OpenFileJournal(filepath.Join(state, "journal.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		fx.journal, journal = j, j
	}
	layer, err := server.New(server.Config{Journal: journal,
		Builder: server.BuilderFunc(func(spec sessionspec.Spec) (*session.Session, error) {
			env := tool.Env{Cwd: spec.Cwd, TempDir: root, Scope: tool.NewScope()}
			if m, err := sandbox.Choose(o.sandbox, string(spec.Sandbox)); err != nil {
				return nil, err
			} else if m != sandbox.FullAccess {
				env.Sandbox = sandbox.NewBox(sandbox.Policy{Mode: m, Writable: []string{spec.Cwd, root}}, "")
			}
			return session.New(session.Config{
				Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(),
				Stream: fx.faux.Stream, FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq,
				Tools: append(tool.Builtins(env), &slowTool{}), BashEnv: env, EventLogSize: o.logSize,
				CheckpointDir: filepath.Join(root, "checkpoints"),
				// The built-in commands as the engine registers them:
				// gptme's /undo posted as a message runs the registry's.
				Slash: commands.Load(commands.Config{}, spec.Cwd, commands.NewRegistry(commands.Defaults(nil)...)),
			})
		}),
		Cwd: fx.cwd, SessionsDir: filepath.Join(root, "sessions"), StateDir: state, Limits: o.limits, Tokens: o.tokens,
		Sandbox: o.sandbox, Health: o.health, Logger: o.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	face, err := New(layer, Options{Models: fixedModels{faux.Model()}, DefaultModel: faux.Model(), Version: "test",
		Token: o.token, OriginPatterns: o.origins, SessionIdle: o.idle, Ping: o.ping, StepWait: o.stepWait, MCP: o.mcp,
		MaxStreamsPerSubject: o.maxStreams})
	if err != nil {
		t.Fatal(err)
	}
	if err := layer.Start(); err != nil {
		t.Fatal(err)
	}
	fx.layer, fx.face = layer, face
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "not the API", http.StatusTeapot) })
	fx.ts = httptest.NewServer(server.GuardHost(server.HostPolicy{}, face.Handler(mux)))
	t.Cleanup(fx.stop)
	return fx
}

// stop shuts the server down, as on SIGTERM: the layer drains and closes
// its clients, then the HTTP server ends.
func (fx *fixture) stop() {
	_ = fx.layer.Close()
	fx.ts.Close()
	if fx.journal != nil {
		_ = fx.journal.Close()
	}
}

// slowTool is a tool that reports output while it runs and waits for its
// context or for what its arguments say: {"ms": n, "text": "..."}.
type slowTool struct{}

func (*slowTool) Spec() llm.Tool {
	return llm.Tool{Name: "slow", Description: "waits", Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"},"text":{"type":"string"}}}`)}
}

func (*slowTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	var a struct {
		Ms   int    `json:"ms"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(call.Args, &a)
	update(tool.TextResult("started "+a.Text, nil))
	select {
	case <-time.After(time.Duration(a.Ms) * time.Millisecond):
	case <-ctx.Done():
		return tool.Errorf("aborted")
	}
	return tool.TextResult("done "+a.Text, nil)
}

// ---- requests ----

type reply struct {
	status int
	header http.Header
	body   []byte
	m      map[string]any
	list   []any
}

func (r reply) str(k string) string { s, _ := r.m[k].(string); return s }

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request; body is JSON-encoded unless it is a string or
// []byte.
func (fx *fixture) do(method, path string, body any, hdr ...string) reply {
	fx.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			fx.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, fx.ts.URL+path, rd)
	if err != nil {
		fx.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := fx.ts.Client().Do(req)
	if err != nil {
		fx.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &r.m)
	_ = json.Unmarshal(b, &r.list)
	return r
}

// ok is do that requires a 200.
func (fx *fixture) ok(method, path string, body any, hdr ...string) reply {
	fx.t.Helper()
	r := fx.do(method, path, body, hdr...)
	if r.status != http.StatusOK {
		fx.t.Fatalf("%s %s: %s", method, path, r)
	}
	return r
}

// wantErr checks an error reply: its status and its exact message.
func wantErr(t *testing.T, r reply, status int, msg string) {
	t.Helper()
	if r.status != status || r.str("error") != msg {
		t.Errorf("got %s\nwant %d {\"error\": %q}", r, status, msg)
	}
}

// create makes conversation id and returns its attachment (session_id).
func (fx *fixture) create(id string, body any) string {
	fx.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	r := fx.ok("PUT", "/api/v2/conversations/"+id, body)
	if r.str("status") != "ok" || r.str("conversation_id") != id || r.str("session_id") == "" {
		fx.t.Fatalf("PUT: %s", r)
	}
	return r.str("session_id")
}

// ---- event streams ----

type event struct {
	id   string // "" when the frame had no id line
	raw  string
	m    map[string]any
	line []string // the frame's lines
}

func (e event) typ() string { s, _ := e.m["type"].(string); return s }
func (e event) str(k string) string {
	s, _ := e.m[k].(string)
	return s
}
func (e event) seq() uint64 { n, _ := parseEventID(e.id); return n.seq }

// stream is an open event stream read by a goroutine of its own.
type stream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	events  []event
	bad     []string
	ended   bool
	changed chan struct{}
	cursor  int
}

// open opens GET path as an event stream; extra are header pairs.
func (fx *fixture) open(path string, hdr ...string) *stream {
	fx.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", fx.ts.URL+path, nil)
	if err != nil {
		fx.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := fx.ts.Client().Do(req)
	if err != nil {
		cancel()
		fx.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		fx.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	s := &stream{t: fx.t, resp: resp, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go s.read()
	fx.t.Cleanup(s.close)
	return s
}

func (s *stream) read() {
	defer close(s.done)
	br := bufio.NewReader(s.resp.Body)
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			s.mu.Lock()
			s.ended = true
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line != "" {
			lines = append(lines, line)
			continue
		}
		ev := event{line: lines}
		var data []string
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "id: "):
				ev.id = l[4:]
			case strings.HasPrefix(l, "data: "):
				data = append(data, l[6:])
			default:
				s.mu.Lock()
				s.bad = append(s.bad, l)
				s.mu.Unlock()
			}
		}
		ev.raw = strings.Join(data, "\n")
		lines = nil
		s.mu.Lock()
		if json.Unmarshal([]byte(ev.raw), &ev.m) != nil {
			s.bad = append(s.bad, ev.raw)
		}
		s.events = append(s.events, ev)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// close drops the connection and waits for the reader.
func (s *stream) close() {
	s.cancel()
	<-s.done
	s.resp.Body.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		s.t.Errorf("frames that are not id/data lines of one JSON object: %q", s.bad)
	}
}

func (s *stream) snapshot() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event(nil), s.events...)
}

func (s *stream) dump() string {
	var b strings.Builder
	for i, e := range s.snapshot() {
		fmt.Fprintf(&b, "  %3d id=%s %s\n", i, e.id, clip(e.raw, 300))
	}
	return b.String()
}

// next waits for the next event (after the cursor) of type typ, skipping
// the others, and moves the cursor past it.
func (s *stream) next(typ string) event {
	s.t.Helper()
	i, ev, ok := s.find(s.cursor, func(e event) bool { return e.typ() == typ })
	if !ok {
		s.t.Fatalf("no %s event within %v; the stream:\n%s", typ, wait, s.dump())
	}
	s.cursor = i + 1
	return ev
}

func (s *stream) find(from int, pred func(event) bool) (int, event, bool) {
	guard := time.NewTimer(wait)
	defer guard.Stop()
	for {
		s.mu.Lock()
		for i := from; i < len(s.events); i++ {
			if pred(s.events[i]) {
				ev := s.events[i]
				s.mu.Unlock()
				return i, ev, true
			}
		}
		from = len(s.events)
		ch, ended := s.changed, s.ended
		s.mu.Unlock()
		if ended {
			return -1, event{}, false
		}
		select {
		case <-ch:
		case <-guard.C:
			return -1, event{}, false
		}
	}
}

// waitEnded waits for the server to end the stream.
func (s *stream) waitEnded() {
	s.t.Helper()
	guard := time.NewTimer(wait)
	defer guard.Stop()
	for {
		s.mu.Lock()
		ended, ch := s.ended, s.changed
		s.mu.Unlock()
		if ended {
			return
		}
		select {
		case <-ch:
		case <-guard.C:
			s.t.Fatalf("the stream is still open after %v", wait)
		}
	}
}

// maxFrame sets the layer's limit on one inbound frame (a request body).
func maxFrame(n int) server.Limits { return server.Limits{MaxFrameBytes: n} }

var timeZero time.Time
