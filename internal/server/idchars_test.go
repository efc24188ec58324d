package server

import (
	"regexp"
	"testing"
)

// idRe is the rule idChars replaced, kept as its oracle.
var idRe = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)

func FuzzIDChars(f *testing.F) {
	for _, s := range []string{"", "a", "abc-DEF_0.9", "a:b", "a\n", "é", "a\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := idChars(s), idRe.MatchString(s); got != want {
			t.Fatalf("idChars(%q) = %t, the regexp says %t", s, got, want)
		}
	})
}
