package convapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// The request body decoders take whatever a client sends. Whatever it
// is, a decoder must not panic, and it either decodes (into a payload
// the pipeline can journal and read back) or refuses with an error that
// the face answers as a 4xx with a message a person can act on: never a
// 500, never an empty message. Each fuzz target reads its input the way
// the handler does (readBody within a frame limit, then parseObject), so
// the reading is fuzzed with it. Inputs the fuzzer found are kept in
// testdata/fuzz/<Target>/ and run by go test.

// fuzzLimit is the frame limit the targets read bodies under: small, so
// the fuzzer also reaches the 413.
const fuzzLimit = 4096

// fuzzFace is a face with only what the decoders use: the models, a
// layer whose sandbox mode is workspace-write (chat.sandbox is checked
// against it) and an MCP manager (without one, every mcp section with a
// server is refused, and the fuzzer would never get past that). Neither
// starts anything: the decoders only read their settings.
func fuzzFace(f *testing.F) *Server {
	layer, err := server.New(server.Config{
		Builder: server.BuilderFunc(func(sessionspec.Spec) (*session.Session, error) {
			return nil, errors.New("the decoders build no session")
		}),
		Sandbox: sandbox.WorkspaceWrite,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = layer.Close() })
	return &Server{srv: layer, opt: Options{Models: fixedModels{faux.Model()}, DefaultModel: faux.Model(), MCP: mcp.New(mcp.Options{})}}
}

// readFuzzBody reads body as a handler does. ok is false when reading
// refused it, after checking the refusal.
func readFuzzBody(t *testing.T, body []byte, emptyMsg string) (object, bool) {
	t.Helper()
	r := httptest.NewRequest("POST", "/api/v2/conversations/c", bytes.NewReader(body))
	b, err := readBody(httptest.NewRecorder(), r, fuzzLimit)
	if err != nil {
		wantRefusal(t, body, err)
		return nil, false
	}
	o, err := parseObject(b, emptyMsg)
	if err != nil {
		wantRefusal(t, body, err)
		return nil, false
	}
	if o == nil {
		t.Fatalf("parseObject(%q) gave a nil object and no error", body)
	}
	return o, true
}

// wantRefusal checks that err is answered as a 4xx whose JSON body has a
// non-empty message.
func wantRefusal(t *testing.T, body []byte, err error) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/api/v2/conversations/c", nil)
	writeError(w, slog.New(slog.DiscardHandler), r, err)
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("body %q: refused with %d (%v), want a 4xx", body, w.Code, err)
	}
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(w.Body.Bytes(), &eb) != nil || strings.TrimSpace(eb.Error) == "" {
		t.Fatalf("body %q: refused with %d and no message: %s", body, w.Code, w.Body.Bytes())
	}
}

// wantJournalable checks that a decoded payload survives the trip
// through the pipeline's journal: marshalled as submit does and read
// back as the command's run does, it is what was decoded.
func wantJournalable[T any](t *testing.T, body []byte, pl T) {
	t.Helper()
	if _, err := json.Marshal(pl); err != nil {
		t.Fatalf("body %q: the payload %#v does not marshal: %v", body, pl, err)
	}
	raw := marshal(pl)
	var back T
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("body %q: the payload %s does not read back: %v", body, raw, err)
	}
	if again := marshal(back); !bytes.Equal(again, raw) {
		t.Fatalf("body %q: the payload changed on its way through the journal:\n %s\n %s", body, raw, again)
	}
}

// seeds adds the valid bodies of an endpoint and a few near misses.
func seeds(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
	for _, b := range []string{"", "{}", "null", "[]", `{"a":1}`, "{", `{"x":"\ud800"}`, "\xff\xfe", `{} {}`, strings.Repeat("[", 300)} {
		f.Add([]byte(b))
	}
}

func FuzzDecodeCreate(f *testing.F) {
	seeds(f,
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"be brief","timestamp":"2024-01-01T00:00:00Z"},{"role":"user","content":"go","files":[]}],"auto_confirm":3}`,
		`{"config":{"chat":{"name":"Configured","tools":["write","read"],"thinking":"low","model":"faux/faux-1","workspace":"."}}}`,
		`{"auto_confirm":true,"config":{"chat":{"stream":true,"interactive":false}}}`,
		`{"prompt":"hello","config":{"env":{}}}`,
	)
	s := fuzzFace(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		pl, err := s.decodeCreate(o)
		if err != nil {
			wantRefusal(t, body, err)
			return
		}
		wantJournalable(t, body, pl)
	})
}

func FuzzDecodeAppend(f *testing.F) {
	seeds(f,
		`{"role":"user","content":"hello"}`,
		`{"role":"assistant","content":"hi","branch":"main","tools":["bash"]}`,
		`{"role":"system","content":"x","timestamp":"2024-05-01T10:00:00+02:00","files":["a.txt"]}`,
		`{"role":"user","content":"x","branch":"../etc"}`,
		`{"role":"tool","content":1}`,
	)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		in, branch, tools, err := decodeAppend(o)
		if err != nil {
			wantRefusal(t, body, err)
			return
		}
		if branch == "" || strings.ContainsAny(branch, "/\\\x00") || strings.Contains(branch, "..") {
			t.Fatalf("body %q: decoded branch %q", body, branch)
		}
		wantJournalable(t, body, in)
		wantJournalable(t, body, tools)
	})
}

func FuzzDecodeStep(f *testing.F) {
	seeds(f,
		`{"session_id":"abc"}`,
		`{"session_id":"abc","model":"faux/faux-1","auto_confirm":2,"branch":"main"}`,
		`{"model":"faux-1","stream":true,"auto_confirm":false}`,
		`{"session_id":"  "}`,
		`{"auto_confirm":-1}`,
	)
	s := fuzzFace(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		// Both paths: /api/v2 (session_id required) and the design
		// document's (optional).
		for _, design := range []bool{false, true} {
			pl, _, err := s.decodeStep(o, design)
			if err != nil {
				wantRefusal(t, body, err)
				continue
			}
			wantJournalable(t, body, pl)
		}
	})
}

func FuzzDecodeConfirm(f *testing.F) {
	seeds(f,
		`{"session_id":"s","tool_id":"tool-call1","action":"confirm"}`,
		`{"id":"tool-call1","action":"edit","content":"echo edited"}`,
		`{"tool_id":"t","action":"auto","count":3}`,
		`{"tool_id":"t","action":"reject","feedback":"use another file"}`,
		`{"tool_id":"t","action":"always","all_tools":true}`,
		`{"tool_id":"t","action":"skip"}`,
		`{"tool_id":"t","action":"auto","count":1e3}`,
	)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		pl, _, err := decodeConfirm(o)
		if err != nil {
			wantRefusal(t, body, err)
			return
		}
		if _, known := confirmActions[pl.Action]; !known || pl.ToolID == "" {
			t.Fatalf("body %q: decoded %+v", body, pl)
		}
		if pl.Action == "auto" && pl.Count <= 0 {
			t.Fatalf("body %q: auto with count %d", body, pl.Count)
		}
		wantJournalable(t, body, pl)
	})
}

func FuzzDecodeEdit(f *testing.F) {
	seeds(f, `{"content":"rewritten"}`, `{"content":"x","truncate":true}`, `{"content":null}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		pl, err := decodeEdit(o, 1, false)
		if err != nil {
			wantRefusal(t, body, err)
			return
		}
		wantJournalable(t, body, pl)
	})
}

