package main

// End-to-end tests of `agentd rpc`, the drop-in for `pi --mode rpc`: the
// built binary is driven over stdin/stdout against the llmtest wire mock
// answering as the mock pi 0.73.1 was captured against (see
// testdata/rpc/pi-0.73.1/README.md). Every command and event of pi's RPC
// protocol is exercised; the five captured pi transcripts are replayed
// (same commands, same order) and agentd's output is compared with pi's by
// shape (keys, value types, field order) and by event sequence. agentd's
// own output, normalised, is kept in testdata/rpc/*.jsonl:
//
//	go test ./cmd/agentd -run RPC -update    # rewrite the golden files
//
// Synchronisation is on output only (a response, an event); sleeps appear
// nowhere. The mock pauses a stream mid-way (e2eProxy, Script.HangAfter)
// and a shell command signals it started through a FIFO, so every
// interleaving the tests depend on is forced, not hoped for.
//
// Other suites share package main; every name here starts with e2e.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/transcript"
)

var e2eUpdate = flag.Bool("update", false, "rewrite the golden transcripts in testdata/rpc")

// e2eHangGuard bounds every wait for output. It only fires when something is
// broken; it is generous so that a loaded machine never trips it.
const e2eHangGuard = 30 * time.Second

// e2ePiRefDir holds the captured pi transcripts (copied from
// /work/shared/reference/pi-0.73.1 so the suite is self-contained).
const e2ePiRefDir = "testdata/rpc/pi-0.73.1"

// e2eDiffersFromPi fails where agentd answers otherwise than pi 0.73.1
// in a place it once differed (TestRPCOnceDifferedFromPi): each of those
// differences is fixed, and a change that brings one back fails here
// rather than being skipped.
func e2eDiffersFromPi(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf("agentd differs from pi: "+format, args...)
}

// ---------------------------------------------------------------------------
// Ordered JSON: pi's wire order matters (clients and the reference are
// compared field by field), so values are parsed keeping key order.

type e2eObj struct {
	keys []string
	vals map[string]any
}

// e2eParse parses one JSON value keeping object key order; numbers stay
// json.Number so they re-encode byte for byte.
func e2eParse(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := e2eParseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func e2eParseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			o := &e2eObj{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := e2eParseValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := e2eParseValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", tok)
	}
	return tok, nil
}

// e2eEncode writes v compactly, keys in their order, strings as
// JSON.stringify writes them.
func e2eEncode(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case *e2eObj:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			e2eEncodeString(b, k)
			b.WriteByte(':')
			e2eEncode(b, v.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			e2eEncode(b, e)
		}
		b.WriteByte(']')
	case string:
		e2eEncodeString(b, v)
	case json.Number:
		b.WriteString(string(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	default:
		panic(fmt.Sprintf("encodeJSON: %T", v))
	}
}

func e2eEncodeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // the encoder's newline
}

