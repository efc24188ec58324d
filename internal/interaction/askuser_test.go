package interaction

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/tool"
)

var _ tool.Tool = (*AskUserTool)(nil)

func execAsync(ctx context.Context, tl tool.Tool, c tool.Call) <-chan tool.Result {
	ch := make(chan tool.Result, 1)
	go func() { ch <- tl.Execute(ctx, c, nil) }()
	synctest.Wait()
	return ch
}

func TestAskUserSpec(t *testing.T) {
	spec := NewAskUserTool(NewBroker(BrokerOptions{}), 0).Spec()
	if spec.Name != "ask_user" || spec.Description == "" {
		t.Errorf("spec = %+v", spec)
	}
	var schema map[string]any
	if err := json.Unmarshal(spec.Parameters, &schema); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
}

func TestAskUser(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		want    Request // the fields a client sees
		answer  Response
		text    string
		outcome string
	}{
		{"select", `{"question":"Which database?","kind":"select","options":["Postgres","SQLite"]}`,
			Request{Kind: KindSelect, Title: "Which database?", Options: []string{"Postgres", "SQLite"}},
			Response{Value: "SQLite"}, `User selected: "SQLite"`, "answered"},
		{"select inferred from options", `{"question":"Which?","options":["A","B"]}`,
			Request{Kind: KindSelect, Title: "Which?", Options: []string{"A", "B"}},
			Response{Value: "B"}, `User selected: "B"`, "answered"},
		{"confirm yes", `{"question":"Delete the branch?","kind":"confirm"}`,
			Request{Kind: KindConfirm, Title: "Delete the branch?"},
			Response{Confirmed: true}, "User answered: yes", "answered"},
		{"confirm no", `{"question":"Delete the branch?","kind":"confirm"}`,
			Request{Kind: KindConfirm, Title: "Delete the branch?"},
			Response{}, "User answered: no", "answered"},
		{"input", `{"question":"Project name?","kind":"input","placeholder":"my-app"}`,
			Request{Kind: KindInput, Title: "Project name?", Placeholder: "my-app"},
			Response{Value: "agentd"}, "User answered: agentd", "answered"},
		{"input inferred", `{"question":"Project name?"}`,
			Request{Kind: KindInput, Title: "Project name?"},
			Response{}, "User answered with an empty response", "answered"},
		{"editor", `{"question":"Edit the commit message","kind":"editor","prefill":"fix: x"}`,
			Request{Kind: KindEditor, Title: "Edit the commit message", Prefill: "fix: x"},
			Response{Value: "fix: x\n\nLonger body."}, "User answered:\nfix: x\n\nLonger body.", "answered"},
		{"form", `{"question":"Release details","kind":"form","fields":[
				{"name":"version","type":"string","required":true},
				{"name":"build","type":"integer","default":1},
				{"name":"draft","type":"boolean"},
				{"name":"channel","type":"select","options":["stable","beta"]}]}`,
			Request{Kind: KindForm, Title: "Release details", Fields: []Field{
				{Name: "version", Type: FieldString, Required: true},
				{Name: "build", Type: FieldInteger, Default: 1.0},
				{Name: "draft", Type: FieldBoolean},
				{Name: "channel", Type: FieldSelect, Options: []string{"stable", "beta"}},
			}},
			Response{Values: map[string]any{"version": "1.2.0", "draft": true, "channel": "beta"}},
			`User filled in the form: {"build":1,"channel":"beta","draft":true,"version":"1.2.0"}`, "answered"},
		{"dismissed", `{"question":"Which?","options":["A"]}`,
			Request{Kind: KindSelect, Title: "Which?", Options: []string{"A"}},
			Response{Cancelled: true}, "The user dismissed the question", "dismissed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBroker(BrokerOptions{})
				done := execAsync(t.Context(), NewAskUserTool(b, 0), tool.Call{ID: "tc1", Name: "ask_user", Args: json.RawMessage(tt.args)})
				req := onlyPending(t, b)
				got := Request{Kind: req.Kind, Title: req.Title, Options: req.Options, Placeholder: req.Placeholder, Prefill: req.Prefill, Fields: req.Fields}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("request = %+v\nwant      %+v", got, tt.want)
				}
				if req.Tool == nil || req.Tool.ToolCallID != "tc1" {
					t.Errorf("request does not name its tool call: %+v", req.Tool)
				}
				if err := b.Answer(req.ID, tt.answer); err != nil {
					t.Fatal(err)
				}
				res := <-done
				if res.IsError || res.Content[0].Text != tt.text {
					t.Errorf("result %q (error %v), want %q", res.Content[0].Text, res.IsError, tt.text)
				}
				if det, _ := res.Details.(AskUserDetails); det.Outcome != tt.outcome || det.Question != tt.want.Title {
					t.Errorf("details = %+v", res.Details)
				}
			})
		})
	}
}

func TestAskUserTimeoutAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{})
		tl := NewAskUserTool(b, 10*time.Minute)
		args := json.RawMessage(`{"question":"Continue?","kind":"confirm"}`)
		done := execAsync(t.Context(), tl, tool.Call{ID: "a", Name: "ask_user", Args: args})
		if p := onlyPending(t, b); p.ExpiresAt.Sub(p.CreatedAt) != 10*time.Minute {
			t.Errorf("expires after %v", p.ExpiresAt.Sub(p.CreatedAt))
		}
		res := <-done
		if res.IsError || res.Content[0].Text != "The user did not answer before the question timed out" {
			t.Errorf("timeout result %q", res.Content[0].Text)
		}

		done = execAsync(t.Context(), tl, tool.Call{ID: "b", Name: "ask_user", Args: args})
		b.CancelAll("the run was aborted")
		res = <-done
		if !res.IsError || res.Content[0].Text != "The question was cancelled: the run was aborted" {
			t.Errorf("cancel result %q", res.Content[0].Text)
		}
	})
}

func TestAskUserInvalidArguments(t *testing.T) {
	tests := []struct{ name, args, want string }{
		{"not an object", `["q"]`, "the arguments must be a JSON object"},
		{"no question", `{"kind":"confirm"}`, "question: required"},
		{"blank question", `{"question":"  "}`, "question: required"},
		{"question not a string", `{"question":42}`, "question: want a string"},
		{"unknown kind", `{"question":"q","kind":"dropdown"}`, `kind: unknown kind "dropdown"`},
		{"approval is not a question", `{"question":"q","kind":"approval"}`, `kind: unknown kind "approval"`},
		{"select without options", `{"question":"q","kind":"select"}`, "options: a select needs at least one option"},
		{"options not an array", `{"question":"q","kind":"select","options":"A, B"}`, "options: want an array of strings"},
		{"form without fields", `{"question":"q","kind":"form"}`, "fields: a form needs at least one field"},
		{"field with unknown type", `{"question":"q","fields":[{"name":"a","type":"string"},{"name":"d","type":"date"}]}`, `fields[1].type: unknown type "date"`},
		{"field without name", `{"question":"q","fields":[{"type":"string"}]}`, "fields[0].name: required"},
		{"fields not objects", `{"question":"q","fields":["a"]}`, "fields: want an array of {name, type, ...} objects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var events []Event
			b := NewBroker(BrokerOptions{OnEvent: func(e Event) { events = append(events, e) }})
			res := NewAskUserTool(b, 0).Execute(t.Context(), tool.Call{Name: "ask_user", Args: json.RawMessage(tt.args)}, nil)
			text := res.Content[0].Text
			if !res.IsError || !strings.HasPrefix(text, "Invalid ask_user arguments: ") || !strings.Contains(text, tt.want) {
				t.Errorf("result %q (error %v), want it to contain %q", text, res.IsError, tt.want)
			}
			if len(events) != 0 {
				t.Error("an invalid question was published")
			}
		})
	}
}
