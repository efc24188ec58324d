package sessionws

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
)

// testedValidator is the production validator, with the server's
// messages checked by a second implementation.
type testedValidator struct {
	*validator
	server *jsonschema.Schema
}

func testValidator(t testing.TB) testedValidator {
	t.Helper()
	v, err := newValidator(schemaJSON)
	if err != nil {
		t.Fatal(err)
	}
	return testedValidator{v, serverSchema(t)}
}

func TestCheckClientMessages(t *testing.T) {
	v := testValidator(t)
	tests := []struct {
		name, in string
		typ      string // accepted with this type, or
		code     string // refused with this code
		mention  string // and a message naming what was wrong
	}{
		{"subscribe", `{"type":"subscribe","session_id":"a"}`, "subscribe", "", ""},
		{"subscribe with cursor", `{"type":"subscribe","session_id":"a","after_seq":12}`, "subscribe", "", ""},
		{"trailing newline", "{\"type\":\"ping\"}\n", "ping", "", ""},
		{"query_state", `{"type":"query_state"}`, "query_state", "", ""},
		{"provide_input", `{"type":"provide_input","question_id":"q","input_data":{"answer":"x"}}`, "provide_input", "", ""},
		{"not json", `{"type":`, "", "invalid_message_format", "not valid JSON"},
		{"null", `null`, "", "invalid_message_format", "JSON object"},
		{"array", `[1,2]`, "", "invalid_message_format", "JSON object"},
		{"string", `"subscribe"`, "", "invalid_message_format", "JSON object"},
		{"no type", `{"session_id":"x"}`, "", "invalid_message_format", `"type"`},
		{"type not a string", `{"type":7}`, "", "invalid_message_format", `"type"`},
		{"unknown type", `{"type":"teleport"}`, "", "unknown_message_type", "teleport"},
		{"cursor wrong type", `{"type":"subscribe","session_id":"a","after_seq":"x"}`, "", "invalid_message_format", "after_seq"},
		{"negative cursor", `{"type":"subscribe","session_id":"a","after_seq":-1}`, "", "invalid_message_format", "after_seq"},
		{"input_data not an object", `{"type":"provide_input","question_id":"q","input_data":"yes"}`, "", "invalid_message_format", "input_data"},
		{"missing input_data", `{"type":"provide_input","question_id":"q"}`, "", "invalid_message_format", "input_data"},
		{"question_id may be left out", `{"type":"provide_input","input_data":{}}`, "provide_input", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, body, ref := v.check([]byte(tc.in))
			if tc.code == "" {
				if ref != nil {
					t.Fatalf("refused: %s %s", ref.code, ref.msg)
				}
				if typ != tc.typ || body == nil {
					t.Fatalf("type %q body %v, want %q", typ, body, tc.typ)
				}
				return
			}
			if ref == nil {
				t.Fatalf("accepted as %q", typ)
			}
			if ref.code != tc.code {
				t.Errorf("code %q, want %q (%s)", ref.code, tc.code, ref.msg)
			}
			if !strings.Contains(ref.msg, tc.mention) {
				t.Errorf("message %q does not mention %q", ref.msg, tc.mention)
			}
			// Whatever is refused is itself a valid server message.
			if err := v.checkServer(encode(ref.message(time.Now()))); err != nil {
				t.Errorf("refusal is not a valid server message: %v", err)
			}
		})
	}
	t.Run("unknown type lists the supported ones", func(t *testing.T) {
		_, _, ref := v.check([]byte(`{"type":"x"}`))
		if len(ref.supported) != len(clientTypes) {
			t.Fatalf("supported %v", ref.supported)
		}
	})
}

// FuzzCheck feeds the client-message decoder arbitrary bytes: it never
// panics, and it either accepts a typed object or refuses with a code
// and a message that is itself a valid server message.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"type":"subscribe","session_id":"a","after_seq":3}`, `{"type":"ping"}`, `null`, `{"type":7}`,
		`{"type":"provide_input","question_id":"q","input_data":{"decision":"approve"}}`, "\xff\xfe", `{"type":"x"}`,
	} {
		f.Add([]byte(s))
	}
	v := testValidator(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, body, ref := v.check(b)
		if ref == nil {
			if typ == "" || body == nil {
				t.Fatalf("accepted %q without a type or body", b)
			}
			return
		}
		if ref.code == "" || ref.msg == "" {
			t.Fatalf("refusal without code or message: %+v", ref)
		}
		if err := v.checkServer(encode(ref.message(time.Now()))); err != nil {
			t.Fatalf("refusal of %q is not a valid server message: %v", b, err)
		}
	})
}

