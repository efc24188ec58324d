package interaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// AskUserName is the name the model calls the ask_user tool by.
const AskUserName = "ask_user"

const askUserDescription = `Ask the user a question and wait for the answer. Use it for decisions and information only the user has, not for things you can find out yourself.
Kinds:
- select: pick one of "options"
- confirm: yes or no
- input: one line of text ("placeholder" is an optional hint)
- editor: multi-line text ("prefill" is the starting text)
- form: several typed "fields" ({name, type: string|number|integer|boolean|select, description, required, default, options})
When kind is omitted it is select if options are given, form if fields are given, otherwise input.`

var askUserSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "question": {"type": "string", "description": "The question, as the user will see it"},
    "kind": {"type": "string", "enum": ["select", "confirm", "input", "editor", "form"]},
    "options": {"type": "array", "items": {"type": "string"}, "description": "The choices of a select"},
    "fields": {
      "type": "array",
      "description": "The fields of a form",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "type": {"type": "string", "enum": ["string", "number", "integer", "boolean", "select"]},
          "description": {"type": "string"},
          "required": {"type": "boolean"},
          "default": {},
          "options": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name", "type"]
      }
    },
    "placeholder": {"type": "string", "description": "Hint shown in an empty input"},
    "prefill": {"type": "string", "description": "Starting text of an editor"}
  },
  "required": ["question"]
}`)

// AskUserTool is the ask_user tool: the model asks the user a typed
// question. The question goes through the session's Broker like any other
// interaction, so every client of the session sees it and any of them can
// answer.
type AskUserTool struct {
	broker  *Broker
	timeout time.Duration
}

// NewAskUserTool returns the ask_user tool asking through broker. timeout
// bounds each question as Request.Timeout does (0: the broker's default).
func NewAskUserTool(broker *Broker, timeout time.Duration) *AskUserTool {
	return &AskUserTool{broker: broker, timeout: timeout}
}

// Spec implements tool.Tool.
func (t *AskUserTool) Spec() llm.Tool {
	return llm.Tool{Name: AskUserName, Description: askUserDescription, Parameters: askUserSchema}
}

// AskUserDetails are the Details of an ask_user result, for clients.
type AskUserDetails struct {
	Kind     Kind   `json:"kind"`
	Question string `json:"question"`
	// Outcome is "answered", "dismissed", "timeout" or "cancelled".
	Outcome  string    `json:"outcome"`
	Response *Response `json:"response,omitempty"`
}

// Execute implements tool.Tool: it validates the model's question, asks it
// and blocks until the answer, then returns the answer as text.
func (t *AskUserTool) Execute(ctx context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	req, err := AskUserRequest(call)
	if err != nil {
		return tool.Errorf("Invalid ask_user arguments: %v", err)
	}
	req.Timeout = t.timeout
	details := AskUserDetails{Kind: req.Kind, Question: req.Title}

	resp, err := t.broker.Ask(ctx, req)
	switch {
	case errors.Is(err, ErrTimeout):
		details.Outcome = "timeout"
		return tool.TextResult("The user did not answer before the question timed out", details)
	case err != nil:
		details.Outcome = "cancelled"
		var ve *ValidationError
		if errors.As(err, &ve) {
			return tool.Errorf("Invalid ask_user arguments: %v", err)
		}
		r := tool.Errorf("The question was cancelled: %s", cancelReason(err))
		r.Details = details
		return r
	case resp.Cancelled:
		details.Outcome = "dismissed"
		return tool.TextResult("The user dismissed the question", details)
	}
	details.Outcome = "answered"
	details.Response = &resp
	return tool.TextResult(answerText(req.Kind, resp), details)
}

// AskUserRequest is the question an ask_user call asks, with the id the
// tool asks it under (QuestionID of the call): a question parked after a
// restart under that id is the one the call adopts when it runs.
func AskUserRequest(call tool.Call) (Request, error) {
	req, err := parseAskUser(call.Args)
	if err != nil {
		return Request{}, err
	}
	req.ID = QuestionID(call.ID)
	req.Tool = &ToolApproval{ToolCallID: call.ID, ToolName: call.Name}
	return req, nil
}

func cancelReason(err error) string {
	var ce *CancelledError
	if errors.As(err, &ce) && ce.Reason != "" {
		return ce.Reason
	}
	return err.Error()
}

func answerText(kind Kind, resp Response) string {
	switch kind {
	case KindSelect:
		return fmt.Sprintf("User selected: %q", resp.Value)
	case KindConfirm:
		if resp.Confirmed {
			return "User answered: yes"
		}
		return "User answered: no"
	case KindForm:
		// encoding/json sorts map keys, so the text is stable.
		b, _ := json.Marshal(resp.Values)
		return "User filled in the form: " + string(b)
	}
	switch {
	case resp.Value == "":
		return "User answered with an empty response"
	case strings.Contains(resp.Value, "\n"):
		return "User answered:\n" + resp.Value
	}
	return "User answered: " + resp.Value
}

// parseAskUser turns the model's arguments into a request. Each argument
// is decoded on its own so that an error names the argument in words the
// model can act on, rather than a Go type path.
func parseAskUser(raw json.RawMessage) (Request, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return Request{}, errors.New("the arguments must be a JSON object")
	}
	var req Request
	var kind string
	for _, a := range []struct {
		name string
		dst  any
		want string
	}{
		{"question", &req.Title, "a string"},
		{"kind", &kind, "a string"},
		{"options", &req.Options, "an array of strings"},
		{"fields", &req.Fields, "an array of {name, type, ...} objects"},
		{"placeholder", &req.Placeholder, "a string"},
		{"prefill", &req.Prefill, "a string"},
	} {
		v, ok := args[a.name]
		if !ok || string(v) == "null" {
			continue
		}
		if err := json.Unmarshal(v, a.dst); err != nil {
			return Request{}, invalid(a.name, "want %s", a.want)
		}
	}
	if strings.TrimSpace(req.Title) == "" {
		return Request{}, invalid("question", "required")
	}
	req.Kind = Kind(kind)
	switch {
	case kind != "":
	case len(req.Options) > 0:
		req.Kind = KindSelect
	case len(req.Fields) > 0:
		req.Kind = KindForm
	default:
		req.Kind = KindInput
	}
	if !req.Kind.IsQuestion() {
		return Request{}, invalid("kind", "unknown kind %q (want select, confirm, input, editor or form)", kind)
	}
	if err := req.Validate(); err != nil {
		return Request{}, err
	}
	return req, nil
}