// e2eAt walks a path of object keys and array indices; nil when absent.
func e2eAt(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case *e2eObj:
			v = x.vals[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func e2eStr(v any, path ...string) string {
	s, _ := e2eAt(v, path...).(string)
	return s
}

func e2eHas(v any, path ...string) bool {
	if len(path) == 0 {
		return true
	}
	o, ok := e2eAt(v, path[:len(path)-1]...).(*e2eObj)
	if !ok {
		return false
	}
	_, ok = o.vals[path[len(path)-1]]
	return ok
}

func e2eKind(v any) string {
	switch v.(type) {
	case *e2eObj:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// ---------------------------------------------------------------------------
// Output lines.

type e2eLine struct {
	raw string
	v   any
}

func (l e2eLine) typ() string { return e2eStr(l.v, "type") }

func (l e2eLine) isResponse(id string) bool {
	return l.typ() == "response" && e2eHas(l.v, "id") && e2eStr(l.v, "id") == id
}

func (l e2eLine) String() string { return e2eClip(l.raw, 400) }

func e2eClip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…(%d bytes)", len(s))
}

// e2eSeqKey names a line for sequence comparisons: the event type, with the
// message role, the streaming sub-event or the dialog method; responses as
// response:<command>[!] (! for a failure).
func e2eSeqKey(v any) string {
	t := e2eStr(v, "type")
	switch t {
	case "response":
		k := "response:" + e2eStr(v, "command")
		if b, _ := e2eAt(v, "success").(bool); !b {
			k += "!"
		}
		return k
	case "message_start", "message_end":
		return t + ":" + e2eStr(v, "message", "role")
	case "message_update":
		return t + ":" + e2eStr(v, "assistantMessageEvent", "type")
	case "extension_ui_request":
		return t + ":" + e2eStr(v, "method")
	}
	return t
}

// e2eCollapse merges runs of the same streaming delta: how many deltas a
// stream is cut into is the provider's business, not the protocol's.
func e2eCollapse(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasSuffix(k, "_delta") && len(out) > 0 && out[len(out)-1] == k {
			continue
		}
		out = append(out, k)
	}
	return out
}

// ---------------------------------------------------------------------------
// The mock model: pi's reference script.

var (
	e2eFailRe  = regexp.MustCompile(`FAIL:(\d{3})`)
	e2eCmdRe   = regexp.MustCompile(`(?s)CMD:(.*)$`)
	e2eAskRe   = regexp.MustCompile(`ASK:(\w+)`)
	e2eFlakyRe = regexp.MustCompile(`FLAKY:(\d{3})`)
)

// e2eChatText is the text of an OpenAI chat message's content (a string or
// an array of parts).
func e2eChatText(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

func e2ePrefix(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return string(r)
}

// e2eChunks cuts s into pieces of n runes, as pi's mock streamed them.
func e2eChunks(s string, n int) []string {
	r := []rune(s)
	var out []string
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

func e2eTextScript(s string) wiremock.Script {
	return wiremock.Script{Text: e2eChunks(s, 8)}
}

func e2eToolScript(name string, args any) wiremock.Script {
	a, _ := json.Marshal(args)
	return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "call_mock1", Name: name, Args: append([]string{""}, e2eChunks(string(a), 10)...)}}}
}

// e2eAskArgs are ask_user questions the mock asks for "ASK:<kind>": agentd's
// extension UI dialogs come from the model's questions and from tool
// approvals (pi's come from extensions, which agentd does not have).
var e2eAskArgs = map[string]any{
	"input":   map[string]any{"question": "Enter a value", "kind": "input", "placeholder": "type something..."},
	"editor":  map[string]any{"question": "Edit some text", "kind": "editor", "prefill": "Line 1\nLine 2\nLine 3"},
	"confirm": map[string]any{"question": "Clear session?", "kind": "confirm"},
	"select":  map[string]any{"question": "Pick a colour", "options": []string{"red", "green"}},
	"form":    map[string]any{"question": "Fill in", "fields": []any{map[string]any{"name": "count", "type": "integer", "required": true, "default": 1}}},
}

// ---------------------------------------------------------------------------
// e2eProxy sits between agentd and the mock and can hold a stream after
// a number of frames until the test releases it: "while streaming" made
// deterministic.

type e2eProxy struct {
	upstream string
	srv      *httptest.Server
	client   *http.Client

	mu     sync.Mutex
	pauses []*e2ePause
}

type e2ePause struct {
	match   string // the request body contains this
	after   int    // frames sent before holding
	release chan struct{}
	used    bool
}

func e2eNewProxy(t *testing.T, upstream string) *e2eProxy {
	p := &e2eProxy{upstream: upstream, client: &http.Client{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.mu.Lock()
		for _, ps := range p.pauses {
			select {
			case <-ps.release:
			default:
				close(ps.release)
			}
		}
		p.mu.Unlock()
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

// holdAfter holds the first stream whose request contains match after
// that many server-sent events; closing the returned channel lets it go
// on.
func (p *e2eProxy) holdAfter(match string, frames int) chan struct{} {
	ps := &e2ePause{match: match, after: frames, release: make(chan struct{})}
	p.mu.Lock()
	p.pauses = append(p.pauses, ps)
	p.mu.Unlock()
	return ps.release
}

func (p *e2eProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var hold *e2ePause
	p.mu.Lock()
	for _, ps := range p.pauses {
		if !ps.used && bytes.Contains(body, []byte(ps.match)) {
			ps.used = true
			hold = ps
			break
		}
	}
	p.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	br := bufio.NewReader(resp.Body)
	frames := 0
	var frame []byte
	for {
		l, err := br.ReadBytes('\n')
		frame = append(frame, l...)
		if len(l) > 0 && (string(l) == "\n" || err != nil) {
			if _, werr := w.Write(frame); werr != nil {
				return
			}
			_ = rc.Flush()
			frame = frame[:0]
			frames++
			if hold != nil && frames == hold.after {
				select {
				case <-hold.release:
				case <-r.Context().Done():
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// The environment of one agentd process: temp HOME, cwd, data dir and
// TMPDIR, models.json naming the mock as pi's reference setup did.

type e2eEnv struct {
	t                          *testing.T
	root, home, cwd, data, tmp string
	mock                       *wiremock.Server
	proxy                      *e2eProxy

	mu     sync.Mutex
	tweaks map[string]func(*wiremock.Script) // by the exact last user text
	seen   map[string]int                    // FLAKY: requests per text
}

type e2eOpts struct {
	proxy    bool           // route the model API through an e2eProxy
	settings map[string]any // ~/.agentd/settings.json
	extra    []any          // more models for the mock provider
}

func e2eNewEnv(t *testing.T, o e2eOpts) *e2eEnv {
	t.Helper()
	root := t.TempDir()
	e := &e2eEnv{t: t, root: root, home: filepath.Join(root, "home"), cwd: filepath.Join(root, "work"),
		data: filepath.Join(root, "data"), tmp: filepath.Join(root, "tmp"),
		tweaks: map[string]func(*wiremock.Script){}, seen: map[string]int{}}
	for _, d := range []string{e.home, e.cwd, e.data, e.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.mock = llmtest.NewServer(t)
	e.mock.Handle(e.script)
	baseURL := e.mock.OpenAIURL()
	if o.proxy {
		e.proxy = e2eNewProxy(t, e.mock.URL())
		baseURL = e.proxy.srv.URL + "/v1"
	}
	models := []any{map[string]any{
		"id": "mock-model", "name": "Mock Model", "reasoning": false, "input": []string{"text"},
		"cost":          map[string]float64{"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
		"contextWindow": 128000, "maxTokens": 4096,
		"compat": map[string]bool{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
	}}
	models = append(models, o.extra...)
	writeModels(t, e.home, map[string]any{"providers": map[string]any{
		"mock": map[string]any{"baseUrl": baseURL, "api": "openai-completions", "apiKey": "MOCK_API_KEY", "models": models},
	}})
	if o.settings != nil {
		b, _ := json.MarshalIndent(o.settings, "", "  ")
		if err := os.WriteFile(filepath.Join(e.home, ".agentd", "settings.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// tweak changes the script answering the request whose last message is
// the user text text.
func (e *e2eEnv) tweak(text string, f func(*wiremock.Script)) {
	e.mu.Lock()
	e.tweaks[text] = f
	e.mu.Unlock()
}

// script is pi's reference mock (README.md of the reference), plus
// ASK:<kind> (an ask_user question) and FLAKY:<status> (that status once,
// then an answer) for what pi's transcripts did through extensions.
func (e *e2eEnv) script(r *wiremock.Request) wiremock.Script {
	msgs, _ := r.JSON["messages"].([]any)
	var last map[string]any
	if n := len(msgs); n > 0 {
		last, _ = msgs[n-1].(map[string]any)
	}
	role, _ := last["role"].(string)
	text := e2eChatText(last["content"])
	var s wiremock.Script
	switch {
	case role == "tool":
		s = e2eTextScript("Tool said: " + e2ePrefix(strings.TrimSpace(text), 40))
	case strings.Contains(text, "USE_TOOL"):
		s = e2eToolScript("bash", map[string]string{"command": "echo hello-from-tool"})
	case e2eCmdRe.MatchString(text):
		s = e2eToolScript("bash", map[string]string{"command": e2eCmdRe.FindStringSubmatch(text)[1]})
	case e2eFailRe.MatchString(text):
		code, _ := strconv.Atoi(e2eFailRe.FindStringSubmatch(text)[1])
		return wiremock.Script{Status: code, ErrorType: "api_error", ErrorMessage: fmt.Sprintf("mock failure %d", code)}
	case e2eFlakyRe.MatchString(text) && e.firstTime(text):
		code, _ := strconv.Atoi(e2eFlakyRe.FindStringSubmatch(text)[1])
		return wiremock.Script{Status: code, ErrorType: "api_error", ErrorMessage: fmt.Sprintf("mock failure %d", code)}
	case e2eAskRe.MatchString(text) && e2eAskArgs[e2eAskRe.FindStringSubmatch(text)[1]] != nil:
		s = e2eToolScript("ask_user", e2eAskArgs[e2eAskRe.FindStringSubmatch(text)[1]])
	default:
		s = e2eTextScript("Hello from mock! You said: " + e2ePrefix(text, 60))
	}
	s.Usage = &wiremock.Usage{Input: 42, Output: 7}
	e.mu.Lock()
	f := e.tweaks[text]
	e.mu.Unlock()
	if f != nil && role != "tool" {
		f(&s)
	}
	return s
}

func (e *e2eEnv) firstTime(text string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen[text]++
	return e.seen[text] == 1
}

// writePolicy writes a permission policy and returns its path.
func (e *e2eEnv) writePolicy(policy string) string {
	p := filepath.Join(e.root, "policy.json")
	if err := os.WriteFile(p, []byte(policy), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// e2eNorm turns agentd's output into golden text: the temp roots, ids,
// timestamps and random file names are replaced by stable placeholders.
func (e *e2eEnv) normalizer() *e2eNorm {
	n := &e2eNorm{ids: map[string]map[string]string{}}
	sessions := transcript.SessionDir(filepath.Join(e.data, "sessions"), e.cwd)
	roots := [][2]string{{sessions, "<SESSIONS>"}, {e.data, "<DATA>"}, {e.cwd, "<CWD>"}, {e.home, "<HOME>"},
		{e.tmp, "<TMP>"}, {e.mock.URL(), "<MOCK>"}, {e.root, "<ROOT>"}}
	if e.proxy != nil {
		roots = append(roots, [2]string{e.proxy.srv.URL, "<MOCK>"})
	}
	sort.SliceStable(roots, func(i, j int) bool { return len(roots[i][0]) > len(roots[j][0]) })
	n.roots = roots
	return n
}

// ---------------------------------------------------------------------------
// One agentd rpc process and its stdout.

type e2eProc struct {
	t     *testing.T
	env   *e2eEnv
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	lines   []e2eLine
	bad     []string // stdout lines that are not JSON objects
	changed chan struct{}
	eof     bool
	stderr  e2eSyncBuf

	exited  chan struct{}
	waitErr error

	cursor int // where event waits start
}

type e2eSyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *e2eSyncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *e2eSyncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs `agentd rpc --model mock/mock-model <args>` in the env.
func (e *e2eEnv) start(args ...string) *e2eProc {
	t := e.t
	t.Helper()
	all := append([]string{"rpc", "--model", "mock/mock-model"}, args...)
	cmd := exec.Command(agentdBin, all...)
	cmd.Dir = e.cwd
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data,
		"TMPDIR=" + e.tmp, "MOCK_API_KEY=sk-mock-key", "LANG=C.UTF-8"}
	dieWithTest(cmd)
	p := &e2eProc{t: t, env: e, cmd: cmd, changed: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(stdout)
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *e2eProc) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			complete := b[len(b)-1] == '\n'
			s := strings.TrimSuffix(string(b), "\n")
			v, perr := e2eParse([]byte(s))
			p.mu.Lock()
			if _, isObj := v.(*e2eObj); perr != nil || !isObj || !complete {
				p.bad = append(p.bad, s)
			} else {
				p.lines = append(p.lines, e2eLine{raw: s, v: v})
			}
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	p.waitErr = p.cmd.Wait()
	p.mu.Lock()
	p.eof = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	close(p.exited)
}

func (p *e2eProc) fatalf(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("%s\n--- stdout (last 40 lines) ---\n%s\n--- stderr ---\n%s", fmt.Sprintf(format, args...), p.tail(40), e2eClip(p.stderr.String(), 4000))
}

func (p *e2eProc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines[max(0, len(p.lines)-n):] {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	for _, s := range p.bad {
		fmt.Fprintf(&b, "NOT A JSON OBJECT LINE: %s\n", e2eClip(s, 300))
	}
	return b.String()
}

// send writes one command line: a string is sent as is, anything else as
// its JSON.
func (p *e2eProc) send(cmd any) {
	p.t.Helper()
	var b []byte
	switch c := cmd.(type) {
	case string:
		b = []byte(c)
	case []byte:
		b = c
	default:
		var err error
		if b, err = json.Marshal(c); err != nil {
			p.t.Fatal(err)
		}
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	if _, err := p.stdin.Write(b); err != nil {
		p.fatalf("writing %s: %v", e2eClip(string(b), 200), err)
	}
}

// mark is the number of lines read so far.
func (p *e2eProc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// waitFor returns the first line at index >= from that pred accepts,
// waiting for it.
func (p *e2eProc) waitFor(from int, what string, pred func(e2eLine) bool) (int, e2eLine) {
	p.t.Helper()
	guard := time.NewTimer(e2eHangGuard)
	defer guard.Stop()
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if pred(p.lines[i]) {
				l := p.lines[i]
				p.mu.Unlock()
				return i, l
			}
		}
		from = len(p.lines)
		ch, eof := p.changed, p.eof
		p.mu.Unlock()
		if eof {
			p.fatalf("stdout ended (exit: %v) while waiting for %s", p.waitErr, what)
		}
		select {
		case <-ch:
		case <-guard.C:
			p.fatalf("hang guard: no %s within %v", what, e2eHangGuard)
		}
	}
}

// resp waits for the response with id (anywhere in the output).
func (p *e2eProc) resp(id string) *e2eObj {
	p.t.Helper()
	_, l := p.waitFor(0, "response "+id, func(l e2eLine) bool { return l.isResponse(id) })
	return l.v.(*e2eObj)
}

// call sends cmd (which carries "id") and waits for its response.
func (p *e2eProc) call(cmd string) *e2eObj {
	p.t.Helper()
	v, err := e2eParse([]byte(cmd))
	if err != nil || e2eStr(v, "id") == "" {
		p.t.Fatalf("call needs a JSON command with an id: %s", cmd)
	}
	p.send(cmd)
	return p.resp(e2eStr(v, "id"))
}

// ok is call that requires success.
func (p *e2eProc) ok(cmd string) *e2eObj {
	p.t.Helper()
	r := p.call(cmd)
	if b, _ := e2eAt(r, "success").(bool); !b {
		p.fatalf("%s failed: %s", cmd, e2eStr(r, "error"))
	}
	return r
}

// event waits for the next line of type typ (with the role, sub-event or
// method after a colon, as e2eSeqKey names lines) after the cursor, and
// moves the cursor past it.
func (p *e2eProc) event(key string) *e2eObj {
	p.t.Helper()
	i, l := p.waitFor(p.cursor, key, func(l e2eLine) bool {
		k := e2eSeqKey(l.v)
		return k == key || strings.HasPrefix(k, key+":")
	})
	p.cursor = i + 1
	return l.v.(*e2eObj)
}

// eventWhere waits for the next line after the cursor that pred accepts.
func (p *e2eProc) eventWhere(what string, pred func(v any) bool) *e2eObj {
	p.t.Helper()
	i, l := p.waitFor(p.cursor, what, func(l e2eLine) bool { return pred(l.v) })
	p.cursor = i + 1
	return l.v.(*e2eObj)
}

// snapshot returns the lines read so far.
func (p *e2eProc) snapshot() []e2eLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]e2eLine(nil), p.lines...)
}

// close ends stdin and requires a clean exit; it returns the whole output.
func (p *e2eProc) close() []e2eLine {
	p.t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(e2eHangGuard):
		p.fatalf("agentd did not exit within %v of stdin closing", e2eHangGuard)
	}
	if p.waitErr != nil {
		p.fatalf("agentd exited with %v", p.waitErr)
	}
	p.mu.Lock()
	bad := p.bad
	p.mu.Unlock()
	if len(bad) > 0 {
		p.fatalf("stdout has %d lines that are not complete JSON objects, first: %s", len(bad), e2eClip(bad[0], 300))
	}
	return p.snapshot()
}

// fifo makes a named pipe in the env; open waits (bounded) for a writer
// and returns what it wrote: the signal that a shell command is running.
func (e *e2eEnv) fifo(name string) (path string, wait func()) {
	path = filepath.Join(e.root, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path, func() {
		e.t.Helper()
		done := make(chan error, 1)
		go func() {
			f, err := os.Open(path) // blocks until the command opens it to write
			if err == nil {
				_, err = io.ReadAll(f)
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				e.t.Fatal(err)
			}
		case <-time.After(e2eHangGuard):
			e.t.Fatalf("hang guard: nothing opened %s", path)
		}
	}
}

// ---------------------------------------------------------------------------
// Golden files.

type e2eNorm struct {
	roots [][2]string
	ids   map[string]map[string]string
}

var (
	e2eUUIDRe     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	e2eFileTimeRe = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z`)
	e2eBashLogRe  = regexp.MustCompile(`agentd-spill-\d+\.\d+-\d+/bash-\d+\.log`)
)

func (n *e2eNorm) id(cat, v string) string {
	m := n.ids[cat]
	if m == nil {
		m = map[string]string{}
		n.ids[cat] = m
	}
	if p, ok := m[v]; ok {
		return p
	}
	p := fmt.Sprintf("<%s-%d>", cat, len(m)+1)
	m[v] = p
	return p
}

func (n *e2eNorm) normStr(s string) string {
	for _, r := range n.roots {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	s = e2eUUIDRe.ReplaceAllStringFunc(s, func(u string) string { return n.id("uuid", u) })
	s = e2eFileTimeRe.ReplaceAllString(s, "<time>")
	s = e2eBashLogRe.ReplaceAllStringFunc(s, func(f string) string { return n.id("bash-log", f) })
	return s
}

// value normalises v, the value of key in an object of type typ.
func (n *e2eNorm) value(typ, key string, v any) any {
	switch v := v.(type) {
	case *e2eObj:
		t := typ
		if s, ok := v.vals["type"].(string); ok {
			t = s
		}
		out := &e2eObj{keys: v.keys, vals: map[string]any{}}
		for _, k := range v.keys {
			out.vals[k] = n.value(t, k, v.vals[k])
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = n.value(typ, key, e)
		}
		return out
	case json.Number:
		if key == "timestamp" {
			return json.Number("0")
		}
		return v
	case string:
		switch {
		case key == "entryId" || key == "firstKeptEntryId":
			return n.id("entry", v)
		case key == "id" && typ == "extension_ui_request":
			return n.id("ui", v)
		}
		return n.normStr(v)
	}
	return v
}

func (n *e2eNorm) normLine(l e2eLine) string {
	var b bytes.Buffer
	e2eEncode(&b, n.value("", "", l.v))
	return b.String()
}

// e2eGolden compares agentd's normalised output with
// testdata/rpc/<name>.jsonl, or rewrites it with -update.
func e2eGolden(t *testing.T, e *e2eEnv, name string, lines []e2eLine) {
	t.Helper()
	n := e.normalizer()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(n.normLine(l))
		b.WriteByte('\n')
	}
	got := b.String()
	path := filepath.Join("testdata", "rpc", name+".jsonl")
	if *e2eUpdate {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (run go test ./cmd/agentd -run RPC -update)", err)
	}
	if got == string(want) {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s differs from agentd's output at line %d (%d lines now, %d in the golden file; -update rewrites it):\n got: %s\nwant: %s\nsequence now:\n%s",
				path, i+1, len(gl)-1, len(wl)-1, e2eClip(g, 600), e2eClip(w, 600), strings.Join(e2eCollapse(e2eKeys(lines)), " "))
		}
	}
}

func e2eKeys(lines []e2eLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, e2eSeqKey(l.v))
	}
	return out
}

// ---------------------------------------------------------------------------
// Comparison with pi's transcripts.

// e2eLoadPi reads one of pi's captured transcripts, without the driver's
// step markers.
func e2eLoadPi(t *testing.T, name string) []e2eLine {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e2ePiRefDir, name))
	if err != nil {
		t.Fatalf("pi reference: %v", err)
	}
	var out []e2eLine
	for _, s := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		v, err := e2eParse([]byte(s))
		if err != nil {
			t.Fatalf("pi reference %s: %v", name, err)
		}
		if e2eHas(v, "__driver_step") {
			continue
		}
		out = append(out, e2eLine{raw: s, v: v})
	}
	return out
}

// e2eShapeDiff lists where got's shape differs from ref's: keys present on
// one side only, a different value type, keys in another order. Array
// elements are compared with the reference element of the same index
// (same lengths) or else of the same role/type. skip names paths
// (dotted, [] for any element) whose differences are expected.
func e2eShapeDiff(path string, ref, got any, skip func(path string) bool) []string {
	if skip != nil && skip(path) {
		return nil
	}
	if e2eKind(ref) != e2eKind(got) {
		return []string{fmt.Sprintf("%s: pi has %s, agentd %s", path, e2eKind(ref), e2eKind(got))}
	}
	var out []string
	switch r := ref.(type) {
	case *e2eObj:
		g := got.(*e2eObj)
		var common []string
		for _, k := range r.keys {
			if _, ok := g.vals[k]; !ok {
				if skip == nil || !skip(path+"."+k) {
					out = append(out, fmt.Sprintf("%s.%s: missing in agentd (pi: %s)", path, k, e2eClip(e2eKind(r.vals[k]), 40)))
				}
				continue
			}
			common = append(common, k)
		}
		for _, k := range g.keys {
			if _, ok := r.vals[k]; !ok && (skip == nil || !skip(path+"."+k)) {
				out = append(out, fmt.Sprintf("%s.%s: only in agentd (%s)", path, k, e2eKind(g.vals[k])))
			}
		}
		var gotOrder []string
		for _, k := range g.keys {
			if _, ok := r.vals[k]; ok {
				gotOrder = append(gotOrder, k)
			}
		}
		if strings.Join(common, ",") != strings.Join(gotOrder, ",") && (skip == nil || !skip(path+"#order")) {
			out = append(out, fmt.Sprintf("%s: key order pi [%s], agentd [%s]", path, strings.Join(common, ","), strings.Join(gotOrder, ",")))
		}
		for _, k := range common {
			out = append(out, e2eShapeDiff(path+"."+k, r.vals[k], g.vals[k], skip)...)
		}
	case []any:
		g := got.([]any)
		for i, ge := range g {
			var re any
			found := false
			if len(g) == len(r) {
				re, found = r[i], true
			} else {
				d := e2eDiscriminator(ge)
				for _, x := range r {
					if e2eDiscriminator(x) == d {
						re, found = x, true
						break
					}
				}
			}
			if found {
				out = append(out, e2eShapeDiff(path+"[]", re, ge, skip)...)
			}
		}
	}
	return e2eDedupe(out)
}

func e2eDiscriminator(v any) string {
	if s := e2eStr(v, "role"); s != "" {
		return "role:" + s
	}
	if s := e2eStr(v, "id"); s != "" {
		return "id:" + s
	}
	return "type:" + e2eStr(v, "type")
}

func e2eDedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// e2eCompare says how a scenario's output is compared with pi's.
type e2eCompare struct {
	ref string // file name in e2ePiRefDir
	// skip are shape paths whose differences are expected, with why.
	skip map[string]string
	// refFilter drops reference lines agentd cannot produce (pi's demo
	// extension's notifications); gotFilter drops agentd lines.
	refFilter, gotFilter func(v any) bool
	// run, when set, cuts the reference to the run started by the prompt
	// with this id: its response to its agent_end.
	run string
}

// e2eCompareWithPi checks that agentd answered every command of the pi
// transcript with a response of the same shape, and produced the same
// sequence of events and responses (streaming deltas collapsed), each
// event of the same shape as pi's.
func e2eCompareWithPi(t *testing.T, c e2eCompare, got []e2eLine) {
	t.Helper()
	ref := e2eLoadPi(t, c.ref)
	if c.run != "" {
		ref = e2eUntilAgentEnd(ref, c.run)
	}
	var skips []string
	for p := range c.skip {
		skips = append(skips, p)
	}
	skip := func(path string) bool {
		for _, p := range skips {
			for _, q := range []string{p, p + ".*", p + "[]*", p + "#*"} {
				if e2eGlob(q, path) {
					return true
				}
			}
		}
		return false
	}
	refIDs := map[string]bool{}
	var refLines, gotLines []e2eLine
	for _, l := range ref {
		if c.refFilter != nil && !c.refFilter(l.v) {
			continue
		}
		if l.typ() == "response" && e2eHas(l.v, "id") {
			refIDs[e2eStr(l.v, "id")] = true
		}
		refLines = append(refLines, l)
	}
	for _, l := range got {
		if l.typ() == "response" && e2eHas(l.v, "id") && !refIDs[e2eStr(l.v, "id")] {
			continue // a command of agentd's scenario that pi's driver did not send
		}
		if c.gotFilter != nil && !c.gotFilter(l.v) {
			continue
		}
		gotLines = append(gotLines, l)
	}

	// Responses, by id; id-less ones (parse errors, unknown commands) in order.
	var diffs []string
	var gotAnon []e2eLine
	for _, l := range gotLines {
		if l.typ() == "response" && !e2eHas(l.v, "id") {
			gotAnon = append(gotAnon, l)
		}
	}
	anon := 0
	for _, r := range refLines {
		if r.typ() != "response" {
			continue
		}
		var g *e2eLine
		if id := e2eStr(r.v, "id"); e2eHas(r.v, "id") {
			for i := range gotLines {
				if gotLines[i].isResponse(id) {
					g = &gotLines[i]
					break
				}
			}
			if g == nil {
				diffs = append(diffs, fmt.Sprintf("no agentd response with id %q (pi: %s)", id, e2eClip(r.raw, 200)))
				continue
			}
		} else {
			if anon >= len(gotAnon) {
				diffs = append(diffs, fmt.Sprintf("no agentd response for id-less %s", e2eClip(r.raw, 200)))
				continue
			}
			g = &gotAnon[anon]
			anon++
		}
		label := "response " + e2eStr(r.v, "id") + " (" + e2eStr(r.v, "command") + ")"
		diffs = append(diffs, e2eShapeDiff(label, r.v, g.v, skip)...)
	}

	// Events: the sequences, then the shapes of the lines they pair up.
	rl, gl := e2eCollapseLines(refLines), e2eCollapseLines(gotLines)
	rs, gs := e2eKeys(rl), e2eKeys(gl)
	if strings.Join(rs, " ") != strings.Join(gs, " ") {
		t.Errorf("event sequence differs from pi's %s (deltas collapsed)\n%s", c.ref, e2eSideBySide(rs, gs))
	}
	for _, pr := range e2eAlign(rs, gs) {
		r, g := rl[pr[0]], gl[pr[1]]
		if r.typ() == "response" {
			continue
		}
		diffs = append(diffs, e2eShapeDiff(e2eSeqKey(r.v), r.v, g.v, skip)...)
	}
	if diffs = e2eDedupe(diffs); len(diffs) > 0 {
		t.Errorf("shapes differ from pi's %s:\n  %s", c.ref, strings.Join(diffs, "\n  "))
	}
}

// e2eGlob matches s against pattern, where * stands for any run of
// characters.
func e2eGlob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, part := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, part)
		}
		j := strings.Index(s, part)
		if j < 0 {
			return false
		}
		s = s[j+len(part):]
	}
	return true
}

// e2eAlign pairs equal elements of a and b along a longest common
// subsequence.
func e2eAlign(a, b []string) [][2]int {
	n, m := len(a), len(b)
	l := make([][]int, n+1)
	for i := range l {
		l[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out [][2]int
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case a[i] == b[j]:
			out = append(out, [2]int{i, j})
			i, j = i+1, j+1
		case l[i+1][j] >= l[i][j+1]:
			i++
		default:
			j++
		}
	}
	return out
}

// e2eCollapseLines keeps the first line of each run e2eCollapse merges.
func e2eCollapseLines(ls []e2eLine) []e2eLine {
	var out []e2eLine
	prev := ""
	for _, l := range ls {
		k := e2eSeqKey(l.v)
		if strings.HasSuffix(k, "_delta") && k == prev {
			continue
		}
		prev = k
		out = append(out, l)
	}
	return out
}

func e2eSideBySide(a, b []string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "  %-4s %-40s %s\n", "#", "pi", "agentd")
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		mark := " "
		if x != y {
			mark = "≠"
		}
		fmt.Fprintf(&s, "%s %-4d %-40s %s\n", mark, i, x, y)
	}
	return s.String()
}

// Expected shape differences, with the reason for each. Paths are
// response labels or event keys, then dotted keys; "*." matches the key
// anywhere.
var (
	// pi leaks two internal fields of its OpenAI-completions stream
	// parser into partial tool calls; they are not part of the protocol
	// (rpc.md's types have neither).
	e2eSkipPiInternals = map[string]string{"*.partialArgs": "pi internal", "*.streamIndex": "pi internal"}
)

func e2eMerge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Assertions.

func e2eWantSuccess(t *testing.T, r *e2eObj) {
	t.Helper()
	if b, _ := e2eAt(r, "success").(bool); !b {
		t.Fatalf("command failed: %s", e2eJSON(r))
	}
}

func e2eWantFailure(t *testing.T, r *e2eObj, substr string) {
	t.Helper()
	if b, _ := e2eAt(r, "success").(bool); b || !strings.Contains(e2eStr(r, "error"), substr) {
		t.Fatalf("want a failure with %q, got %s", substr, e2eJSON(r))
	}
}

func e2eJSON(v any) string {
	var b bytes.Buffer
	e2eEncode(&b, v)
	return e2eClip(b.String(), 600)
}

func e2eEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func e2eNum(v any, path ...string) float64 {
	n, _ := e2eAt(v, path...).(json.Number)
	f, _ := n.Float64()
	return f
}

// ---------------------------------------------------------------------------
// pi transcript 1: state, a prompt, a prompt with a tool call, direct
// bash, stats, messages, commands, an unknown command, a bare JSON string.

func TestRPCPiTranscript1(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session")

	st := p.ok(`{"id":"s1","type":"get_state"}`)
	e2eEqual(t, "model id", e2eStr(st, "data", "model", "id"), "mock-model")
	e2eEqual(t, "thinkingLevel", e2eStr(st, "data", "thinkingLevel"), "off")
	e2eEqual(t, "sessionFile present", e2eHas(st, "data", "sessionFile"), false)

	p.ok(`{"id":"p1","type":"prompt","message":"Say hi"}`)
	end := p.event("agent_end")
	e2eEqual(t, "answer", e2eStr(end, "messages", "1", "content", "0", "text"), "Hello from mock! You said: Say hi")
	e2eEqual(t, "cost", string(e2eAt(end, "messages", "1", "usage", "cost", "total").(json.Number)), "0.000056")

	p.ok(`{"id":"p2","type":"prompt","message":"USE_TOOL please run something"}`)
	te := p.event("tool_execution_end")
	e2eEqual(t, "tool output", e2eStr(te, "result", "content", "0", "text"), "hello-from-tool\n")
	end = p.event("agent_end")
	e2eEqual(t, "final answer", e2eStr(end, "messages", "3", "content", "0", "text"), "Tool said: hello-from-tool")

	b := p.ok(`{"id":"b1","type":"bash","command":"echo direct-bash"}`)
	e2eEqual(t, "bash output", e2eStr(b, "data", "output"), "direct-bash\n")
	stats := p.ok(`{"id":"st","type":"get_session_stats"}`)
	e2eEqual(t, "tool calls", e2eNum(stats, "data", "toolCalls"), 1)
	e2eEqual(t, "input tokens", e2eNum(stats, "data", "tokens", "input"), 126)
	msgs := p.ok(`{"id":"m1","type":"get_messages"}`)
	ms := e2eAt(msgs, "data", "messages").([]any)
	e2eEqual(t, "messages", len(ms), 7)
	e2eEqual(t, "last message role", e2eStr(ms[6], "role"), "bashExecution")
	p.ok(`{"id":"c1","type":"get_commands"}`)
	p.send(`{"id":"u1","type":"no_such_command"}`)
	p.send(`"hello"`)
	lt := p.ok(`{"id":"lt","type":"get_last_assistant_text"}`)
	e2eEqual(t, "last text", e2eStr(lt, "data", "text"), "Tool said: hello-from-tool")
	out := p.close()

	for _, l := range out {
		if l.typ() == "response" && e2eStr(l.v, "command") == "no_such_command" {
			e2eEqual(t, "unknown command response", l.raw, `{"type":"response","command":"no_such_command","success":false,"error":"Unknown command: no_such_command"}`)
		}
	}
	e2eWantLine(t, out, `{"type":"response","success":false,"error":"Unknown command: undefined"}`)
	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript.jsonl", skip: e2eSkipPiInternals}, out)
	e2eGolden(t, e, "transcript1", out)
}

func e2eWantLine(t *testing.T, lines []e2eLine, raw string) {
	t.Helper()
	for _, l := range lines {
		if l.raw == raw {
			return
		}
	}
	t.Fatalf("no output line %s", raw)
}

// ---------------------------------------------------------------------------
// pi transcript 2: a persisted session; steer and follow_up while
// streaming, abort, name, fork messages, compact, stats, export, thinking
// and model cycling, a parse error, fork, clone, new_session.

func TestRPCPiTranscript2(t *testing.T) {
	t.Parallel()
	// keepRecentTokens 1 makes both compact the same part of this small
	// session (compact_small_session checks the default).
	e := e2eNewEnv(t, e2eOpts{proxy: true, settings: map[string]any{"compaction": map[string]any{"keepRecentTokens": 1}}})
	release := e.proxy.holdAfter("first long prompt", 2) // the role chunk, the first delta
	e.tweak("prompt to abort", func(s *wiremock.Script) { s.HangAfter = 1 })
	p := e.start()

	// prompt + steer + follow_up while streaming: the stream is held after
	// its first delta until the queue is set up.
	p.ok(`{"id":"p1","type":"prompt","message":"first long prompt"}`)
	p.event("message_update:text_delta")
	e2eWantFailure(t, p.call(`{"id":"p1b","type":"prompt","message":"a prompt while streaming"}`),
		"Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.")
	p.ok(`{"id":"s1","type":"steer","message":"steer message"}`)
	p.ok(`{"id":"f1","type":"follow_up","message":"follow-up message"}`)
	gs := p.ok(`{"id":"gs","type":"get_state"}`)
	e2eEqual(t, "isStreaming", e2eAt(gs, "data", "isStreaming"), true)
	e2eEqual(t, "pendingMessageCount", e2eNum(gs, "data", "pendingMessageCount"), 2)
	// pi: 1, the streaming message is not in the conversation yet
	// (TestRPCOnceDifferedFromPi/message_count_while_streaming).
	sessionFile := e2eStr(gs, "data", "sessionFile")
	if !strings.HasPrefix(sessionFile, filepath.Join(e.data, "sessions")) {
		t.Fatalf("sessionFile %q is not under AGENTD_DATA_DIR", sessionFile)
	}
	close(release)
	end := p.event("agent_end")
	var texts []string
	for _, m := range e2eAt(end, "messages").([]any) {
		texts = append(texts, e2eStr(m, "content", "0", "text"))
	}
	e2eEqual(t, "run", strings.Join(texts, " | "), "first long prompt | Hello from mock! You said: first long prompt | steer message | Hello from mock! You said: steer message | follow-up message | Hello from mock! You said: follow-up message")

	// abort mid-stream: the mock stops after the first delta and holds
	// the connection.
	p.ok(`{"id":"p2","type":"prompt","message":"prompt to abort"}`)
	p.event("message_update:text_delta")
	p.ok(`{"id":"a1","type":"abort"}`)
	end = p.event("agent_end")
	e2eEqual(t, "aborted stopReason", e2eStr(end, "messages", "1", "stopReason"), "aborted")
	e2eEqual(t, "aborted partial text", e2eStr(end, "messages", "1", "content", "0", "text"), "Hello fr")

	// session name, fork messages, compact
	p.ok(`{"id":"n1","type":"set_session_name","name":"my test session"}`)
	fm := p.ok(`{"id":"fm","type":"get_fork_messages"}`)
	var forkTexts []string
	for _, m := range e2eAt(fm, "data", "messages").([]any) {
		forkTexts = append(forkTexts, e2eStr(m, "text"))
	}
	e2eEqual(t, "fork messages", strings.Join(forkTexts, " | "), "first long prompt | steer message | follow-up message | prompt to abort")
	cp := p.ok(`{"id":"cp","type":"compact"}`)
	if !strings.HasPrefix(e2eStr(cp, "data", "summary"), "Hello from mock! You said: ") {
		t.Fatalf("compaction summary is not the mock's answer: %s", e2eJSON(cp))
	}
	p.ok(`{"id":"st","type":"get_session_stats"}`)
	gs2 := p.ok(`{"id":"gs2","type":"get_state"}`)
	e2eEqual(t, "sessionName", e2eStr(gs2, "data", "sessionName"), "my test session")
	export := filepath.Join(e.cwd, "export-test.html")
	ex := p.ok(fmt.Sprintf(`{"id":"ex","type":"export_html","outputPath":%q}`, export))
	e2eEqual(t, "export path", e2eStr(ex, "data", "path"), export)
	if html, err := os.ReadFile(export); err != nil || !bytes.Contains(html, []byte("first long prompt")) {
		t.Fatalf("exported HTML: %v, %d bytes without the conversation", err, len(html))
	}

	// thinking + model cycle. mock-model does not reason: the level stays
	// off and there is nothing to cycle.
	p.ok(`{"id":"t1","type":"set_thinking_level","level":"high"}`)
	t2 := p.ok(`{"id":"t2","type":"cycle_thinking_level"}`)
	e2eEqual(t, "cycle_thinking_level data", e2eKind(e2eAt(t2, "data")), "null")
	cm := p.ok(`{"id":"cm","type":"cycle_model"}`)
	if m := e2eAt(cm, "data"); m != nil {
		// agentd's offline faux/echo model is always available, so there
		// are two models to cycle through where pi had one: cycle back.
		e2eEqual(t, "cycled to", e2eStr(m, "model", "provider")+"/"+e2eStr(m, "model", "id"), "faux/echo")
		back := p.ok(`{"id":"x-cm","type":"cycle_model"}`)
		e2eEqual(t, "cycled back to", e2eStr(back, "data", "model", "id"), "mock-model")
	}
	p.ok(`{"id":"am","type":"get_available_models"}`)
	e2eWantFailure(t, p.call(`{"id":"sm","type":"set_model","provider":"mock","modelId":"nope"}`), "Model not found: mock/nope")
	mark := p.mark()
	p.send(`{"type":"get_`)
	_, perr := p.waitFor(mark, "parse error", func(l e2eLine) bool { return e2eStr(l.v, "command") == "parse" })
	if !strings.HasPrefix(e2eStr(perr.v, "error"), "Failed to parse command: ") || e2eHas(perr.v, "id") {
		t.Fatalf("parse error response %s", perr.raw)
	}

	// fork + clone + new_session
	firstID := e2eStr(fm, "data", "messages", "0", "entryId")
	fk := p.ok(fmt.Sprintf(`{"id":"fk","type":"fork","entryId":%q}`, firstID))
	e2eEqual(t, "fork text", e2eStr(fk, "data", "text"), "first long prompt")
	// pi 0.73.1 answered this clone with "Entry <id> not found" (its fork
	// left the runtime pointing at an entry of the old file); agentd
	// clones the (empty) forked branch.
	p.call(`{"id":"cl","type":"clone"}`)
	gs3 := p.ok(`{"id":"gs3","type":"get_state"}`)
	e2eEqual(t, "messages after fork", e2eNum(gs3, "data", "messageCount"), 0)
	if e2eStr(gs3, "data", "sessionFile") == sessionFile {
		t.Fatal("fork kept the session file")
	}
	ns := p.ok(`{"id":"ns","type":"new_session"}`)
	e2eEqual(t, "new_session cancelled", e2eAt(ns, "data", "cancelled"), false)
	gs4 := p.ok(`{"id":"gs4","type":"get_state"}`)
	if e2eStr(gs4, "data", "sessionId") == e2eStr(gs3, "data", "sessionId") {
		t.Fatal("new_session kept the session id")
	}
	out := p.close()

	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript2.jsonl",
		skip: e2eMerge(e2eSkipPiInternals, map[string]string{
			"response cm (cycle_model).data": "faux/echo is always available in agentd",
		}),
		// pi 0.73.1's clone failed here (its fork left it pointing at an
		// entry of the old file): a pi bug, not compared.
		refFilter: func(v any) bool { return !(e2eStr(v, "type") == "response" && e2eStr(v, "id") == "cl") },
	}, out)
	e2eGolden(t, e, "transcript2", out)
}

// ---------------------------------------------------------------------------
// pi transcript 3: the extension UI sub-protocol. pi's dialogs came from a
// demo extension; agentd's come from tool approvals (--policy ... ask) and
// from the model's ask_user questions, on the same wire: an
// extension_ui_request answered by an extension_ui_response.

func TestRPCPiTranscript3(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	policy := e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`)
	// pi's dialogs wait forever, as agentd's do with 0 (the default bounds
	// them and adds a timeout to each request: see TestApprovalTimeout).
	p := e.start("--no-session", "--policy", policy, "--approval-timeout", "0")

	gc := p.ok(`{"id":"gc","type":"get_commands"}`)
	for _, c := range e2eAt(gc, "data", "commands").([]any) {
		// No templates or skills here: only agentd's built-ins.
		e2eEqual(t, "command source", e2eStr(c, "source"), "builtin")
	}

	// A dangerous command: the approval is a select; the client rejects it.
	p.ok(`{"id":"p1","type":"prompt","message":"please CMD:rm -rf ./definitely-not-here-xyz"}`)
	p.event("tool_execution_start")
	req := p.event("extension_ui_request")
	e2eEqual(t, "method", e2eStr(req, "method"), "select")
	e2eEqual(t, "options", e2eJSON(e2eAt(req, "options")), `["Allow","Always allow this tool in this session","Skip","Reject"]`)
	if !strings.Contains(e2eStr(req, "title")+e2eStr(req, "message"), "rm -rf ./definitely-not-here-xyz") {
		t.Fatalf("the approval does not show the command: %s", e2eJSON(req))
	}
	p.send(fmt.Sprintf(`{"type":"extension_ui_response","id":%q,"value":"Reject"}`, e2eStr(req, "id")))
	te := p.event("tool_execution_end")
	e2eEqual(t, "rejected isError", e2eAt(te, "isError"), true)
	end := p.event("agent_end")
	final := e2eStr(end, "messages", "3", "content", "0", "text")
	if !strings.Contains(final, "The user rejected this tool call") {
		t.Fatalf("the model was told %q", final)
	}

	// Questions the model asks: input answered, editor dismissed, confirm declined.
	answer := func(id, kind, response, wantMethod, wantToolSaid string) *e2eObj {
		t.Helper()
		p.ok(fmt.Sprintf(`{"id":%q,"type":"prompt","message":"ASK:%s"}`, id, kind))
		req := p.event("extension_ui_request")
		e2eEqual(t, kind+" method", e2eStr(req, "method"), wantMethod)
		p.send(fmt.Sprintf(`{"type":"extension_ui_response","id":%q,%s}`, e2eStr(req, "id"), response))
		end := p.event("agent_end")
		msgs := e2eAt(end, "messages").([]any)
		e2eEqual(t, kind+": the model was told", e2eStr(msgs[len(msgs)-1], "content", "0", "text"), wantToolSaid)
		return req
	}
	in := answer("ri", "input", `"value":"typed-by-client"`, "input", "Tool said: User answered: typed-by-client")
	e2eEqual(t, "input title", e2eStr(in, "title"), "Enter a value")
	e2eEqual(t, "input placeholder", e2eStr(in, "placeholder"), "type something...")
	ed := answer("re", "editor", `"cancelled":true`, "editor", "Tool said: The user dismissed the question")
	e2eEqual(t, "editor prefill", e2eStr(ed, "prefill"), "Line 1\nLine 2\nLine 3")
	answer("rc", "confirm", `"confirmed":false`, "confirm", "Tool said: User answered: no")
	out := p.close()

	// Compared with pi: the first prompt (approval in place of the demo
	// extension's select), without the demo's fire-and-forget requests.
	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript3.jsonl", run: "p1",
		skip: e2eMerge(e2eSkipPiInternals, map[string]string{
			"extension_ui_request:select.message": "agentd's approval shows the command; pi's demo select had none",
			"*.details":                           "tool-specific details (agentd: the approval outcome)",
		}),
		refFilter: func(v any) bool {
			m := e2eStr(v, "method")
			return e2eStr(v, "type") != "extension_ui_request" || m == "select" || m == "confirm" || m == "input" || m == "editor"
		},
	}, e2eUntilAgentEnd(out, "p1"))
	e2eGolden(t, e, "transcript3", out)
}

// e2eUntilAgentEnd is the output from the response id to the agent_end of
// its run.
func e2eUntilAgentEnd(ls []e2eLine, id string) []e2eLine {
	for i, l := range ls {
		if l.isResponse(id) {
			for j := i; j < len(ls); j++ {
				if ls[j].typ() == "agent_end" {
					return ls[i : j+1]
				}
			}
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// pi transcript 4: HTTP 503 with auto-retry (pi's settings: 2 retries from
// 300 ms), one agent_end per attempt; then a 400 with retry off.

func TestRPCPiTranscript4(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{settings: map[string]any{"retry": map[string]any{"enabled": true, "maxRetries": 2, "baseDelayMs": 300}}})
	p := e.start("--no-session")
	p.ok(`{"id":"p1","type":"prompt","message":"FAIL:503 please"}`)
	rs := p.event("auto_retry_start")
	if e2eNum(rs, "maxAttempts") != 2 || e2eNum(rs, "delayMs") != 300 {
		// Do not wait out agentd's own 2 s, 4 s, 8 s.
		p.ok(`{"id":"x-ar","type":"abort_retry"}`)
		p.event("auto_retry_end")
		p.close()
		e2eDiffersFromPi(t, "settings.json retry.maxRetries/baseDelayMs are ignored: auto_retry_start %s, pi sends maxAttempts 2, delayMs 300 (see TestRPCOnceDifferedFromPi/retry_settings)", e2eJSON(rs))
	}
	e2eEqual(t, "errorMessage", e2eStr(rs, "errorMessage"), "503 mock failure 503")
	rs = p.event("auto_retry_start")
	e2eEqual(t, "second attempt", e2eNum(rs, "attempt"), 2)
	e2eEqual(t, "second delay", e2eNum(rs, "delayMs"), 600)
	re := p.event("auto_retry_end")
	e2eEqual(t, "retry end", e2eJSON(re), `{"type":"auto_retry_end","success":false,"attempt":2,"finalError":"503 mock failure 503"}`)
	p.ok(`{"id":"r0","type":"set_auto_retry","enabled":false}`)
	p.ok(`{"id":"p2","type":"prompt","message":"FAIL:400 bad"}`)
	end := p.event("agent_end")
	e2eEqual(t, "400 error", e2eStr(end, "messages", "1", "errorMessage"), "400 mock failure 400")
	st := p.ok(`{"id":"st","type":"get_state"}`)
	e2eEqual(t, "messageCount", e2eNum(st, "data", "messageCount"), 4)
	out := p.close()
	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript4.jsonl", skip: e2eSkipPiInternals}, out)
	e2eGolden(t, e, "transcript4", out)
}

// ---------------------------------------------------------------------------
// pi transcript 5: abort while a bash tool runs; bash output truncation
// (seq 1 3000); abort_bash.

func TestRPCPiTranscript5(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session")

	p.ok(`{"id":"p1","type":"prompt","message":"CMD:echo start; sleep 5; echo never"}`)
	p.eventWhere("tool output start", func(v any) bool {
		return e2eStr(v, "type") == "tool_execution_update" && strings.Contains(e2eStr(v, "partialResult", "content", "0", "text"), "start")
	})
	p.ok(`{"id":"a1","type":"abort"}`)
	te := p.event("tool_execution_end")
	e2eEqual(t, "aborted tool isError", e2eAt(te, "isError"), true)
	if txt := e2eStr(te, "result", "content", "0", "text"); !strings.HasPrefix(txt, "start\n") || strings.Contains(txt, "never") {
		t.Fatalf("aborted tool output %q", txt)
	}
	p.event("agent_end")

	b1 := p.ok(`{"id":"b1","type":"bash","command":"seq 1 3000"}`)
	e2eEqual(t, "truncated", e2eAt(b1, "data", "truncated"), true)
	full := e2eStr(b1, "data", "fullOutputPath")
	if data, err := os.ReadFile(full); err != nil || !bytes.HasSuffix(data, []byte("\n2999\n3000\n")) || !bytes.HasPrefix(data, []byte("1\n2\n")) {
		t.Fatalf("full output file %q: %v", full, err)
	}
	if !strings.HasPrefix(full, e.tmp) {
		t.Errorf("fullOutputPath %q is not in TMPDIR", full)
	}
	if o := e2eStr(b1, "data", "output"); !strings.HasSuffix(strings.TrimSuffix(o, "\n"), "\n3000") {
		t.Fatalf("truncated output does not end with the last lines: …%q", o[max(0, len(o)-40):])
	}

	// abort_bash: the command tells through a FIFO that it is running.
	fifo, started := e.fifo("bash-started")
	p.send(fmt.Sprintf(`{"id":"b2","type":"bash","command":"echo > %s; sleep 30"}`, fifo))
	started()
	p.ok(`{"id":"ab","type":"abort_bash"}`)
	b2 := p.resp("b2")
	e2eWantSuccess(t, b2)
	e2eEqual(t, "cancelled", e2eAt(b2, "data", "cancelled"), true)
	m := p.ok(`{"id":"m","type":"get_messages"}`)
	msgs := e2eAt(m, "data", "messages").([]any)
	last := msgs[len(msgs)-1]
	e2eEqual(t, "last message", e2eStr(last, "role")+" cancelled="+fmt.Sprint(e2eAt(last, "cancelled")), "bashExecution cancelled=true")
	out := p.close()
	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript5.jsonl", skip: e2eSkipPiInternals}, out)
	e2eGolden(t, e, "transcript5", out)
}

// ---------------------------------------------------------------------------
// Every other command and option of pi 0.73: images, streamingBehavior,
// queue modes, settings that persist, model and thinking changes (with
// thinking_level_changed), names, export, clone, fork, switch_session,
// new_session with a parent.

// e2ePNG is a 1×1 PNG.
const e2ePNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

func TestRPCCommands(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{proxy: true, settings: map[string]any{"compaction": map[string]any{"keepRecentTokens": 1}}})
	holdQueue := e.proxy.holdAfter("hold for the queue", 2)
	holdAll := e.proxy.holdAfter("hold for all", 2)
	holdCompaction := e.proxy.holdAfter("Focus on the steering messages", 2)
	p := e.start()

	lt := p.ok(`{"id":"lt0","type":"get_last_assistant_text"}`)
	e2eEqual(t, "text before any answer", e2eJSON(e2eAt(lt, "data")), `{"text":null}`)
	st := p.ok(`{"id":"gs0","type":"get_state"}`)
	firstFile, firstID := e2eStr(st, "data", "sessionFile"), e2eStr(st, "data", "sessionId")

	// prompt with an image.
	p.cursor = p.mark()
	p.ok(fmt.Sprintf(`{"id":"img","type":"prompt","message":"look at this","images":[{"type":"image","data":%q,"mimeType":"image/png"}]}`, e2ePNG))
	um := p.event("message_start:user")
	e2eEqual(t, "user content", e2eJSON(e2eAt(um, "message", "content")),
		fmt.Sprintf(`[{"type":"text","text":"look at this"},{"type":"image","data":%q,"mimeType":"image/png"}]`, e2ePNG))
	p.event("agent_end")
	e2eWantFailure(t, p.call(`{"id":"img-bad","type":"prompt","message":"x","images":[{"type":"image","data":""}]}`), "images[0]")

	// streamingBehavior on prompt, steer with an image, while the stream is held.
	p.ok(`{"id":"hq","type":"prompt","message":"hold for the queue"}`)
	p.event("message_update:text_delta")
	p.ok(`{"id":"sb-steer","type":"prompt","message":"steered via prompt","streamingBehavior":"steer"}`)
	q := p.event("queue_update")
	e2eEqual(t, "queue after steer", e2eJSON(q), `{"type":"queue_update","steering":["steered via prompt"],"followUp":[]}`)
	p.ok(`{"id":"sb-follow","type":"prompt","message":"followed up via prompt","streamingBehavior":"followUp"}`)
	q = p.event("queue_update")
	e2eEqual(t, "queue after followUp", e2eJSON(q), `{"type":"queue_update","steering":["steered via prompt"],"followUp":["followed up via prompt"]}`)
	e2eWantFailure(t, p.call(`{"id":"sb-bad","type":"prompt","message":"x","streamingBehavior":"sideways"}`), "streamingBehavior")
	p.ok(fmt.Sprintf(`{"id":"steer-img","type":"steer","message":"steer with image","images":[{"type":"image","data":%q,"mimeType":"image/png"}]}`, e2ePNG))
	p.event("queue_update")
	close(holdQueue)
	end := p.event("agent_end")
	var users []string
	for _, m := range e2eAt(end, "messages").([]any) {
		if e2eStr(m, "role") == "user" {
			users = append(users, e2eStr(m, "content", "0", "text"))
		}
	}
	// one-at-a-time: each steering message gets its own turn.
	e2eEqual(t, "delivered", strings.Join(users, " | "), "hold for the queue | steered via prompt | steer with image | followed up via prompt")

	// Queue modes: "all" delivers both steering messages in one turn.
	p.ok(`{"id":"sm-all","type":"set_steering_mode","mode":"all"}`)
	p.ok(`{"id":"fm-all","type":"set_follow_up_mode","mode":"all"}`)
	e2eWantFailure(t, p.call(`{"id":"sm-bad","type":"set_steering_mode","mode":"sometimes"}`), "mode")
	e2eWantFailure(t, p.call(`{"id":"fm-bad","type":"set_follow_up_mode"}`), "mode")
	st = p.ok(`{"id":"gs1","type":"get_state"}`)
	e2eEqual(t, "modes", e2eStr(st, "data", "steeringMode")+"/"+e2eStr(st, "data", "followUpMode"), "all/all")
	p.ok(`{"id":"ha","type":"prompt","message":"hold for all"}`)
	p.event("message_update:text_delta")
	p.ok(`{"id":"st-a","type":"steer","message":"first steer"}`)
	p.ok(`{"id":"st-b","type":"steer","message":"second steer"}`)
	close(holdAll)
	p.event("turn_end")
	p.event("turn_start")
	u1 := p.event("message_start:user")
	p.event("message_end:user")
	u2 := p.event("message_start")
	e2eEqual(t, "one turn, both steers", e2eStr(u1, "message", "content", "0", "text")+" + "+e2eStr(u2, "message", "role")+":"+e2eStr(u2, "message", "content", "0", "text"),
		"first steer + user:second steer")
	p.event("agent_end")

	// Settings that persist, as pi's settings.json keys.
	p.ok(`{"id":"ac","type":"set_auto_compaction","enabled":false}`)
	p.ok(`{"id":"ar","type":"set_auto_retry","enabled":false}`)
	e2eWantFailure(t, p.call(`{"id":"ar-bad","type":"set_auto_retry"}`), "enabled")
	st = p.ok(`{"id":"gs2","type":"get_state"}`)
	e2eEqual(t, "autoCompactionEnabled", e2eAt(st, "data", "autoCompactionEnabled"), false)
	var saved struct {
		SteeringMode, FollowUpMode string
		Compaction                 struct{ Enabled *bool }
		Retry                      struct{ Enabled *bool }
	}
	data, err := os.ReadFile(filepath.Join(e.home, ".agentd", "settings.json"))
	if err != nil || json.Unmarshal(data, &saved) != nil || saved.SteeringMode != "all" || saved.FollowUpMode != "all" ||
		saved.Compaction.Enabled == nil || *saved.Compaction.Enabled || saved.Retry.Enabled == nil || *saved.Retry.Enabled {
		t.Fatalf("settings.json: %v\n%s", err, data)
	}

	// Models and thinking: faux/echo reasons (up to xhigh), mock-model does not.
	am := p.ok(`{"id":"am","type":"get_available_models"}`)
	var ids []string
	for _, m := range e2eAt(am, "data", "models").([]any) {
		ids = append(ids, e2eStr(m, "provider")+"/"+e2eStr(m, "id"))
	}
	if !strings.Contains(strings.Join(ids, ","), "mock/mock-model") {
		t.Fatalf("available models %v", ids)
	}
	sm := p.ok(`{"id":"sm","type":"set_model","provider":"faux","modelId":"echo"}`)
	e2eEqual(t, "set_model data", e2eStr(sm, "data", "provider")+"/"+e2eStr(sm, "data", "id"), "faux/echo")
	p.cursor = p.mark()
	p.ok(`{"id":"tl","type":"set_thinking_level","level":"high"}`)
	e2eEqual(t, "thinking event", e2eJSON(p.event("thinking_level_changed")), `{"type":"thinking_level_changed","level":"high"}`)
	ct := p.ok(`{"id":"ct","type":"cycle_thinking_level"}`)
	e2eEqual(t, "cycled to", e2eJSON(e2eAt(ct, "data")), `{"level":"xhigh"}`)
	e2eEqual(t, "thinking event", e2eJSON(p.event("thinking_level_changed")), `{"type":"thinking_level_changed","level":"xhigh"}`)
	ct = p.ok(`{"id":"ct2","type":"cycle_thinking_level"}`)
	e2eEqual(t, "cycled round to", e2eJSON(e2eAt(ct, "data")), `{"level":"off"}`)
	e2eWantFailure(t, p.call(`{"id":"tl-bad","type":"set_thinking_level","level":"enormous"}`), "enormous")
	p.ok(`{"id":"tl2","type":"set_thinking_level","level":"medium"}`)
	st = p.ok(`{"id":"gs3","type":"get_state"}`)
	e2eEqual(t, "thinkingLevel", e2eStr(st, "data", "thinkingLevel"), "medium")
	p.cursor = p.mark()
	p.ok(`{"id":"sm2","type":"set_model","provider":"mock","modelId":"mock-model"}`)
	e2eEqual(t, "clamped", e2eJSON(p.event("thinking_level_changed")), `{"type":"thinking_level_changed","level":"off"}`)
	st = p.ok(`{"id":"gs4","type":"get_state"}`)
	e2eEqual(t, "model, thinking", e2eStr(st, "data", "model", "id")+"/"+e2eStr(st, "data", "thinkingLevel"), "mock-model/off")

	// Names, export, fork messages.
	e2eWantFailure(t, p.call(`{"id":"nm-empty","type":"set_session_name","name":"   "}`), "Session name cannot be empty")
	p.cursor = p.mark()
	p.ok(`{"id":"nm","type":"set_session_name","name":"  commands session  "}`)
	e2eEqual(t, "name event", e2eJSON(p.event("session_info_changed")), `{"type":"session_info_changed","name":"commands session"}`)
	ex := p.ok(`{"id":"ex","type":"export_html"}`)
	if path := e2eStr(ex, "data", "path"); filepath.Dir(path) != e.cwd {
		t.Fatalf("export_html without a path wrote %q, not in the working directory", path)
	} else if html, err := os.ReadFile(path); err != nil || !bytes.Contains(html, []byte("look at this")) {
		t.Fatalf("export: %v", err)
	}
	ex = p.ok(`{"id":"ex2","type":"export_html","outputPath":"sub-export.html"}`)
	e2eEqual(t, "relative export path", e2eStr(ex, "data", "path"), filepath.Join(e.cwd, "sub-export.html"))
	e2eWantFailure(t, p.call(`{"id":"ex-bad","type":"export_html","outputPath":"/nonexistent-dir/x.html"}`), "nonexistent-dir")
	fm := p.ok(`{"id":"fm","type":"get_fork_messages"}`)
	forks := e2eAt(fm, "data", "messages").([]any)
	e2eEqual(t, "fork messages", len(forks), 8)
	lt = p.ok(`{"id":"lt1","type":"get_last_assistant_text"}`)
	e2eEqual(t, "last text", e2eStr(lt, "data", "text"), "Hello from mock! You said: second steer")
	p.ok(`{"id":"gc","type":"get_commands"}`)

	// clone, fork, switch back, new_session with a parent.
	cl := p.ok(`{"id":"cl","type":"clone"}`)
	e2eEqual(t, "clone data", e2eJSON(e2eAt(cl, "data")), `{"cancelled":false}`)
	st = p.ok(`{"id":"gs5","type":"get_state"}`)
	if e2eStr(st, "data", "sessionFile") == firstFile || e2eNum(st, "data", "messageCount") < 10 {
		t.Fatalf("clone: %s", e2eJSON(st))
	}
	e2eWantFailure(t, p.call(`{"id":"fk-bad","type":"fork","entryId":"no-such-entry"}`), "no-such-entry")
	e2eWantFailure(t, p.call(`{"id":"fk-none","type":"fork"}`), "entryId")
	fk := p.ok(fmt.Sprintf(`{"id":"fk","type":"fork","entryId":%q}`, e2eStr(forks[1], "entryId")))
	e2eEqual(t, "fork text", e2eStr(fk, "data", "text"), "hold for the queue")
	st = p.ok(`{"id":"gs6","type":"get_state"}`)
	e2eEqual(t, "messages before the forked prompt", e2eNum(st, "data", "messageCount"), 2)
	sw := p.ok(fmt.Sprintf(`{"id":"sw","type":"switch_session","sessionPath":%q}`, firstFile))
	e2eEqual(t, "switch data", e2eJSON(e2eAt(sw, "data")), `{"cancelled":false}`)
	st = p.ok(`{"id":"gs7","type":"get_state"}`)
	e2eEqual(t, "switched back", e2eStr(st, "data", "sessionId")+" "+e2eStr(st, "data", "sessionName"), firstID+" commands session")
	e2eWantFailure(t, p.call(fmt.Sprintf(`{"id":"sw-bad","type":"switch_session","sessionPath":%q}`, filepath.Join(e.root, "missing.jsonl"))), "missing.jsonl")
	e2eWantFailure(t, p.call(`{"id":"sw-none","type":"switch_session"}`), "sessionPath")

	// compact with instructions; isCompacting while the summary streams.
	before := e2eNum(st, "data", "messageCount")
	p.cursor = p.mark()
	p.send(`{"id":"cp","type":"compact","customInstructions":"Focus on the steering messages"}`)
	e2eEqual(t, "compaction_start", e2eJSON(p.event("compaction_start")), `{"type":"compaction_start","reason":"manual"}`)
	st = p.ok(`{"id":"gs-cp","type":"get_state"}`)
	e2eEqual(t, "isCompacting, isStreaming", fmt.Sprint(e2eAt(st, "data", "isCompacting"), e2eAt(st, "data", "isStreaming")), "true false")
	close(holdCompaction)
	ce := p.event("compaction_end")
	e2eEqual(t, "compaction_end", fmt.Sprintf("%v %v %v %v", e2eStr(ce, "reason"), e2eAt(ce, "aborted"), e2eAt(ce, "willRetry"), e2eHas(ce, "errorMessage")), "manual false false false")
	cp := p.resp("cp")
	e2eWantSuccess(t, cp)
	if !strings.Contains(string(e.mock.LastRequest(t).Body), "Focus on the steering messages") {
		t.Fatal("the summary request does not carry the custom instructions")
	}
	st = p.ok(`{"id":"gs-after-cp","type":"get_state"}`)
	if n := e2eNum(st, "data", "messageCount"); n >= before || e2eAt(st, "data", "isCompacting") != false {
		t.Fatalf("after compact: messageCount %v (was %v), %s", n, before, e2eJSON(st))
	}
	ns := p.ok(fmt.Sprintf(`{"id":"ns","type":"new_session","parentSession":%q}`, firstFile))
	e2eEqual(t, "new_session data", e2eJSON(e2eAt(ns, "data")), `{"cancelled":false}`)
	st = p.ok(`{"id":"gs8","type":"get_state"}`)
	e2eEqual(t, "new session is empty", e2eNum(st, "data", "messageCount"), 0)
	if head, err := os.ReadFile(e2eStr(st, "data", "sessionFile")); err != nil || !bytes.Contains(head, []byte(`"parentSession":`+strconv.Quote(firstFile))) {
		t.Fatalf("the new session file does not name its parent: %v\n%s", err, e2eClip(string(head), 400))
	}
	out := p.close()
	e2eGolden(t, e, "commands", out)
}

// ---------------------------------------------------------------------------
// Auto-retry: abort_retry during the wait, and a retry that succeeds.

func TestRPCRetry(t *testing.T) {
	t.Parallel()
	// pi's retry settings (TestRPCOnceDifferedFromPi/retry_settings).
	e := e2eNewEnv(t, e2eOpts{settings: map[string]any{"retry": map[string]any{"enabled": true, "maxRetries": 2, "baseDelayMs": 300}}})
	p := e.start("--no-session")

	// abort_retry cancels the wait; the run ends with the error.
	p.ok(`{"id":"p1","type":"prompt","message":"FAIL:503 stop retrying"}`)
	p.event("agent_end")
	rs := p.event("auto_retry_start")
	e2eEqual(t, "attempt", e2eNum(rs, "attempt"), 1)
	st := p.ok(`{"id":"gs","type":"get_state"}`)
	e2eEqual(t, "isStreaming while waiting to retry", e2eAt(st, "data", "isStreaming"), true)
	p.ok(`{"id":"ar","type":"abort_retry"}`)
	re := p.event("auto_retry_end")
	e2eEqual(t, "retry end", e2eJSON(re), `{"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"}`)
	st = p.ok(`{"id":"gs2","type":"get_state"}`)
	e2eEqual(t, "isStreaming after abort_retry", e2eAt(st, "data", "isStreaming"), false)
	p.ok(`{"id":"ar2","type":"abort_retry"}`) // nothing to abort: still a success

	// A 503 once, then an answer.
	mark := p.mark()
	p.ok(`{"id":"p2","type":"prompt","message":"FLAKY:503 once"}`)
	p.event("auto_retry_start")
	re = p.event("auto_retry_end")
	e2eEqual(t, "retry end", e2eJSON(re), `{"type":"auto_retry_end","success":true,"attempt":1}`)
	out := p.close()
	var answer string
	for _, l := range out[mark:] {
		if l.typ() == "message_end" && e2eStr(l.v, "message", "stopReason") == "stop" {
			answer = e2eStr(l.v, "message", "content", "0", "text")
		}
	}
	e2eEqual(t, "answer after the retry", answer, "Hello from mock! You said: FLAKY:503 once")
	e2eGolden(t, e, "retry", out)

	t.Run("auto_retry_end_after_message_end", func(t *testing.T) {
		// pi emits auto_retry_end(success) when the successful assistant
		// message ends, before its turn_end and agent_end.
		var keys []string
		for _, l := range out[mark:] {
			keys = append(keys, e2eSeqKey(l.v))
		}
		seq := strings.Join(e2eCollapse(keys), " ")
		if !strings.Contains(seq, "message_end:assistant auto_retry_end turn_end agent_end") {
			e2eDiffersFromPi(t, "auto_retry_end(success) comes after the retried run's agent_end; pi sends it right after the assistant's message_end:\n%s", seq)
		}
	})
}

// ---------------------------------------------------------------------------
// The extension UI sub-protocol in full: every answer to a tool approval
// and every kind of question.

func TestRPCExtensionUI(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	// Without a timeout the dialogs are pi's exactly (the default one is in
	// TestApprovalTimeout).
	p := e.start("--no-session", "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`), "--approval-timeout", "0")

	// run prompts text, answers the dialog it raises with answer (a JSON
	// fragment) and returns the dialog and what the model was told (the
	// mock repeats the first 40 characters of the tool result).
	var result string
	run := func(id, text, answer string) (req *e2eObj, told string) {
		t.Helper()
		p.cursor = p.mark()
		p.ok(fmt.Sprintf(`{"id":%q,"type":"prompt","message":%q}`, id, text))
		req = p.event("extension_ui_request")
		p.send(fmt.Sprintf(`{"type":"extension_ui_response","id":%q,%s}`, e2eStr(req, "id"), answer))
		end := p.event("agent_end")
		msgs := e2eAt(end, "messages").([]any)
		result = e2eStr(msgs[2], "content", "0", "text")
		return req, e2eStr(msgs[len(msgs)-1], "content", "0", "text")
	}
	_, told := run("allow", "CMD:echo allowed", `"value":"Allow"`)
	e2eEqual(t, "Allow", told, "Tool said: allowed")
	_, told = run("confirm", "CMD:echo confirmed", `"confirmed":true`)
	e2eEqual(t, "confirmed:true", told, "Tool said: confirmed")
	run("skip", "CMD:echo skipped", `"value":"Skip"`)
	e2eEqual(t, "Skip", result, "Tool call skipped by the user")
	run("feedback", "CMD:echo feedback", `"value":"use ls instead"`)
	e2eEqual(t, "free text", result, "The user rejected this tool call: use ls instead")
	run("dismiss", "CMD:echo dismissed", `"cancelled":true`)
	e2eEqual(t, "cancelled", result, "The user rejected this tool call")
	req, told := run("sel", "ASK:select", `"value":"green"`)
	e2eEqual(t, "select", e2eJSON(req)[strings.Index(e2eJSON(req), `"method"`):], `"method":"select","title":"Pick a colour","options":["red","green"]}`)
	e2eEqual(t, "select answer", told, `Tool said: User selected: "green"`)
	req, told = run("form", "ASK:form", `"value":"{\"count\": 3}"`)
	e2eEqual(t, "form as editor", e2eStr(req, "method")+" "+e2eStr(req, "prefill"), "editor {\n  \"count\": 1\n}")
	e2eEqual(t, "form answer", told, `Tool said: User filled in the form: {"count":3}`)

	// An answer to no pending dialog is ignored, as pi ignores it.
	mark := p.mark()
	p.send(`{"type":"extension_ui_response","id":"no-such-dialog","value":"Allow"}`)
	p.ok(`{"id":"after-stray","type":"get_state"}`)
	if i, _ := p.waitFor(mark, "after-stray", func(l e2eLine) bool { return l.isResponse("after-stray") }); i != mark {
		t.Fatalf("output for a stray extension_ui_response: %v", p.snapshot()[mark:i])
	}

	// abort while an approval is pending: the call is not run.
	p.cursor = p.mark()
	p.ok(`{"id":"pend","type":"prompt","message":"CMD:echo never-approved"}`)
	p.event("extension_ui_request")
	p.ok(`{"id":"ab","type":"abort"}`)
	te := p.event("tool_execution_end")
	if txt := e2eStr(te, "result", "content", "0", "text"); !strings.Contains(txt, "cancelled") || strings.Contains(txt, "never-approved\n") {
		t.Fatalf("tool result after abort: %q", txt)
	}
	p.event("agent_end")

	// "Always allow": this call and the next bash calls run without asking.
	_, told = run("always", "CMD:echo always", `"value":"Always allow this tool in this session"`)
	e2eEqual(t, "Always", told, "Tool said: always")
	p.cursor = p.mark()
	p.ok(`{"id":"no-ask","type":"prompt","message":"CMD:echo no-ask"}`)
	end := p.event("agent_end")
	for _, l := range p.snapshot()[p.cursor-1:] {
		if l.typ() == "extension_ui_request" {
			t.Fatalf("asked again after always: %s", l)
		}
	}
	e2eEqual(t, "after always", e2eStr(end, "messages", "3", "content", "0", "text"), "Tool said: no-ask")
	out := p.close()
	e2eGolden(t, e, "extension_ui", out)
}

// ---------------------------------------------------------------------------
// Bad input and framing: the process answers and goes on.

func TestRPCBadInput(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session", "--max-line-bytes", "1024")

	// next sends raw and returns the first line it produced.
	next := func(raw string) *e2eObj {
		t.Helper()
		mark := p.mark()
		p.send(raw)
		_, l := p.waitFor(mark, "an answer to "+e2eClip(raw, 60), func(e2eLine) bool { return true })
		return l.v.(*e2eObj)
	}
	r := next(`{"type": "get_`)
	if e2eStr(r, "command") != "parse" || e2eHas(r, "id") || !strings.HasPrefix(e2eStr(r, "error"), "Failed to parse command: ") {
		t.Fatalf("malformed JSON: %s", e2eJSON(r))
	}
	for _, raw := range []string{`"hello"`, `42`, `[1,2]`, `{"id":"nt"}`} {
		e2eEqual(t, raw, e2eJSON(next(raw)), `{"type":"response","success":false,"error":"Unknown command: undefined"}`)
	}
	e2eEqual(t, "unknown command", e2eJSON(next(`{"id":"u1","type":"frobnicate"}`)),
		`{"type":"response","command":"frobnicate","success":false,"error":"Unknown command: frobnicate"}`)

	// Wrong-typed and missing fields: a failure for that command and id.
	for _, c := range []struct{ cmd, want string }{
		{`{"id":"w1","type":"set_session_name","name":42}`, "name"},
		{`{"id":"w2","type":"prompt","message":["x"]}`, "message"},
		{`{"id":"w3","type":"set_auto_retry","enabled":"yes"}`, "enabled"},
		{`{"id":"w4","type":"prompt","message":"x","images":"none"}`, "images"},
		{`{"id":"m1","type":"prompt"}`, "message"},
		{`{"id":"m2","type":"steer"}`, "message"},
		{`{"id":"m3","type":"follow_up"}`, "message"},
		{`{"id":"m4","type":"bash"}`, "command"},
		{`{"id":"m5","type":"set_session_name"}`, "name"},
		{`{"id":"m6","type":"set_auto_compaction"}`, "enabled"},
		{`{"id":"m7","type":"set_thinking_level"}`, "thinking level"},
		{`{"id":"m8","type":"set_model"}`, "Model not found"},
	} {
		v, _ := e2eParse([]byte(c.cmd))
		r := p.call(c.cmd)
		if e2eStr(r, "command") != e2eStr(v, "type") {
			t.Errorf("%s: response for command %q", c.cmd, e2eStr(r, "command"))
		}
		e2eWantFailure(t, r, c.want)
	}

	// Lines over --max-line-bytes are refused whole, and the next is read.
	pad := func(id string, n int) string {
		head := `{"id":"` + id + `","type":"get_state"`
		return head + strings.Repeat(" ", n-len(head)-1) + "}"
	}
	e2eWantSuccess(t, p.call(pad("edge", 1024)))
	mark := p.mark()
	p.send(pad("edge-crlf", 1024) + "\r\n") // the CR LF is not content
	e2eWantSuccess(t, p.resp("edge-crlf"))
	r = next(pad("over", 1025))
	if e2eStr(r, "command") != "parse" || !strings.Contains(e2eStr(r, "error"), "1024") {
		t.Fatalf("over-size line: %s", e2eJSON(r))
	}
	big := fmt.Sprintf(`{"id":"big","type":"prompt","message":%q}`, strings.Repeat("x", 5000))
	p.send(big + "\n" + `{"id":"after-big","type":"get_state"}`)
	e2eWantSuccess(t, p.resp("after-big"))
	for _, l := range p.snapshot()[mark:] {
		if l.isResponse("big") || l.typ() == "agent_start" {
			t.Fatalf("an over-size line was run: %s", l)
		}
	}

	// CRLF, blank lines.
	e2eWantSuccess(t, p.call("{\"id\":\"crlf\",\"type\":\"get_state\"}\r"))
	mark = p.mark()
	p.send("\n   \n\r\n")
	p.ok(`{"id":"after-blank","type":"get_state"}`)
	if i, _ := p.waitFor(mark, "after-blank", func(l e2eLine) bool { return l.isResponse("after-blank") }); i != mark {
		t.Fatalf("output for blank lines: %v", p.snapshot()[mark:i])
	}

	// U+2028 and U+2029 are not line ends: the prompt arrives whole.
	msg := "before\u2028middle\u2029after"
	p.cursor = p.mark()
	p.ok(`{"id":"ls","type":"prompt","message":"` + msg + `"}`)
	um := p.event("message_start:user")
	e2eEqual(t, "user text", e2eStr(um, "message", "content", "0", "text"), msg)
	end := p.event("agent_end")
	e2eEqual(t, "echo", e2eStr(end, "messages", "1", "content", "0", "text"), "Hello from mock! You said: "+msg)
	if req := e.mock.LastRequest(t); !strings.Contains(string(req.Body), `before\u2028middle\u2029after`) && !strings.Contains(string(req.Body), msg) {
		t.Fatalf("the model got %s", e2eClip(string(req.Body), 300))
	}
	out := p.close() // stdin closed while idle: a clean exit
	e2eGolden(t, e, "bad_input", out)
}

// Closing stdin ends the process: a run in progress is aborted and a bash
// command killed, and their last lines are written before the exit.
func TestRPCExitOnStdinClose(t *testing.T) {
	t.Parallel()
	// Closing stdin is "no more commands", not "stop": what was accepted
	// finishes, then agentd exits 0. (Before, both of these were aborted;
	// SIGTERM still aborts them: see TestRPCSignalAbortsAfterStdinClose.)
	t.Run("mid-run", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		release := e.proxy.holdAfter("finish me", 2) // the role chunk, the first delta
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"finish me"}`)
		p.event("message_update:text_delta")
		_ = p.stdin.Close()
		p.waitStderr("input ended")
		close(release)
		out := p.close()
		last := out[len(out)-1]
		if last.typ() != "agent_end" || e2eStr(last.v, "messages", "1", "stopReason") != "stop" ||
			e2eStr(last.v, "messages", "1", "content", "0", "text") != "Hello from mock! You said: finish me" {
			t.Fatalf("last line before the exit: %s", last)
		}
	})
	t.Run("mid-bash", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		p := e.start("--no-session")
		fifo, started := e.fifo("started")
		gate := e.gate("gate")
		p.send(fmt.Sprintf(`{"id":"b","type":"bash","command":"echo > %s; cat %s; echo finished"}`, fifo, gate.path))
		started()
		_ = p.stdin.Close()
		p.waitStderr("input ended")
		gate.open()
		out := p.close()
		var b *e2eLine
		for i := range out {
			if out[i].isResponse("b") {
				b = &out[i]
			}
		}
		if b == nil || e2eAt(b.v, "data", "cancelled") != false || e2eStr(b.v, "data", "output") != "finished\n" {
			t.Fatalf("bash response before the exit: %v", b)
		}
	})
}

// ---------------------------------------------------------------------------
// --stream-format delta: message_update carries only the delta.

func TestRPCStreamFormatDelta(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session", "--stream-format", "delta")
	p.ok(`{"id":"p1","type":"prompt","message":"Say hi"}`)
	p.event("agent_end")
	p.ok(`{"id":"p2","type":"prompt","message":"USE_TOOL please run something"}`)
	p.event("agent_end")
	out := p.close()

	var text strings.Builder
	updates := 0
	for _, l := range out {
		if l.typ() != "message_update" {
			continue
		}
		updates++
		if e2eHas(l.v, "message") || e2eHas(l.v, "assistantMessageEvent", "partial") {
			t.Fatalf("delta format line carries the message: %s", l)
		}
		ev := e2eAt(l.v, "assistantMessageEvent")
		switch e2eStr(ev, "type") {
		case "text_delta":
			text.WriteString(e2eStr(ev, "delta"))
		case "text_end":
			e2eEqual(t, "text_end content", e2eStr(ev, "content"), text.String())
			text.Reset()
		case "toolcall_end":
			e2eEqual(t, "toolcall_end", e2eJSON(e2eAt(ev, "toolCall")), `{"type":"toolCall","id":"call_mock1","name":"bash","arguments":{"command":"echo hello-from-tool"}}`)
		}
	}
	if updates == 0 {
		t.Fatal("no message_update")
	}
	// Apart from message_update's payload, the stream is pi's.
	e2eCompareWithPi(t, e2eCompare{ref: "rpc-transcript.jsonl", run: "p2", skip: e2eMerge(e2eSkipPiInternals, map[string]string{
		"message_update:*.message": "delta format", "message_update:*.partial": "delta format"})}, e2eUntilAgentEnd(out, "p2"))
	e2eGolden(t, e, "stream_format_delta", out)
}

// ---------------------------------------------------------------------------
// Where agentd once differed from pi 0.73.1. Each subtest states pi's
// behaviour (from its transcripts or its source) and fails if agentd
// differs again; the comparisons with pi's transcripts no longer undo
// any of them.

func TestRPCOnceDifferedFromPi(t *testing.T) {
	t.Parallel()

	// Lines between the mark and the response id.
	before := func(p *e2eProc, mark int, id string) []e2eLine {
		i, _ := p.waitFor(mark, "response "+id, func(l e2eLine) bool { return l.isResponse(id) })
		return p.snapshot()[mark:i]
	}

	t.Run("bash_emits_no_events", func(t *testing.T) {
		t.Parallel()
		// rpc.md: "This message does NOT emit an event"; pi's transcript 1
		// has nothing between the bash command and its response.
		p := e2eNewEnv(t, e2eOpts{}).start("--no-session")
		mark := p.mark()
		p.ok(`{"id":"b","type":"bash","command":"echo hi"}`)
		extra := before(p, mark, "b")
		p.close()
		if len(extra) > 0 {
			e2eDiffersFromPi(t, "bash sends %d events before its response, pi none: %s", len(extra), extra[0])
		}
	})

	t.Run("thinking_unchanged_no_event", func(t *testing.T) {
		t.Parallel()
		// pi's setThinkingLevel emits thinking_level_changed only when the
		// level changes (transcript 2: set_thinking_level on a model
		// without reasoning, no event).
		p := e2eNewEnv(t, e2eOpts{}).start("--no-session")
		mark := p.mark()
		p.ok(`{"id":"t","type":"set_thinking_level","level":"off"}`)
		extra := before(p, mark, "t")
		mark = p.mark()
		p.ok(`{"id":"t2","type":"set_thinking_level","level":"high"}`) // clamped to off: no change either
		extra = append(extra, before(p, mark, "t2")...)
		p.close()
		if len(extra) > 0 {
			e2eDiffersFromPi(t, "set_thinking_level that leaves the level as it is sends %s; pi sends nothing", extra[0])
		}
	})

	t.Run("message_count_while_streaming", func(t *testing.T) {
		t.Parallel()
		// pi's transcript 2: while the first answer streams, get_state has
		// messageCount 1 (the user message); the streaming message joins
		// the conversation at its message_end.
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		release := e.proxy.holdAfter("streaming now", 2)
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"streaming now"}`)
		p.event("message_update:text_delta")
		st := p.ok(`{"id":"gs","type":"get_state"}`)
		ms := p.ok(`{"id":"gm","type":"get_messages"}`)
		close(release)
		p.event("agent_end")
		p.close()
		if n, m := e2eNum(st, "data", "messageCount"), len(e2eAt(ms, "data", "messages").([]any)); n != 1 || m != 1 {
			e2eDiffersFromPi(t, "while streaming, messageCount is %v and get_messages has %d messages (the partial answer counted); pi: 1 and 1", n, m)
		}
	})

	t.Run("last_assistant_text_null", func(t *testing.T) {
		t.Parallel()
		// pi's getLastAssistantText skips aborted messages without content
		// and returns the trimmed text or undefined: null for an answer
		// that has no text (an error, a bare tool call).
		p := e2eNewEnv(t, e2eOpts{}).start("--no-session")
		p.ok(`{"id":"r","type":"set_auto_retry","enabled":false}`)
		p.ok(`{"id":"p","type":"prompt","message":"FAIL:400 no text"}`)
		p.event("agent_end")
		lt := p.ok(`{"id":"lt","type":"get_last_assistant_text"}`)
		p.close()
		if got := e2eJSON(e2eAt(lt, "data")); got != `{"text":null}` {
			e2eDiffersFromPi(t, "get_last_assistant_text after an answer without text is %s; pi: {\"text\":null}", got)
		}
	})

	t.Run("retry_settings", func(t *testing.T) {
		t.Parallel()
		// pi reads retry.maxRetries and retry.baseDelayMs from settings.json
		// (docs/settings.md); its transcript 4 ran with 2 and 300.
		e := e2eNewEnv(t, e2eOpts{settings: map[string]any{"retry": map[string]any{"maxRetries": 2, "baseDelayMs": 300}}})
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"FAIL:503 retry me"}`)
		rs := p.event("auto_retry_start")
		p.ok(`{"id":"ar","type":"abort_retry"}`)
		p.close()
		if e2eNum(rs, "maxAttempts") != 2 || e2eNum(rs, "delayMs") != 300 {
			e2eDiffersFromPi(t, "with retry {maxRetries: 2, baseDelayMs: 300} in settings.json, %s; pi: maxAttempts 2, delayMs 300", e2eJSON(rs))
		}
	})

	t.Run("stats_after_compaction", func(t *testing.T) {
		t.Parallel()
		// pi's getSessionStats counts the messages in context (as
		// get_state's messageCount does) and reports contextUsage tokens
		// and percent as null until an answer after the compaction
		// (rpc.md; transcript 2).
		e := e2eNewEnv(t, e2eOpts{settings: map[string]any{"compaction": map[string]any{"keepRecentTokens": 1}}})
		p := e.start("--no-session")
		p.ok(`{"id":"p1","type":"prompt","message":"one"}`)
		p.event("agent_end")
		p.ok(`{"id":"p2","type":"prompt","message":"two"}`)
		p.event("agent_end")
		p.ok(`{"id":"c","type":"compact"}`)
		st := p.ok(`{"id":"st","type":"get_session_stats"}`)
		gs := p.ok(`{"id":"gs","type":"get_state"}`)
		p.close()
		var problems []string
		if cu := e2eAt(st, "data", "contextUsage"); e2eAt(cu, "tokens") != nil || e2eAt(cu, "percent") != nil {
			problems = append(problems, "contextUsage "+e2eJSON(cu)+" (pi: tokens and percent null)")
		}
		if a, b := e2eNum(st, "data", "totalMessages"), e2eNum(gs, "data", "messageCount"); a != b {
			problems = append(problems, fmt.Sprintf("totalMessages %v but messageCount %v (pi counts the same messages)", a, b))
		}
		if len(problems) > 0 {
			e2eDiffersFromPi(t, "get_session_stats right after compact: %s", strings.Join(problems, "; "))
		}
	})

	t.Run("queue_update_before_response", func(t *testing.T) {
		t.Parallel()
		// pi's transcript 2: queue_update, then the steer/follow_up response.
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		release := e.proxy.holdAfter("queue order", 2)
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"queue order"}`)
		p.event("message_update:text_delta")
		mark := p.mark()
		p.ok(`{"id":"s","type":"steer","message":"a steer"}`)
		p.waitFor(mark, "queue_update", func(l e2eLine) bool { return l.typ() == "queue_update" })
		order := e2eKeys(p.snapshot()[mark:])
		close(release)
		p.event("agent_end")
		p.close()
		if strings.Join(order, " ") != "queue_update response:steer" {
			e2eDiffersFromPi(t, "steer while streaming writes %v; pi: [queue_update response:steer]", order)
		}
	})

	t.Run("queue_update_after_turn_start", func(t *testing.T) {
		t.Parallel()
		// pi's transcript 2: turn_start, queue_update, message_start:user
		// when a queued message is delivered.
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		release := e.proxy.holdAfter("deliver order", 2)
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"deliver order"}`)
		p.event("message_update:text_delta")
		p.ok(`{"id":"s","type":"steer","message":"a steer"}`)
		p.event("queue_update")
		close(release)
		p.event("turn_end")
		mark := p.cursor
		p.event("message_start:user")
		order := e2eKeys(p.snapshot()[mark:p.cursor])
		p.event("agent_end")
		p.close()
		if strings.Join(order, " ") != "turn_start queue_update message_start:user" {
			e2eDiffersFromPi(t, "delivering a steering message writes %v; pi: [turn_start queue_update message_start:user]", order)
		}
	})

	t.Run("abort_closes_block", func(t *testing.T) {
		t.Parallel()
		// pi's transcript 2: an abort mid-text ends the block with text_end
		// (stopReason aborted in the partial) before message_end.
		e := e2eNewEnv(t, e2eOpts{})
		e.tweak("abort me", func(s *wiremock.Script) { s.HangAfter = 1 })
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"abort me"}`)
		p.event("message_update:text_delta")
		mark := p.cursor
		p.ok(`{"id":"a","type":"abort"}`)
		p.event("message_end:assistant")
		order := e2eKeys(p.snapshot()[mark:p.cursor])
		p.close()
		if strings.Join(order, " ") != "message_update:text_end message_end:assistant" {
			e2eDiffersFromPi(t, "abort mid-text writes %v; pi: [message_update:text_end message_end:assistant]", order)
		}
	})

	t.Run("fork_field_order", func(t *testing.T) {
		t.Parallel()
		// pi: {"text":...,"cancelled":false} (rpc.md, transcript 2).
		p := e2eNewEnv(t, e2eOpts{}).start()
		p.ok(`{"id":"p","type":"prompt","message":"fork me"}`)
		p.event("agent_end")
		fm := p.ok(`{"id":"fm","type":"get_fork_messages"}`)
		fk := p.ok(fmt.Sprintf(`{"id":"fk","type":"fork","entryId":%q}`, e2eStr(fm, "data", "messages", "0", "entryId")))
		p.close()
		if got := e2eJSON(e2eAt(fk, "data")); got != `{"text":"fork me","cancelled":false}` {
			e2eDiffersFromPi(t, "fork data is %s; pi: {\"text\":\"fork me\",\"cancelled\":false}", got)
		}
	})

	t.Run("bash_details", func(t *testing.T) {
		t.Parallel()
		// pi's transcripts 1 and 5: bash tool updates after the first carry
		// "details":{}, and so does the result of an aborted command.
		e := e2eNewEnv(t, e2eOpts{})
		p := e.start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"USE_TOOL"}`)
		p.event("tool_execution_update")
		up := p.event("tool_execution_update")
		p.event("agent_end")
		p.close()
		if !e2eHas(up, "partialResult", "details") {
			e2eDiffersFromPi(t, "bash tool_execution_update without details: %s; pi: \"partialResult\":{\"content\":[...],\"details\":{}}", e2eJSON(up))
		}
	})

	t.Run("compact_small_session", func(t *testing.T) {
		t.Parallel()
		// pi compacts a session whose messages all fit in
		// keepRecentTokens: a summary, everything kept (transcript 2).
		// So does agentd.
		p := e2eNewEnv(t, e2eOpts{}).start("--no-session")
		p.ok(`{"id":"p","type":"prompt","message":"small"}`)
		p.event("agent_end")
		c := p.call(`{"id":"c","type":"compact"}`)
		again := p.call(`{"id":"c2","type":"compact"}`)
		p.close()
		if b, _ := e2eAt(c, "success").(bool); !b || e2eAt(c, "data", "summary") == nil || e2eAt(c, "data", "summary") == "" {
			t.Fatalf("compact on a small session: %s", e2eJSON(c))
		}
		if b, _ := e2eAt(again, "success").(bool); b || e2eAt(again, "error") != "Already compacted" {
			t.Fatalf("compact right after a compaction: %s", e2eJSON(again))
		}
	})

	t.Run("steer_when_idle_queues", func(t *testing.T) {
		t.Parallel()
		// pi's steer and follow_up only queue (Agent.steer enqueues); with
		// no run in progress nothing starts, the message waits in the
		// queue (queue_update, pendingMessageCount 1).
		p := e2eNewEnv(t, e2eOpts{}).start("--no-session")
		mark := p.mark()
		p.ok(`{"id":"s","type":"steer","message":"idle steer"}`)
		st := p.ok(`{"id":"gs","type":"get_state"}`)
		lines := p.snapshot()[mark:]
		p.close()
		started := false
		for _, l := range lines {
			started = started || l.typ() == "agent_start"
		}
		if started || e2eNum(st, "data", "pendingMessageCount") != 1 {
			e2eDiffersFromPi(t, "steer with no run in progress started a run (%v) / pendingMessageCount %v; pi queues it: %v", started, e2eNum(st, "data", "pendingMessageCount"), e2eKeys(lines))
		}
	})
}