func TestResponseOf(t *testing.T) {
	approval := interaction.Request{ID: "tool-c1", Kind: interaction.KindApproval, Tool: &interaction.ToolApproval{ToolCallID: "c1", ToolName: "bash", Args: json.RawMessage(`{"command":"ls"}`)}}
	sel := interaction.Request{ID: "ask-s", Kind: interaction.KindSelect, Options: []string{"a", "b"}}
	confirm := interaction.Request{ID: "ask-c", Kind: interaction.KindConfirm}
	form := interaction.Request{ID: "ask-f", Kind: interaction.KindForm, Fields: []interaction.Field{{Name: "n", Type: interaction.FieldInteger}}}
	tests := []struct {
		name  string
		req   interaction.Request
		data  string
		want  interaction.Response
		field string // refused naming this field
	}{
		{"approve", approval, `{"decision":"approve"}`, interaction.Response{Verdict: interaction.VerdictApprove}, ""},
		{"reject with feedback", approval, `{"decision":"reject","feedback":"no"}`, interaction.Response{Verdict: interaction.VerdictReject, Feedback: "no"}, ""},
		{"edit", approval, `{"decision":"edit","args":{"command":"pwd"}}`, interaction.Response{Verdict: interaction.VerdictEdit, Args: json.RawMessage(`{"command":"pwd"}`)}, ""},
		{"approve next", approval, `{"decision":"approve_next","count":3}`, interaction.Response{Verdict: interaction.VerdictApproveNext, Count: 3}, ""},
		{"always all tools", approval, `{"decision":"always","all_tools":true}`, interaction.Response{Verdict: interaction.VerdictAlways, AllTools: true}, ""},
		{"cancelled", approval, `{"cancelled":true}`, interaction.Response{Cancelled: true}, ""},
		{"cancelled with more", approval, `{"cancelled":true,"decision":"approve"}`, interaction.Response{}, "cancelled"},
		{"cancelled false", approval, `{"cancelled":false}`, interaction.Response{}, "cancelled"},
		{"no decision", approval, `{}`, interaction.Response{}, "decision"},
		{"bad decision", approval, `{"decision":"maybe"}`, interaction.Response{}, "decision"},
		{"decision wrong type", approval, `{"decision":1}`, interaction.Response{}, "decision"},
		{"args not an object", approval, `{"decision":"edit","args":"pwd"}`, interaction.Response{}, "args"},
		{"fractional count", approval, `{"decision":"approve_next","count":1.5}`, interaction.Response{}, "count"},
		{"zero count", approval, `{"decision":"approve_next","count":0}`, interaction.Response{}, "count"},
		{"all_tools wrong type", approval, `{"decision":"always","all_tools":"yes"}`, interaction.Response{}, "all_tools"},
		{"unknown approval field", approval, `{"decision":"approve","zzz":1}`, interaction.Response{}, "zzz"},
		{"select", sel, `{"answer":"b"}`, interaction.Response{Value: "b"}, ""},
		{"select missing", sel, `{}`, interaction.Response{}, "answer"},
		{"select wrong type", sel, `{"answer":["b"]}`, interaction.Response{}, "answer"},
		{"confirm", confirm, `{"confirmed":true}`, interaction.Response{Confirmed: true}, ""},
		{"confirm wrong type", confirm, `{"confirmed":"true"}`, interaction.Response{}, "confirmed"},
		{"form passes values to the engine", form, `{"n":4}`, interaction.Response{Values: map[string]any{"n": float64(4)}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data map[string]any
			if err := json.Unmarshal([]byte(tc.data), &data); err != nil {
				t.Fatal(err)
			}
			got, ref := responseOf(tc.req, data)
			if tc.field != "" {
				if ref == nil {
					t.Fatalf("accepted: %+v", got)
				}
				if ref.code != "invalid_input" || ref.details["field"] != tc.field || !strings.Contains(ref.msg, tc.field) {
					t.Fatalf("refusal %+v, want invalid_input naming %q", ref, tc.field)
				}
				return
			}
			if ref != nil {
				t.Fatalf("refused: %s", ref.msg)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Fatalf("got %s, want %s", gb, wb)
			}
		})
	}
}

