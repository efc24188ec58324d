package cluster

import (
	"regexp"
	"strings"
	"testing"
)

// idRule is the rule ValidID implements, as the regular expression that
// states it.
var idRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"n1", true},
		{"A-z_09", true},
		{strings.Repeat("a", 200), true},
		{strings.Repeat("a", 201), false},
		{"", false},
		{"a.b", false}, // a NATS subject separator
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
	} {
		if got := ValidID(tc.id); got != tc.want {
			t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

// FuzzValidID checks ValidID against the regular expression of its rule.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"n1", "", "a.b", strings.Repeat("x", 200), strings.Repeat("x", 201), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidID(id), idRule.MatchString(id); got != want {
			t.Fatalf("ValidID(%q) = %v, the rule says %v", id, got, want)
		}
	})
}
