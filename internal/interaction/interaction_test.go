package interaction

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name  string
		req   Request
		field string // "" means valid
	}{
		{"confirm", Request{Kind: KindConfirm}, ""},
		{"input", Request{Kind: KindInput, Placeholder: "name"}, ""},
		{"editor", Request{Kind: KindEditor, Prefill: "a\nb"}, ""},
		{"select", Request{Kind: KindSelect, Options: []string{"A", "B"}}, ""},
		{"approval", Request{Kind: KindApproval, Tool: &ToolApproval{ToolName: "bash"}}, ""},
		{"form", Request{Kind: KindForm, Fields: []Field{
			{Name: "n", Type: FieldInteger, Default: 3.0},
			{Name: "s", Type: FieldSelect, Options: []string{"x"}, Default: "x"},
		}}, ""},
		{"unknown kind", Request{Kind: "dialog"}, "kind"},
		{"empty kind", Request{}, "kind"},
		{"select without options", Request{Kind: KindSelect}, "options"},
		{"select with duplicate options", Request{Kind: KindSelect, Options: []string{"A", "A"}}, "options"},
		{"approval without tool", Request{Kind: KindApproval}, "tool"},
		{"form without fields", Request{Kind: KindForm}, "fields"},
		{"field without name", Request{Kind: KindForm, Fields: []Field{{Type: FieldString}}}, "fields[0].name"},
		{"duplicate field", Request{Kind: KindForm, Fields: []Field{{Name: "a", Type: FieldString}, {Name: "a", Type: FieldNumber}}}, "fields[1].name"},
		{"unknown field type", Request{Kind: KindForm, Fields: []Field{{Name: "a", Type: "date"}}}, "fields[0].type"},
		{"select field without options", Request{Kind: KindForm, Fields: []Field{{Name: "a", Type: FieldSelect}}}, "fields[0].options"},
		{"default of the wrong type", Request{Kind: KindForm, Fields: []Field{{Name: "a", Type: FieldBoolean, Default: "yes"}}}, "fields[0].default"},
		{"default not an option", Request{Kind: KindForm, Fields: []Field{{Name: "a", Type: FieldSelect, Options: []string{"x"}, Default: "y"}}}, "fields[0].default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkField(t, tt.req.Validate(), tt.field)
		})
	}
}

func checkField(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a ValidationError on %s", err, field)
	}
	if ve.Field != field {
		t.Fatalf("error on %q (%v), want on %q", ve.Field, err, field)
	}
}

var form = Request{Kind: KindForm, Fields: []Field{
	{Name: "name", Type: FieldString, Required: true},
	{Name: "age", Type: FieldInteger},
	{Name: "ratio", Type: FieldNumber, Default: 0.5},
	{Name: "ok", Type: FieldBoolean},
	{Name: "color", Type: FieldSelect, Options: []string{"red", "blue"}, Default: "red"},
	{Name: "note", Type: FieldString},
}}

