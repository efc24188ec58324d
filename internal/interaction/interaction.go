// Package interaction is the one mechanism for everything in a session that
// waits on a person: tool approvals and the questions a model or an
// extension asks (select, confirm, input, editor, form).
//
// A Broker holds the pending requests of one session. The engine blocks in
// Broker.Ask; any client of the session, over any protocol face, sees the
// request through the broker's observer and Pending, and answers it with
// Broker.Answer. The first valid answer wins; the request can also end by
// timeout or cancellation, and whoever comes later is told how it ended.
//
// On top of the broker, Policy decides per tool call whether to allow,
// ask or deny, and Gate combines a policy, per-session grants ("approve
// the next 5", "always allow bash") and the broker into one Check per
// tool call. AskUserTool lets the model ask the user a typed question.
package interaction

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Kind is what a request asks for. The question kinds are pi's dialog
// methods plus form (pi-server's "interview").
type Kind string

// The kinds of request.
const (
	// KindApproval asks whether a tool call may run; answered with a Verdict.
	KindApproval Kind = "approval"
	// KindSelect asks to pick one of Options; answered with Value.
	KindSelect Kind = "select"
	// KindConfirm asks yes or no; answered with Confirmed.
	KindConfirm Kind = "confirm"
	// KindInput asks for one line of text; answered with Value.
	KindInput Kind = "input"
	// KindEditor asks for multi-line text starting from Prefill; answered
	// with Value.
	KindEditor Kind = "editor"
	// KindForm asks for typed Fields; answered with Values.
	KindForm Kind = "form"
)

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindApproval, KindSelect, KindConfirm, KindInput, KindEditor, KindForm:
		return true
	}
	return false
}

// IsQuestion reports whether k is answered with a value rather than a
// verdict.
func (k Kind) IsQuestion() bool { return k.Valid() && k != KindApproval }

// FieldType is the type of a form field's value.
type FieldType string

// The form field types. The Go type of a validated value is given for
// each, so consumers of Response.Values can type-switch without guessing.
const (
	FieldString  FieldType = "string"  // string
	FieldNumber  FieldType = "number"  // float64
	FieldInteger FieldType = "integer" // int64
	FieldBoolean FieldType = "boolean" // bool
	FieldSelect  FieldType = "select"  // string, one of Field.Options
)

func (t FieldType) valid() bool {
	switch t {
	case FieldString, FieldNumber, FieldInteger, FieldBoolean, FieldSelect:
		return true
	}
	return false
}

