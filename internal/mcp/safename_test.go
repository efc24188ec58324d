package mcp

import (
	"regexp"
	"testing"
)

// unsafeName is the rule safeName replaced, kept as its oracle.
var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

func TestSafeName(t *testing.T) {
	for _, s := range []string{"", "fs", "my server", "a.b/c", "ünï", "a\xffb", "x-y_z9", "日本"} {
		if got, want := safeName(s), unsafeName.ReplaceAllString(s, "_"); got != want {
			t.Errorf("safeName(%q) = %q, the regexp gives %q", s, got, want)
		}
	}
}

func FuzzSafeName(f *testing.F) {
	for _, s := range []string{"", "my server", "a\xffb", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := safeName(s), unsafeName.ReplaceAllString(s, "_"); got != want {
			t.Fatalf("safeName(%q) = %q, the regexp gives %q", s, got, want)
		}
	})
}