func TestValidateResponse(t *testing.T) {
	approval := Request{Kind: KindApproval, Tool: &ToolApproval{ToolName: "bash"}}
	tests := []struct {
		name  string
		req   Request
		resp  Response
		want  Response
		field string
	}{
		// questions
		{"select option", Request{Kind: KindSelect, Options: []string{"A", "B"}}, Response{Value: "B"}, Response{Value: "B"}, ""},
		{"select not an option", Request{Kind: KindSelect, Options: []string{"A", "B"}}, Response{Value: "C"}, Response{}, "value"},
		{"select empty", Request{Kind: KindSelect, Options: []string{"A"}}, Response{}, Response{}, "value"},
		{"confirm yes", confirmReq, Response{Confirmed: true}, Response{Confirmed: true}, ""},
		{"confirm no", confirmReq, Response{}, Response{}, ""},
		{"input drops other fields", Request{Kind: KindInput}, Response{Value: "x", Confirmed: true, Count: 3}, Response{Value: "x"}, ""},
		{"input empty is an answer", Request{Kind: KindInput}, Response{}, Response{}, ""},
		{"editor", Request{Kind: KindEditor}, Response{Value: "a\nb"}, Response{Value: "a\nb"}, ""},
		{"verdict on a question", confirmReq, Response{Verdict: VerdictApprove}, Response{}, "verdict"},
		{"cancelled question", Request{Kind: KindSelect, Options: []string{"A"}}, Response{Cancelled: true, Value: "nope"}, Response{Cancelled: true}, ""},

		// forms
		{"form from JSON numbers", form,
			Response{Values: map[string]any{"name": "Ada", "age": 36.0, "ratio": json.Number("0.25"), "ok": true, "color": "blue", "note": ""}},
			Response{Values: map[string]any{"name": "Ada", "age": int64(36), "ratio": 0.25, "ok": true, "color": "blue", "note": ""}}, ""},
		{"form from Go numbers, defaults filled", form,
			Response{Values: map[string]any{"name": "Ada", "age": 36}},
			Response{Values: map[string]any{"name": "Ada", "age": int64(36), "ratio": 0.5, "color": "red"}}, ""},
		{"form missing required", form, Response{Values: map[string]any{"age": 3}}, Response{}, "values.name"},
		{"form empty required", form, Response{Values: map[string]any{"name": ""}}, Response{}, "values.name"},
		{"form null required", form, Response{Values: map[string]any{"name": nil}}, Response{}, "values.name"},
		{"form no values", form, Response{}, Response{}, "values.name"},
		{"form unknown field", form, Response{Values: map[string]any{"name": "a", "zip": "1", "extra": 1}}, Response{}, "values.extra"},
		{"form string for integer", form, Response{Values: map[string]any{"name": "a", "age": "36"}}, Response{}, "values.age"},
		{"form fraction for integer", form, Response{Values: map[string]any{"name": "a", "age": 2.5}}, Response{}, "values.age"},
		{"form string for number", form, Response{Values: map[string]any{"name": "a", "ratio": "0.5"}}, Response{}, "values.ratio"},
		{"form string for boolean", form, Response{Values: map[string]any{"name": "a", "ok": "true"}}, Response{}, "values.ok"},
		{"form number for string", form, Response{Values: map[string]any{"name": 7}}, Response{}, "values.name"},
		{"form select not an option", form, Response{Values: map[string]any{"name": "a", "color": "green"}}, Response{}, "values.color"},
		{"form empty optional select takes the default", form,
			Response{Values: map[string]any{"name": "a", "color": ""}},
			Response{Values: map[string]any{"name": "a", "ratio": 0.5, "color": "red"}}, ""},

		// approvals
		{"approve", approval, Response{Verdict: VerdictApprove, Feedback: "ignored"}, Response{Verdict: VerdictApprove}, ""},
		{"no verdict", approval, Response{}, Response{}, "verdict"},
		{"unknown verdict", approval, Response{Verdict: "yes"}, Response{}, "verdict"},
		{"value on an approval", approval, Response{Verdict: VerdictApprove, Value: "Allow"}, Response{}, "value"},
		{"edit compacts", approval, Response{Verdict: VerdictEdit, Args: json.RawMessage(`{ "command" : "ls" }`)},
			Response{Verdict: VerdictEdit, Args: json.RawMessage(`{"command":"ls"}`)}, ""},
		{"edit without args", approval, Response{Verdict: VerdictEdit}, Response{}, "args"},
		{"edit with broken JSON", approval, Response{Verdict: VerdictEdit, Args: json.RawMessage(`{"command":`)}, Response{}, "args"},
		{"edit with an array", approval, Response{Verdict: VerdictEdit, Args: json.RawMessage(`["ls"]`)}, Response{}, "args"},
		{"edit with a string", approval, Response{Verdict: VerdictEdit, Args: json.RawMessage(`"ls"`)}, Response{}, "args"},
		{"skip", approval, Response{Verdict: VerdictSkip}, Response{Verdict: VerdictSkip}, ""},
		{"reject with feedback", approval, Response{Verdict: VerdictReject, Feedback: "no"}, Response{Verdict: VerdictReject, Feedback: "no"}, ""},
		{"approve next", approval, Response{Verdict: VerdictApproveNext, Count: 3}, Response{Verdict: VerdictApproveNext, Count: 3}, ""},
		{"approve next zero", approval, Response{Verdict: VerdictApproveNext}, Response{}, "count"},
		{"approve next negative", approval, Response{Verdict: VerdictApproveNext, Count: -1}, Response{}, "count"},
		{"always", approval, Response{Verdict: VerdictAlways, AllTools: true}, Response{Verdict: VerdictAlways, AllTools: true}, ""},
		{"cancelled approval", approval, Response{Cancelled: true}, Response{Cancelled: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.ValidateResponse(tt.resp)
			checkField(t, err, tt.field)
			if tt.field == "" && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("normalized = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// The JSON of a question response is pi's extension_ui_response shape.
func TestResponseJSONIsPiShaped(t *testing.T) {
	for _, tc := range []struct {
		resp Response
		want string
	}{
		{Response{Value: "Allow"}, `{"value":"Allow"}`},
		{Response{Confirmed: true}, `{"confirmed":true}`},
		{Response{Cancelled: true}, `{"cancelled":true}`},
	} {
		b, err := json.Marshal(tc.resp)
		if err != nil || string(b) != tc.want {
			t.Errorf("%+v encodes as %s, want %s", tc.resp, b, tc.want)
		}
		var back Response
		if err := json.Unmarshal([]byte(tc.want), &back); err != nil || !reflect.DeepEqual(back, tc.resp) {
			t.Errorf("%s decodes as %+v", tc.want, back)
		}
	}
}