func FuzzDecodeElicit(f *testing.F) {
	seeds(f,
		`{"elicit_id":"e1","action":"accept","value":"blue"}`,
		`{"elicit_id":"e1","action":"accept","values":{"age":36}}`,
		`{"elicit_id":"e1","action":"decline","session_id":"s"}`,
		`{"elicit_id":"e1","action":"cancel"}`,
	)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "")
		if !ok {
			return
		}
		pl, _, err := decodeElicit(o)
		if err != nil {
			wantRefusal(t, body, err)
			return
		}
		wantJournalable(t, body, pl)
	})
}

// FuzzDecodeObject drives the field readers of decode.go on one field of
// any JSON value: each reads it or refuses it with a 4xx, and what it
// reads has the type it promises.
func FuzzDecodeObject(f *testing.F) {
	for _, v := range []string{`"text"`, `"  "`, `1`, `-3`, `1.5`, `1e3`, `9007199254740993`, `true`, `null`, `["a","b"]`, `[1]`, `{"k":"v"}`, `{}`, `"\u0000"`} {
		f.Add([]byte(`{"f":` + v + `}`))
	}
	f.Add([]byte(`{"auto_confirm":5,"branch":"main"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "A body is required")
		if !ok {
			return
		}
		check := func(err error) {
			if err != nil {
				wantRefusal(t, body, err)
			}
		}
		for k := range o {
			_, _, err := o.str(k)
			check(err)
			_, err = o.requiredStr(k)
			check(err)
			_, err = o.optionalStr(k)
			check(err)
			_, err = o.optionalStrRequired(k)
			check(err)
			_, _, err = o.boolean(k)
			check(err)
			n, ok, err := o.integer(k)
			check(err)
			if ok && (n > 1<<53 || n < -(1<<53)) {
				t.Fatalf("body %q: integer %s read as %d", body, k, n)
			}
			_, _, err = o.number(k)
			check(err)
			l, ok, err := o.strings(k)
			check(err)
			if ok && l == nil {
				t.Fatalf("body %q: strings %s read as nil", body, k)
			}
			sub, ok, err := o.obj(k, "f must be an object")
			check(err)
			if ok && sub == nil {
				t.Fatalf("body %q: obj %s read as nil", body, k)
			}
			_, err = inputOf(object{"role": json.RawMessage(`"user"`), "content": o[k]}, false)
			check(err)
		}
		_, next, err := o.autoConfirm()
		check(err)
		if next < 0 {
			t.Fatalf("body %q: auto_confirm read as %d", body, next)
		}
		_, err = branchOf(o)
		check(err)
		check(o.only("f"))
	})
}

// The fields the strict endpoints accept are the OpenAPI types' own, and
// none is empty (an empty name would let any field through).
func TestFieldNames(t *testing.T) {
	for _, v := range []any{StepRequest{}, ConfirmRequest{}, EditRequest{}, ElicitRequest{}} {
		names := fieldNames(v)
		if len(names) == 0 || slices.Contains(names, "") {
			t.Errorf("%s: %q", reflect.TypeOf(v).Name(), names)
		}
	}
}

// Every refusal a body can get is one the face answers as a 4xx: this
// checks the mapping itself on the refusals the decoders build.
func TestDecodeRefusalsAre4xx(t *testing.T) {
	for _, body := range []string{strings.Repeat("x", fuzzLimit+1), "{", `{"role":1,"content":"x"}`} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		b, err := readBody(httptest.NewRecorder(), r, fuzzLimit)
		if err == nil {
			_, err = parseObject(b, "")
		}
		if err == nil {
			o, _ := parseObject(b, "")
			_, _, _, err = decodeAppend(o)
		}
		if err == nil {
			t.Fatalf("%q was accepted", clip(body, 40))
		}
		wantRefusal(t, []byte(clip(body, 40)), err)
	}
}
