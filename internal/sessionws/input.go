package sessionws

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
)

// refusal is a client message the face does not take: the error message
// it gets, minus the time.
type refusal struct {
	code      string
	msg       string
	details   map[string]any
	supported []string
}

func (r *refusal) message(now time.Time) *errorMsg {
	e := protocolError(r.code, r.msg, r.details, now)
	e.SupportedTypes = r.supported
	return e
}

func invalidInput(field, format string, args ...any) *refusal {
	return &refusal{code: "invalid_input", msg: "input_data." + field + ": " + fmt.Sprintf(format, args...), details: map[string]any{"field": field}}
}

// verdicts are the decisions an approval takes, in the order shown.
var verdicts = []string{
	string(interaction.VerdictApprove), string(interaction.VerdictReject), string(interaction.VerdictEdit),
	string(interaction.VerdictSkip), string(interaction.VerdictApproveNext), string(interaction.VerdictAlways),
}

// promptOf is an interaction as the spec's prompt: its first field at
// the top level, as the spec shows a prompt, and every field in fields.
func promptOf(r interaction.Request) prompt {
	p := prompt{QuestionID: r.ID, Kind: string(r.Kind), Question: r.Title}
	if p.Question == "" {
		p.Question = r.Message
	} else {
		p.HelpText = r.Message
	}
	var fields []field
	switch r.Kind {
	case interaction.KindApproval:
		if p.Question == "" && r.Tool != nil {
			p.Question = "Allow " + r.Tool.ToolName + " to run?"
		}
		fields = []field{
			{FieldName: "decision", FieldType: "decision", Required: true, Validation: map[string]any{"enum": verdicts},
				HelpText: "approve runs the call; reject refuses it (feedback tells the model why); edit runs it with args instead; skip does not run it; approve_next runs it and the next count calls; always runs every later call of this tool (all_tools: of every tool)"},
			{FieldName: "feedback", FieldType: "text", HelpText: "With reject: what the model is told"},
			{FieldName: "args", FieldType: "object", HelpText: "With edit: the arguments to run the call with"},
			{FieldName: "count", FieldType: "integer", Validation: map[string]any{"minimum": 1}, HelpText: "With approve_next: how many further calls to approve"},
			{FieldName: "all_tools", FieldType: "boolean", HelpText: "With always: every tool, not only this one"},
		}
		if r.Tool != nil {
			p.Tool = &toolJSON{ToolCallID: r.Tool.ToolCallID, ToolName: r.Tool.ToolName, Args: r.Tool.Args}
		}
	case interaction.KindSelect:
		fields = []field{{FieldName: "answer", FieldType: "select", Required: true, Validation: map[string]any{"enum": r.Options}}}
	case interaction.KindConfirm:
		fields = []field{{FieldName: "confirmed", FieldType: "boolean", Required: true}}
	case interaction.KindInput:
		fields = []field{{FieldName: "answer", FieldType: "string", Required: true, HelpText: r.Placeholder}}
	case interaction.KindEditor:
		fields = []field{{FieldName: "answer", FieldType: "text", Required: true, Default: nonEmpty(r.Prefill)}}
	case interaction.KindForm:
		for _, f := range r.Fields {
			fl := field{FieldName: f.Name, FieldType: string(f.Type), Label: f.Label, Required: f.Required, HelpText: f.Description, Default: f.Default}
			if len(f.Options) > 0 {
				fl.Validation = map[string]any{"enum": f.Options}
			}
			fields = append(fields, fl)
		}
	}
	if p.Question == "" {
		p.Question = "Input needed"
	}
	if len(fields) == 0 {
		fields = []field{{FieldName: "answer", FieldType: "string", Required: true}}
	}
	first := fields[0]
	p.FieldName, p.FieldType, p.Required, p.Default = first.FieldName, first.FieldType, first.Required, first.Default
	p.Validation = first.Validation
	if p.Validation == nil {
		p.Validation = map[string]any{}
	}
	if p.HelpText == "" {
		p.HelpText = first.HelpText
	}
	p.Fields = fields
	return p
}

