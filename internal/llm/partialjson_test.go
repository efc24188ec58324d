package llm_test

import (
	"encoding/json"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

func TestRepairJSONObject(t *testing.T) {
	tests := []struct{ in, want string }{
		{``, `{}`},
		{`[1,2`, `{}`},
		{`{`, `{}`},
		{`{"command"`, `{}`},
		{`{"command":`, `{}`},
		{`{"command":"echo hel`, `{"command":"echo hel"}`},
		{`{"command":"echo \"q`, `{"command":"echo \"q"}`},
		{`{"command":"a\`, `{"command":"a"}`},
		{`{"a":1,"b":[1,2,{"c":tr`, `{"a":1,"b":[1,2,{}]}`},
		{`{"a":1,"b":[1,2`, `{"a":1,"b":[1,2]}`},
		{`{"a":12`, `{"a":12}`},
		{`{"a":-`, `{}`},
		{`{"a":"x","b`, `{"a":"x"}`},
		{`{"a":{"b":{"c":"deep`, `{"a":{"b":{"c":"deep"}}}`},
		{` {"a": 1 , "b" : "two"} `, `{"a":1,"b":"two"}`},
		{`{"a":1}}garbage`, `{"a":1}`},
		{`{"path":"C:\\dir\\`, `{"path":"C:\\dir\\"}`},
	}
	for _, tt := range tests {
		got := llm.RepairJSONObject([]byte(tt.in))
		if string(got) != tt.want {
			t.Errorf("RepairJSONObject(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzRepairJSONObject(f *testing.F) {
	for _, s := range []string{`{"a":"b`, `{"a":[1,{"b":null`, `{"\u00e9":"\ud83d`, `{"a":1e`, `{{{{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := llm.RepairJSONObject(in)
		var obj map[string]any
		if err := json.Unmarshal(out, &obj); err != nil {
			t.Fatalf("RepairJSONObject(%q) = %q: not an object: %v", in, out, err)
		}
		if json.Valid(in) && len(in) > 0 {
			var want map[string]any
			if json.Unmarshal(in, &want) == nil && len(obj) != len(want) {
				t.Fatalf("valid object %q lost keys: %q", in, out)
			}
		}
	})
}
