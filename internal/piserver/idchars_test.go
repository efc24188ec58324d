package piserver

import (
	"regexp"
	"testing"
)

// The rules idChars replaced, kept as the oracle for it and for the
// decoder's fuzz test.
var (
	idRe        = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)
	requestIDRe = regexp.MustCompile(`^[a-zA-Z0-9:_.-]+$`)
)

func TestIDChars(t *testing.T) {
	for _, s := range []string{"", "a", "abc-DEF_0.9", "a:b", ":", "a b", "a\n", "\na", "é", "a/b", "a\x00", "..", "-", "x$", "a\xff"} {
		if got, want := idChars(s, false), idRe.MatchString(s); got != want {
			t.Errorf("idChars(%q, false) = %t, the regexp says %t", s, got, want)
		}
		if got, want := idChars(s, true), requestIDRe.MatchString(s); got != want {
			t.Errorf("idChars(%q, true) = %t, the regexp says %t", s, got, want)
		}
	}
}

func FuzzIDChars(f *testing.F) {
	for _, s := range []string{"", "a:b", "abc-DEF_0.9", "a\n", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := idChars(s, false), idRe.MatchString(s); got != want {
			t.Fatalf("idChars(%q, false) = %t, the regexp says %t", s, got, want)
		}
		if got, want := idChars(s, true), requestIDRe.MatchString(s); got != want {
			t.Fatalf("idChars(%q, true) = %t, the regexp says %t", s, got, want)
		}
	})
}
