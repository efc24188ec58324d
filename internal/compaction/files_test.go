package compaction

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// TestFileOpsArguments pins which "path" of a file tool's arguments is
// taken: a non-empty string only, unescaped, the first of duplicates;
// anything else, or arguments that are not an object, names no file.
func TestFileOpsArguments(t *testing.T) {
	tests := []struct {
		args string
		want []string // the files read
	}{
		{`{"path":"a.go"}`, []string{"a.go"}},
		{`{ "offset" : 3 , "path" : "spaced.go" }`, []string{"spaced.go"}},
		{`{"path":"dir\/with \"quotes\" \\ and \u00e9 \ud83d\ude00.go"}`, []string{`dir/with "quotes" \ and é 😀.go`}},
		{`{"path":"lone \ud800.go"}`, []string{"lone \uFFFD.go"}},
		{`{"path":"first.go","path":"second.go"}`, []string{"first.go"}},
		{`{"p\u0061th":"escaped-key.go"}`, []string{"escaped-key.go"}},
		{`{"path":""}`, nil},
		{`{"path":5}`, nil},
		{`{"path":123456789012345678901234567890}`, nil},
		{`{"path":null}`, nil},
		{`{"path":true}`, nil},
		{`{"path":["a.go"]}`, nil},
		{`{"path":{"path":"nested.go"}}`, nil},
		{`{"file":"a.go"}`, nil},
		{`{}`, nil},
		{`[{"path":"a.go"}]`, nil},
		{`"a.go"`, nil},
		{``, nil},
	}
	for _, tt := range tests {
		var f fileOps
		f.addMessages([]*llm.Message{{Role: llm.RoleAssistant, Content: []llm.Content{
			{Type: llm.ContentToolCall, ID: "c1", Name: "read", Arguments: json.RawMessage(tt.args)},
		}}})
		read, modified := f.lists()
		if !slices.Equal(read, tt.want) || len(modified) != 0 { // slices.Equal takes nil and empty as equal
			t.Errorf("%s: read %q, modified %q; want read %q", tt.args, read, modified, tt.want)
		}
	}
}