// TestServerMessagesMatchSchema encodes every prompt kind and every kind
// of session error and checks each against the served schema, so the
// document clients read describes what they receive.
func TestServerMessagesMatchSchema(t *testing.T) {
	v := testValidator(t)
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	reqs := []interaction.Request{
		{ID: "tool-c1", Kind: interaction.KindApproval, Tool: &interaction.ToolApproval{ToolCallID: "c1", ToolName: "bash", Args: json.RawMessage(`{"command":"ls"}`)}, ExpiresAt: now.Add(90 * time.Second)},
		{ID: "ask-1", Kind: interaction.KindSelect, Title: "Pick", Options: []string{"a", "b"}},
		{ID: "ask-2", Kind: interaction.KindConfirm, Message: "Sure?"},
		{ID: "ask-3", Kind: interaction.KindInput, Title: "Name", Placeholder: "your name"},
		{ID: "ask-4", Kind: interaction.KindEditor, Prefill: "draft"},
		{ID: "ask-5", Kind: interaction.KindForm, Title: "Deploy", Fields: []interaction.Field{
			{Name: "env", Type: interaction.FieldSelect, Options: []string{"dev", "prod"}, Required: true},
			{Name: "replicas", Type: interaction.FieldInteger, Default: float64(2)},
		}},
	}
	w := &watch{id: "s1"}
	for _, r := range reqs {
		p := promptOf(r)
		if p.QuestionID != r.ID || p.Question == "" || p.FieldName == "" || len(p.Fields) == 0 {
			t.Errorf("%s: prompt %+v", r.Kind, p)
		}
		m := &inputRequiredMsg{Type: "input_required", SessionID: w.id, Timestamp: stamp(now), Seq: 4, Prompt: p}
		if err := v.checkServer(encode(m)); err != nil {
			t.Errorf("%s: %v", r.Kind, err)
		}
	}
	if p := promptOf(reqs[0]); p.Question != "Allow bash to run?" || p.Tool == nil || p.Tool.ToolCallID != "c1" {
		t.Errorf("approval prompt %+v", p)
	}
	if p := promptOf(reqs[5]); p.FieldName != "env" || p.Validation["enum"] == nil || len(p.Fields) != 2 {
		t.Errorf("form prompt %+v", p)
	}

	hint := func(string) string { return "ANTHROPIC_API_KEY" }
	errs := []struct {
		e           server.RunError
		errType     string
		severity    string
		recoverable bool
		mention     string
	}{
		{server.RunError{Kind: "auth", Status: 401, Provider: "anthropic", Message: "invalid x-api-key"}, "provider_auth", "critical", false, "ANTHROPIC_API_KEY"},
		{server.RunError{Kind: "rate_limit", Status: 429, Retrying: true, Attempt: 1, MaxAttempts: 3, Delay: 2 * time.Second}, "provider_rate_limit", "medium", true, "attempt 1 of 3"},
		{server.RunError{Kind: "context_overflow"}, "provider_context_overflow", "high", true, "Compact"},
		{server.RunError{Kind: "not_found", Status: 404}, "provider_not_found", "high", false, "model id"},
		{server.RunError{Message: "boom"}, "run_failed", "high", true, "Send the prompt again"},
	}
	for _, tc := range errs {
		m := sessionError("s1", 9, now, &tc.e, hint)
		if m.ErrorType != tc.errType || m.Severity != tc.severity || *m.Recoverable != tc.recoverable {
			t.Errorf("%s: got %s %s %v", tc.errType, m.ErrorType, m.Severity, *m.Recoverable)
		}
		if !strings.Contains(strings.Join(m.RecoverySuggestions, " | "), tc.mention) {
			t.Errorf("%s: suggestions %q do not mention %q", tc.errType, m.RecoverySuggestions, tc.mention)
		}
		if err := v.checkServer(encode(m)); err != nil {
			t.Errorf("%s: %v", tc.errType, err)
		}
	}
	if err := v.checkServer(encode(compactionError("s1", 3, now, "summary too long", true))); err != nil {
		t.Error(err)
	}
	for _, m := range []any{
		&pingMsg{Type: "ping", Timestamp: stamp(now)},
		&pongMsg{Type: "pong", Timestamp: stamp(now)},
		&inputReceivedMsg{Type: "input_received", SessionID: "s1", QuestionID: "ask-1", Timestamp: stamp(now), Seq: 3},
		&unsubscribedMsg{Type: "unsubscribed", SessionID: "s1", Timestamp: stamp(now), Seq: 3},
		&statusChangeMsg{Type: "status_change", SessionID: "s1", Timestamp: stamp(now), Seq: 3, OldState: "idle", NewState: "running", Reason: "prompted"},
		completedOf("s1", 7, now, server.Transition{New: server.StateCompleted, Percent: 100}),
	} {
		if err := v.checkServer(encode(m)); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
	// And the schema refuses what is not a server message.
	if err := v.checkServer([]byte(`{"type":"status_change","session_id":"s1"}`)); err == nil {
		t.Error("an incomplete status_change passed the server schema")
	}
}

// serverSchema compiles the schema's server messages with
// santhosh-tekuri/jsonschema: a second implementation reads the document
// the production validator reads.
func serverSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://agentd.dev/schemas/session-websocket.json"
	if err := c.AddResource(url, parsed); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url + "#/$defs/server")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkServer validates a message the server sends.
func (v testedValidator) checkServer(b []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(bytes.TrimRight(b, "\n")))
	if err != nil {
		return err
	}
	if err := v.server.Validate(inst); err != nil {
		return fmt.Errorf("%v: %s", err, b)
	}
	return nil
}