// Field is one input of a form.
type Field struct {
	// Name keys the field's value in Response.Values.
	Name string    `json:"name"`
	Type FieldType `json:"type"`
	// Label is what a client shows; clients fall back to Name.
	Label       string `json:"label,omitempty"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	// Default fills the value when the answer leaves an optional field
	// out. It must itself be a valid value of Type.
	Default any `json:"default,omitempty"`
	// Options are the choices of a select field.
	Options []string `json:"options,omitempty"`
}

// ToolApproval identifies a tool call: the one awaiting approval for
// KindApproval, or for a question the tool call that asked it (ask_user),
// so a client can show the question next to the call.
type ToolApproval struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	// Args are the call's arguments as the model sent them; empty for
	// questions.
	Args json.RawMessage `json:"args,omitempty"`
}

// Request is one interaction waiting on a person. Slices and Args are
// shared between the copies handed to observers and Pending callers, so
// treat them as read-only.
type Request struct {
	// ID names the request. Broker.Ask and Park keep one the caller sets
	// (made unique if taken) and assign a random one otherwise. A caller's
	// id is limited to letters, digits and ":_.-", as pi-server's
	// interaction ids are.
	ID      string `json:"id"`
	Kind    Kind   `json:"kind"`
	Title   string `json:"title,omitempty"`
	Message string `json:"message,omitempty"`
	// Options are the choices of KindSelect.
	Options []string `json:"options,omitempty"`
	// Placeholder is the hint of an empty KindInput.
	Placeholder string `json:"placeholder,omitempty"`
	// Prefill is the starting text of KindEditor.
	Prefill string `json:"prefill,omitempty"`
	// Fields are the inputs of KindForm.
	Fields []Field       `json:"fields,omitempty"`
	Tool   *ToolApproval `json:"tool,omitempty"`
	// Timeout bounds the wait: 0 uses the broker's default, a negative
	// value waits without limit. Clients see it as ExpiresAt.
	Timeout time.Duration `json:"-"`
	// CreatedAt and ExpiresAt are set by Broker.Ask; ExpiresAt is zero when
	// the request never expires.
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Verdict is the answer to a tool approval.
type Verdict string

// The verdicts. Only VerdictApprove, VerdictEdit, VerdictApproveNext and
// VerdictAlways run the tool.
const (
	// VerdictApprove runs the call as it is.
	VerdictApprove Verdict = "approve"
	// VerdictEdit runs the call with Response.Args instead of the model's.
	VerdictEdit Verdict = "edit"
	// VerdictSkip does not run the call; the model is told it was skipped.
	VerdictSkip Verdict = "skip"
	// VerdictReject does not run the call; the model gets Response.Feedback.
	VerdictReject Verdict = "reject"
	// VerdictApproveNext runs this call and approves the next
	// Response.Count calls that would ask, whatever their tool.
	VerdictApproveNext Verdict = "approve_next"
	// VerdictAlways runs this call and every later call of the same tool
	// for the rest of the session, or of every tool with Response.AllTools.
	VerdictAlways Verdict = "always"
)

func (v Verdict) valid() bool {
	switch v {
	case VerdictApprove, VerdictEdit, VerdictSkip, VerdictReject, VerdictApproveNext, VerdictAlways:
		return true
	}
	return false
}

// Response answers a Request. Which fields count depends on the request's
// kind; Validate drops the others. The JSON names of the question fields
// are pi's extension_ui_response fields (value, confirmed, cancelled).
type Response struct {
	// Verdict answers KindApproval.
	Verdict Verdict `json:"verdict,omitempty"`
	// Args replace the call's arguments with VerdictEdit; a JSON object.
	Args json.RawMessage `json:"args,omitempty"`
	// Feedback goes to the model with VerdictReject.
	Feedback string `json:"feedback,omitempty"`
	// Count is how many further calls VerdictApproveNext approves (≥ 1).
	Count int `json:"count,omitempty"`
	// AllTools widens VerdictAlways from the request's tool to every tool.
	AllTools bool `json:"allTools,omitempty"`

	// Value answers KindSelect (one of the options), KindInput and
	// KindEditor.
	Value string `json:"value,omitempty"`
	// Confirmed answers KindConfirm.
	Confirmed bool `json:"confirmed,omitempty"`
	// Values answers KindForm, keyed by field name; see FieldType for the
	// Go type of each validated value.
	Values map[string]any `json:"values,omitempty"`
	// Cancelled means the person dismissed the request without answering.
	// It is a valid answer to every kind; for an approval the Gate treats
	// it as a rejection without feedback.
	Cancelled bool `json:"cancelled,omitempty"`
}

// ValidationError is an invalid request or answer. Field names the
// offending part ("options", "fields[2].type", "values.age", "args") so
// a client or the model can fix exactly that.
type ValidationError struct {
	Field  string
	Reason string
}

// Error is "field: reason", the form both clients and the model can act on.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks that r can be shown and answered: a known kind, options
// for a select, well-formed fields for a form, the tool call for an
// approval. Broker.Ask calls it; callers that build requests from
// untrusted input (the model's ask_user arguments) get the same errors.
func (r *Request) Validate() error {
	if !validID(r.ID) {
		return invalid("id", "%q may hold only letters, digits and \":_.-\", at most %d of them", r.ID, maxIDLen)
	}
	if !r.Kind.Valid() {
		return invalid("kind", "unknown kind %q (want approval, select, confirm, input, editor or form)", r.Kind)
	}
	switch r.Kind {
	case KindApproval:
		if r.Tool == nil || r.Tool.ToolName == "" {
			return invalid("tool", "an approval needs the tool call it approves")
		}
	case KindSelect:
		if err := validOptions("options", r.Options); err != nil {
			return err
		}
	case KindForm:
		if len(r.Fields) == 0 {
			return invalid("fields", "a form needs at least one field")
		}
		seen := make(map[string]bool, len(r.Fields))
		for i, f := range r.Fields {
			name := fmt.Sprintf("fields[%d]", i)
			if f.Name == "" {
				return invalid(name+".name", "required")
			}
			if seen[f.Name] {
				return invalid(name+".name", "duplicate field %q", f.Name)
			}
			seen[f.Name] = true
			if !f.Type.valid() {
				return invalid(name+".type", "unknown type %q (want string, number, integer, boolean or select)", f.Type)
			}
			if f.Type == FieldSelect {
				if err := validOptions(name+".options", f.Options); err != nil {
					return err
				}
			}
			if f.Default != nil {
				if _, err := f.value(f.Default); err != nil {
					return invalid(name+".default", "%s", err.Reason)
				}
			}
		}
	}
	return nil
}

func validOptions(field string, opts []string) error {
	if len(opts) == 0 {
		return invalid(field, "a select needs at least one option")
	}
	for i, o := range opts {
		if slices.Index(opts, o) != i {
			return invalid(field, "duplicate option %q", o)
		}
	}
	return nil
}

// ValidateResponse checks resp as an answer to r and returns it
// normalized: fields that do not belong to r's kind cleared, edited
// arguments compacted, form values converted to their field's Go type with
// defaults filled in. An answer carrying a verdict for a question, or a
// value for an approval, is an error rather than ignored: it is almost
// always meant for another request.
func (r *Request) ValidateResponse(resp Response) (Response, error) {
	if resp.Cancelled {
		return Response{Cancelled: true}, nil
	}
	if r.Kind == KindApproval {
		if resp.Value != "" || resp.Values != nil {
			return Response{}, invalid("value", "an approval is answered with a verdict, not a value")
		}
		return validVerdict(resp)
	}
	if resp.Verdict != "" {
		return Response{}, invalid("verdict", "a %s question is answered with a value, not a verdict", r.Kind)
	}
	switch r.Kind {
	case KindSelect:
		if !slices.Contains(r.Options, resp.Value) {
			return Response{}, invalid("value", "%q is not one of the options %q", resp.Value, r.Options)
		}
		return Response{Value: resp.Value}, nil
	case KindConfirm:
		return Response{Confirmed: resp.Confirmed}, nil
	case KindInput, KindEditor:
		return Response{Value: resp.Value}, nil
	case KindForm:
		values, err := r.validValues(resp.Values)
		if err != nil {
			return Response{}, err
		}
		return Response{Values: values}, nil
	}
	return Response{}, invalid("kind", "unknown kind %q", r.Kind)
}

func validVerdict(resp Response) (Response, error) {
	out := Response{Verdict: resp.Verdict}
	switch resp.Verdict {
	case "":
		return Response{}, invalid("verdict", "required (approve, edit, skip, reject, approve_next or always)")
	case VerdictEdit:
		args, err := jsonObject(resp.Args)
		if err != nil {
			return Response{}, invalid("args", "%v", err)
		}
		out.Args = args
	case VerdictReject:
		out.Feedback = resp.Feedback
	case VerdictApproveNext:
		if resp.Count < 1 {
			return Response{}, invalid("count", "approve_next needs a count of at least 1, got %d", resp.Count)
		}
		out.Count = resp.Count
	case VerdictAlways:
		out.AllTools = resp.AllTools
	default:
		if !resp.Verdict.valid() {
			return Response{}, invalid("verdict", "unknown verdict %q (want approve, edit, skip, reject, approve_next or always)", resp.Verdict)
		}
	}
	return out, nil
}

// jsonObject returns raw compacted, or an error unless it is one JSON
// object: tools decode their arguments as objects, so anything else would
// only fail later, inside the tool, with a less useful message.
func jsonObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("edit needs the replacement arguments")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if buf.Bytes()[0] != '{' {
		return nil, errors.New("the arguments must be a JSON object")
	}
	return buf.Bytes(), nil
}

func (r *Request) validValues(in map[string]any) (map[string]any, error) {
	unknown := make([]string, 0)
	for name := range in {
		if !slices.ContainsFunc(r.Fields, func(f Field) bool { return f.Name == name }) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, invalid("values."+unknown[0], "unknown field")
	}
	out := make(map[string]any, len(r.Fields))
	for _, f := range r.Fields {
		v, ok := in[f.Name]
		absent := !ok || v == nil
		// An empty string is how most form widgets say "nothing entered",
		// so it cannot satisfy a required field; an optional text field
		// keeps it because clearing a field is an answer too.
		if v == "" && !(f.Type == FieldSelect && slices.Contains(f.Options, "")) {
			if f.Required {
				return nil, invalid("values."+f.Name, "required")
			}
			absent = f.Type != FieldString
		}
		if absent {
			if f.Required {
				return nil, invalid("values."+f.Name, "required")
			}
			if f.Default != nil {
				out[f.Name], _ = f.value(f.Default)
			}
			continue
		}
		norm, err := f.value(v)
		if err != nil {
			err.Field = "values." + f.Name
			return nil, err
		}
		out[f.Name] = norm
	}
	return out, nil
}

// value converts v to f's Go type. Values arrive decoded from JSON
// (float64, json.Number) or built in Go (int, float32), so every numeric
// form is accepted; strings are never coerced to numbers or booleans,
// because a client sending "42" for a number has a bug worth reporting.
func (f Field) value(v any) (any, *ValidationError) {
	switch f.Type {
	case FieldString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case FieldSelect:
		if s, ok := v.(string); ok {
			if !slices.Contains(f.Options, s) {
				return nil, invalid("", "%q is not one of the options %q", s, f.Options)
			}
			return s, nil
		}
	case FieldBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case FieldNumber:
		if n, ok := number(v); ok {
			return n, nil
		}
	case FieldInteger:
		if n, ok := number(v); ok {
			if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
				return nil, invalid("", "want an integer, got %v", n)
			}
			return int64(n), nil
		}
	}
	return nil, invalid("", "want %s, got %s", f.Type, describe(v))
}

func number(v any) (float64, bool) {
	var n float64
	switch x := v.(type) {
	case float64:
		n = x
	case float32:
		n = float64(x)
	case int:
		n = float64(x)
	case int32:
		n = float64(x)
	case int64:
		n = float64(x)
	case uint:
		n = float64(x)
	case uint32:
		n = float64(x)
	case uint64:
		n = float64(x)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, false
		}
		n = f
	default:
		return 0, false
	}
	return n, !math.IsNaN(n) && !math.IsInf(n, 0)
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	if n, ok := number(v); ok {
		return fmt.Sprintf("number %v", n)
	}
	return fmt.Sprintf("%T", v)
}

// maxIDLen bounds a request id a caller sets. Tool call ids are short
// (under 100 bytes from every provider); the bound keeps a hostile one
// from becoming a huge key.
const maxIDLen = 200

// validID reports whether id is empty or made of pi-server's interaction
// id characters, [a-zA-Z0-9:_.-], and at most maxIDLen long.
func validID(id string) bool {
	if len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !idChar(id[i]) {
			return false
		}
	}
	return true
}

func idChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == ':' || c == '_' || c == '.' || c == '-'
}

// ApprovalID is the id of the approval of tool call callID: "tool-" and
// the call id, with every character pi-server does not allow in an id
// replaced by "_" and cut to a bounded length. The same call gets the
// same id after a restart, so a client can name a pending approval it
// saw before.
func ApprovalID(callID string) string { return stableID("tool-", callID) }

// QuestionID is the id of the question the ask_user call callID asks,
// "ask-" and the call id, made valid as ApprovalID makes it.
func QuestionID(callID string) string { return stableID("ask-", callID) }

func stableID(prefix, callID string) string {
	b := []byte(prefix + callID)
	for i, c := range b {
		if !idChar(c) {
			b[i] = '_'
		}
	}
	// Room for the suffix the broker adds when an id is taken.
	if n := maxIDLen - 16; len(b) > n {
		b = b[:n]
	}
	return string(b)
}