func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// responseOf reads provide_input's input_data as an answer to r. The
// engine validates the values once more (a form's field types); this
// checks what the face maps.
func responseOf(r interaction.Request, data map[string]any) (interaction.Response, *refusal) {
	if c, ok := data["cancelled"]; ok {
		if b, isBool := c.(bool); !isBool || !b || len(data) > 1 {
			return interaction.Response{}, invalidInput("cancelled", `to dismiss the prompt send {"cancelled": true} alone`)
		}
		return interaction.Response{Cancelled: true}, nil
	}
	allowed := func(names ...string) *refusal {
		var extra []string
		for k := range data {
			if !slices.Contains(names, k) {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			return invalidInput(extra[0], "unknown field for a %s prompt (it takes %s)", r.Kind, strings.Join(names, ", "))
		}
		return nil
	}
	str := func(name string, required bool) (string, *refusal) {
		v, ok := data[name]
		if !ok {
			if required {
				return "", invalidInput(name, "required")
			}
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", invalidInput(name, "must be a string, not %s", kindOf(v))
		}
		return s, nil
	}
	switch r.Kind {
	case interaction.KindApproval:
		if ref := allowed("decision", "feedback", "args", "count", "all_tools"); ref != nil {
			return interaction.Response{}, ref
		}
		d, ref := str("decision", true)
		if ref != nil {
			return interaction.Response{}, ref
		}
		if !slices.Contains(verdicts, d) {
			return interaction.Response{}, invalidInput("decision", "%q is not one of %s", d, strings.Join(verdicts, ", "))
		}
		resp := interaction.Response{Verdict: interaction.Verdict(d)}
		if resp.Feedback, ref = str("feedback", false); ref != nil {
			return interaction.Response{}, ref
		}
		if a, ok := data["args"]; ok {
			if _, isObj := a.(map[string]any); !isObj {
				return interaction.Response{}, invalidInput("args", "must be an object of the call's arguments")
			}
			resp.Args, _ = json.Marshal(a)
		}
		if n, ok := data["count"]; ok {
			f, isNum := n.(float64)
			if !isNum || f != float64(int(f)) || f < 1 {
				return interaction.Response{}, invalidInput("count", "must be a whole number of at least 1")
			}
			resp.Count = int(f)
		}
		if b, ok := data["all_tools"]; ok {
			v, isBool := b.(bool)
			if !isBool {
				return interaction.Response{}, invalidInput("all_tools", "must be true or false")
			}
			resp.AllTools = v
		}
		return resp, nil
	case interaction.KindConfirm:
		if ref := allowed("confirmed"); ref != nil {
			return interaction.Response{}, ref
		}
		v, ok := data["confirmed"]
		if !ok {
			return interaction.Response{}, invalidInput("confirmed", "required")
		}
		b, isBool := v.(bool)
		if !isBool {
			return interaction.Response{}, invalidInput("confirmed", "must be true or false, not %s", kindOf(v))
		}
		return interaction.Response{Confirmed: b}, nil
	case interaction.KindForm:
		return interaction.Response{Values: data}, nil
	default: // select, input, editor
		if ref := allowed("answer"); ref != nil {
			return interaction.Response{}, ref
		}
		s, ref := str("answer", true)
		if ref != nil {
			return interaction.Response{}, ref
		}
		return interaction.Response{Value: s}, nil
	}
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// sessionError is a failed model request as the spec's error: what kind
// of failure, how bad, whether the session gets over it by itself, and
// what a person can do.
func sessionError(id string, seq uint64, now time.Time, e *server.RunError, keyHint func(provider string) string) *errorMsg {
	kind := string(e.Kind)
	m := &errorMsg{Type: "error", SessionID: id, Timestamp: stamp(now), Seq: &seq, ErrorType: "run_failed",
		Message: "The model request failed", Details: map[string]any{}}
	if e.Message != "" {
		m.Message += ": " + e.Message
	}
	if kind != "" {
		m.ErrorType = "provider_" + kind
		m.Details["kind"] = kind
	}
	if e.Status != 0 {
		m.Details["status"] = e.Status
	}
	if e.Provider != "" {
		m.Details["provider"] = e.Provider
	}
	recoverable := true
	severity := "high"
	var tips []string
	if e.Retrying {
		severity = "medium"
		m.Details["retry_attempt"], m.Details["max_retries"] = e.Attempt, e.MaxAttempts
		m.Details["retry_in_seconds"] = seconds(e.Delay)
		tips = append(tips, fmt.Sprintf("The session retries on its own (attempt %d of %d, in %s)", e.Attempt, e.MaxAttempts, e.Delay.Round(100*time.Millisecond)))
	}
	provider := e.Provider
	if provider == "" {
		provider = "the provider"
	}
	switch e.Kind {
	case "auth":
		severity, recoverable = "critical", false
		key := ""
		if keyHint != nil && e.Provider != "" {
			key = keyHint(e.Provider)
		}
		if key != "" {
			tips = append(tips, fmt.Sprintf("Set %s to a valid API key for %s and restart agentd", key, provider))
		} else {
			tips = append(tips, "Configure a valid API key for "+provider+" and restart agentd")
		}
		tips = append(tips, "Or switch the session to a model of another provider")
	case "permission":
		severity, recoverable = "critical", false
		tips = append(tips, "The key for "+provider+" may not use this model: check the account's access", "Or switch the session to another model")
	case "not_found":
		recoverable = false
		tips = append(tips, "Check the model id and the provider's base URL (models.json)")
	case "bad_request", "too_large":
		recoverable = false
		tips = append(tips, "The provider refused the request as it is: remove large attachments or images, or start a new session")
	case "context_overflow":
		tips = append(tips, "Compact the session to make room, or start a new session")
	case "rate_limit":
		if !e.Retrying {
			tips = append(tips, "Send the prompt again once the provider's rate limit resets")
		}
		tips = append(tips, "Run fewer sessions at once, or raise the provider's rate limit")
	case "overloaded", "server", "network", "stream", "idle_timeout":
		if !e.Retrying {
			tips = append(tips, "Send the prompt again later: the failure is on the provider's side or the network")
		}
		tips = append(tips, "Check the provider's status and the network route to it")
	default:
		if !e.Retrying {
			tips = append(tips, "Send the prompt again", "The server log has the details")
		}
	}
	m.Severity, m.Recoverable, m.RecoverySuggestions = severity, &recoverable, tips
	return m
}

func compactionError(id string, seq uint64, now time.Time, msg string, willRetry bool) *errorMsg {
	ok := true
	tips := []string{"The session goes on with its context as it was"}
	if willRetry {
		tips = append(tips, "The session retries the request after compacting")
	} else {
		tips = append(tips, "Compact again later, or start a new session if the context is full")
	}
	return &errorMsg{Type: "error", SessionID: id, Timestamp: stamp(now), Seq: &seq, ErrorType: "compaction_failed", Severity: "low",
		Message: "Compacting the context failed: " + msg, Recoverable: &ok, RecoverySuggestions: tips, Details: map[string]any{}}
}
