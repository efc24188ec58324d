package config

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// documentedSize reads v as ByteSize documents it, written apart from
// Set: an integer (decimal, optionally signed) with an optional unit B,
// KiB, MiB, GiB or TiB, space around either allowed; the size must be
// neither negative nor beyond int64.
func documentedSize(v string) (int64, bool) {
	s, mult := strings.TrimSpace(v), int64(1)
	for _, u := range []struct {
		name  string
		shift uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}} {
		if rest, ok := strings.CutSuffix(s, u.name); ok {
			s, mult = strings.TrimSpace(rest), int64(1)<<u.shift
			break
		}
	}
	return documentedInt(s, big.NewInt(mult))
}

// documentedInt reads s as an optionally signed decimal integer times
// mult, within 0..MaxInt64.
func documentedInt(s string, mult *big.Int) (int64, bool) {
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, _ := new(big.Int).SetString(digits, 10)
	if strings.HasPrefix(s, "-") {
		n.Neg(n)
	}
	n.Mul(n, mult)
	if n.Sign() < 0 || !n.IsInt64() {
		return 0, false
	}
	return n.Int64(), true
}

func FuzzByteSize(f *testing.F) {
	for _, v := range []string{"", "0", "1", "512MiB", "2 GiB", " 3 KiB ", "1000000", "7B", "8TiB",
		"8388607TiB", "8388608TiB", "9223372036854775807", "9223372036854775807B", "9223372036854775808",
		"-1", "-0", "+5", "--5", "+-5", "1KB", "1kib", "MiB", "1.5GiB", "1e9", "0x10", "1_000", "5iB", "5KiBB",
		"\u00a05MiB\u00a0", "5\u2003GiB", "١٢MiB"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var b ByteSize
		err := b.Set(v)
		want, ok := documentedSize(v)
		switch {
		case ok != (err == nil):
			t.Fatalf("Set(%q): %v; the documented form says accepted=%v", v, err, ok)
		case err != nil && (b != 0 || !strings.Contains(err.Error(), "want a size")):
			t.Fatalf("Set(%q) refused with %v and set %d", v, err, b)
		case err != nil:
			return
		case b < 0 || int64(b) != want:
			t.Fatalf("Set(%q) = %d, want %d", v, b, want)
		}
		// What String writes (the flag's default in --help) reads back.
		if b != 0 {
			var again ByteSize
			if err := again.Set(b.String()); err != nil || again != b {
				t.Fatalf("Set(%q) = %d, and Set(String()=%q) = %d, %v", v, b, b.String(), again, err)
			}
		}
	})
}

func FuzzGCPercent(f *testing.F) {
	for _, v := range []string{"", "0", "100", "200", "off", "OFF", "oFf", "-1", "-0", "+50", " 100", "1e3",
		"9223372036854775807", "9223372036854775808", "offf", "of"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := parseGCPercent(v)
		off := strings.EqualFold(v, "off")
		want, ok := documentedInt(v, big.NewInt(1))
		if off {
			want, ok = -1, true
		}
		switch {
		case ok != (err == nil):
			t.Fatalf("parseGCPercent(%q): %d, %v; want accepted=%v", v, n, err, ok)
		case err != nil:
			return
		case int64(n) != want || n < -1 || int64(n) > math.MaxInt:
			t.Fatalf("parseGCPercent(%q) = %d, want %d", v, n, want)
		}
		// The flag reads what it writes.
		var x, y int
		if err := (gcPercent{&x}).Set(v); err != nil || x != n {
			t.Fatalf("--gc-percent %q: %d, %v; parseGCPercent gave %d", v, x, err, n)
		}
		if err := (gcPercent{&y}).Set(gcPercent{&x}.String()); err != nil || y != x {
			t.Fatalf("--gc-percent %q reads %d, writes %q, which reads %d, %v", v, x, gcPercent{&x}.String(), y, err)
		}
	})
}
