package todo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// ToolName is the name the model calls the todo tool by.
const ToolName = "todo"

const toolDescription = `Keep a todo list for multi-step work, so that you and the user can follow progress.
- To create or rewrite the list, pass "todos" with the whole list. Pass each item's id back to keep it.
- To change items without rewriting the list, pass "update" with the id and the new status (or content) of each item.
- To read the list, pass neither.
Statuses: pending, in_progress, completed. Keep one item in_progress at a time and mark each item completed as soon as it is done.`

var toolSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "todos": {
      "type": "array",
      "description": "The whole list, replacing the current one",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "integer", "description": "The item's id, to keep it; omit for a new item"},
          "content": {"type": "string"},
          "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
        },
        "required": ["content", "status"]
      }
    },
    "update": {
      "type": "array",
      "description": "Changes to items by id",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "integer"},
          "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
          "content": {"type": "string"}
        },
        "required": ["id"]
      }
    }
  }
}`)

// Tool is the todo tool over one List.
type Tool struct {
	list *List
}

// NewTool returns the todo tool editing list.
func NewTool(list *List) *Tool { return &Tool{list: list} }

// Spec implements tool.Tool.
func (t *Tool) Spec() llm.Tool {
	return llm.Tool{Name: ToolName, Description: toolDescription, Parameters: toolSchema}
}

// Execute implements tool.Tool. Every result, read or write, shows the
// whole list, so the model's latest view of it is always in its context;
// the details are the Snapshot, from which a session can rebuild the list
// at any point of its history.
func (t *Tool) Execute(_ context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	items, updates, err := parseArgs(call.Args)
	if err == nil {
		switch {
		case items != nil:
			err = t.list.Write(items)
		case updates != nil:
			err = t.list.Apply(updates)
		}
	}
	if err != nil {
		return tool.Errorf("Invalid todo arguments: %v", err)
	}
	s := t.list.Snapshot()
	return tool.TextResult(Text(s.Items), s)
}

type itemArg struct {
	ID      flexInt `json:"id"`
	Content string  `json:"content"`
	Status  string  `json:"status"`
}

// flexInt accepts an id as a number or a numeric string: models write
// both, and rejecting "3" would only cost a retry.
type flexInt int

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimPrefix(strings.TrimSpace(uq), "#")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return &idError{raw: string(b)}
	}
	*f = flexInt(n)
	return nil
}

type idError struct{ raw string }

func (e *idError) Error() string { return "id: want an integer, got " + e.raw }

// parseArgs returns the list to write (non-nil, maybe empty), the updates
// to apply, or neither for a read.
func parseArgs(raw json.RawMessage) ([]Item, []Update, error) {
	var args struct {
		Todos  json.RawMessage `json:"todos"`
		Update json.RawMessage `json:"update"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, nil, errors.New("the arguments must be a JSON object")
		}
	}
	todos, err := decodeArray("todos", args.Todos)
	if err != nil {
		return nil, nil, err
	}
	update, err := decodeArray("update", args.Update)
	if err != nil {
		return nil, nil, err
	}
	if todos != nil && update != nil {
		return nil, nil, errors.New(`pass either "todos" (the whole list) or "update", not both`)
	}
	if todos != nil {
		items := make([]Item, len(todos))
		for i, a := range todos {
			if a.Status == "" {
				// Required by the schema; saying so beats guessing a status.
				return nil, nil, fmt.Errorf("todos[%d].status: required", i)
			}
			items[i] = Item{ID: int(a.ID), Content: a.Content, Status: Status(a.Status)}
		}
		return items, nil, nil
	}
	if update != nil {
		ups := make([]Update, len(update))
		for i, a := range update {
			if a.ID <= 0 {
				return nil, nil, fmt.Errorf("update[%d].id: required", i)
			}
			if a.Status == "" && strings.TrimSpace(a.Content) == "" {
				return nil, nil, fmt.Errorf("update[%d]: give a status or a content", i)
			}
			ups[i] = Update{ID: int(a.ID), Status: Status(a.Status), Content: a.Content}
		}
		return nil, ups, nil
	}
	return nil, nil, nil
}

// decodeArray decodes an array of items, nil when absent. Some models
// send the array JSON-encoded as a string; that is unwrapped rather than
// refused.
func decodeArray(name string, raw json.RawMessage) ([]itemArg, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			raw = json.RawMessage(strings.TrimSpace(s))
		}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("%s: want an array of items", name)
	}
	out := make([]itemArg, len(elems))
	for i, e := range elems {
		if err := json.Unmarshal(e, &out[i]); err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", name, i, itemError(err))
		}
	}
	return out, nil
}

// itemError turns a decoding error into words about the item's fields.
func itemError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s: want a %s", te.Field, te.Type)
	}
	var ie *idError
	if errors.As(err, &ie) {
		return ie.Error()
	}
	return "want an object with content and status"
}
