package convapi

import (
	"net/http"
	"testing"
)

// TestFilesErrorNamesTheField: gptme's clients (and its own server
// tests) look for the word "files" in the error of a message whose
// files list holds a null or empty entry, on both a new conversation's
// messages and a posted one.
func TestFilesErrorNamesTheField(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	fx.create("c", map[string]any{})
	tests := []struct {
		name, method, path string
		body               any
		msg                string
	}{
		{"put null entry", "PUT", "/api/v2/conversations/n1",
			map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi", "files": []any{nil}}}},
			`invalid path in files: ""`},
		{"put empty entry", "PUT", "/api/v2/conversations/n2",
			map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi", "files": []any{""}}}},
			`invalid path in files: ""`},
		{"post null entry", "POST", "/api/v2/conversations/c",
			map[string]any{"role": "user", "content": "hi", "files": []any{nil}},
			`invalid path in files: ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, fx.do(tt.method, tt.path, tt.body), http.StatusBadRequest, tt.msg)
		})
	}
}
