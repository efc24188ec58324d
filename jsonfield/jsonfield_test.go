package jsonfield

import (
	"strings"
	"testing"
)

// TestConversions pins what a field reads as, for every kind of value and
// the odd ones (wrong types, numbers beyond int64 and float64, escapes,
// lone surrogates, duplicate and escaped keys). The expectations are what
// gjson, which agentd's readers used before, gives for the same path.
func TestConversions(t *testing.T) {
	tests := []struct {
		doc, path string
		str       string
		i         int64
		u         uint64
		b         bool
		exists    bool
	}{
		{"{\"a\":\"x\"}", "a", "x", 0, 0, false, true},
		{"{\"a\":\"x\"}", "b", "", 0, 0, false, false},
		{"{\"a\":null}", "a", "", 0, 0, false, true},
		{"{\"a\":true}", "a", "true", 1, 1, true, true},
		{"{\"a\":false}", "a", "false", 0, 0, false, true},
		{"{\"a\":0}", "a", "0", 0, 0, false, true},
		{"{\"a\":-0}", "a", "-0", 0, 0, false, true},
		{"{\"a\":12}", "a", "12", 12, 12, true, true},
		{"{\"a\":-12}", "a", "-12", -12, 0, true, true},
		{"{\"a\":1.5}", "a", "1.5", 1, 1, true, true},
		{"{\"a\":-1.5}", "a", "-1.5", -1, 0, true, true},
		{"{\"a\":1e3}", "a", "1000", 1000, 1000, true, true},
		{"{\"a\":1E-3}", "a", "0.001", 0, 0, true, true},
		{"{\"a\":1.0}", "a", "1", 1, 1, true, true},
		{"{\"a\":9007199254740993}", "a", "9007199254740993", 9007199254740993, 9007199254740993, true, true},
		{"{\"a\":9223372036854775807}", "a", "9223372036854775807", 9223372036854775807, 9223372036854775807, true, true},
		{"{\"a\":9223372036854775808}", "a", "9223372036854775808", 9223372036854775807, 9223372036854775808, true, true},
		{"{\"a\":-9223372036854775809}", "a", "-9223372036854775809", -9223372036854775808, 0, true, true},
		{"{\"a\":18446744073709551615}", "a", "18446744073709551615", 9223372036854775807, 18446744073709551615, true, true},
		{"{\"a\":18446744073709551616}", "a", "18446744073709551616", 9223372036854775807, 18446744073709551615, true, true},
		{"{\"a\":123456789012345678901234567890}", "a", "123456789012345678901234567890", 9223372036854775807, 18446744073709551615, true, true},
		{"{\"a\":-123456789012345678901234567890}", "a", "-123456789012345678901234567890", -9223372036854775808, 0, true, true},
		{"{\"a\":1e400}", "a", "+Inf", 9223372036854775807, 18446744073709551615, true, true},
		{"{\"a\":-1e400}", "a", "-Inf", -9223372036854775808, 0, true, true},
		{"{\"a\":1e19}", "a", "10000000000000000000", 9223372036854775807, 10000000000000000000, true, true},
		{"{\"a\":\"12\"}", "a", "12", 12, 12, false, true},
		{"{\"a\":\"-12\"}", "a", "-12", -12, 0, false, true},
		{"{\"a\":\"1.9\"}", "a", "1.9", 1, 1, false, true},
		{"{\"a\":\"1e3\"}", "a", "1e3", 1000, 1000, false, true},
		{"{\"a\":\"99999999999999999999999\"}", "a", "99999999999999999999999", 9223372036854775807, 18446744073709551615, false, true},
		{"{\"a\":\"-5\"}", "a", "-5", -5, 0, false, true},
		{"{\"a\":\"abc\"}", "a", "abc", 0, 0, false, true},
		{"{\"a\":\"\"}", "a", "", 0, 0, false, true},
		{"{\"a\":\"true\"}", "a", "true", 0, 0, true, true},
		{"{\"a\":\"TRUE\"}", "a", "TRUE", 0, 0, true, true},
		{"{\"a\":\"t\"}", "a", "t", 0, 0, true, true},
		{"{\"a\":\"1\"}", "a", "1", 1, 1, true, true},
		{"{\"a\":\"yes\"}", "a", "yes", 0, 0, false, true},
		{"{\"a\":{\"b\":1}}", "a", "{\"b\":1}", 0, 0, false, true},
		{"{\"a\":[1,2]}", "a", "[1,2]", 0, 0, false, true},
		{"{\"a\":[]}", "a", "[]", 0, 0, false, true},
		{"{\"a\":{}}", "a", "{}", 0, 0, false, true},
		{"{\"a\":{\"b\":{\"c\":\"deep\"}}}", "a.b.c", "deep", 0, 0, false, true},
		{"{\"a\":{\"b\":[{\"c\":1}]}}", "a.b.c", "", 0, 0, false, false},
		{"{\"a\":\"s\"}", "a.b", "", 0, 0, false, false},
		{"{\"a\":[{\"b\":1}]}", "a.b", "", 0, 0, false, false},
		{"[{\"a\":1}]", "a", "", 0, 0, false, false},
		{"\"str\"", "a", "", 0, 0, false, false},
		{"{\"a\":1,\"a\":2}", "a", "1", 1, 1, true, true},
		{"{\"a\":{\"b\":1},\"a\":{\"b\":2}}", "a.b", "1", 1, 1, true, true},
		{"{\"d\\u0061ta\":\"esc key\"}", "data", "esc key", 0, 0, false, true},
		{"{\"a\":\"tab\\there \\\"q\\\" \\\\ \\/ \\u00e9 \\ud83d\\ude00 end\"}", "a", "tab\there \"q\" \\ / é 😀 end", 0, 0, false, true},
		{"{\"a\":\"lone \\ud800 here\"}", "a", "lone � here", 0, 0, false, true},
		{"{\"a\":\"lone low \\udc00\"}", "a", "lone low �", 0, 0, false, true},
		{"{\"a\":\"at end \\ud83d\"}", "a", "at end �", 0, 0, false, true},
		{"{\"a\":\"pair reversed \\ude00\\ud83d x\"}", "a", "pair reversed � x", 0, 0, false, true},
		{"{\"a\":\"high high \\ud800\\ud800 x\"}", "a", "high high � x", 0, 0, false, true},
		{"{\"a\":\"escaped backslash \\\\ud800 x\"}", "a", "escaped backslash \\ud800 x", 0, 0, false, true},
		{"{\"a\":\"escaped backslash then lone \\\\\\ud800 x\"}", "a", "escaped backslash then lone \\� x", 0, 0, false, true},
		{"{\"a\":\"nul \\u0000 x\"}", "a", "nul \x00 x", 0, 0, false, true},
		{"{\"a\":\"bad utf8 \xff\xfe x\"}", "a", "bad utf8 \xff\xfe x", 0, 0, false, true},
		{"{\"a\":\"two lone \\udbff and \\udfff\"}", "a", "two lone � and �", 0, 0, false, true},
		{" { \"a\" : \"spaced\" } ", "a", "spaced", 0, 0, false, true},
	}
	var p Parser
	for _, tt := range tests {
		v, err := p.Parse([]byte(tt.doc))
		if err != nil {
			t.Errorf("%s: %v", tt.doc, err)
			continue
		}
		f := v.Get(strings.Split(tt.path, ".")...)
		if got := String(f); got != tt.str {
			t.Errorf("String(%s %s) = %q, want %q", tt.doc, tt.path, got, tt.str)
		}
		if got := Int(f); got != tt.i {
			t.Errorf("Int(%s %s) = %d, want %d", tt.doc, tt.path, got, tt.i)
		}
		if got := Uint(f); got != tt.u {
			t.Errorf("Uint(%s %s) = %d, want %d", tt.doc, tt.path, got, tt.u)
		}
		if got := Bool(f); got != tt.b {
			t.Errorf("Bool(%s %s) = %v, want %v", tt.doc, tt.path, got, tt.b)
		}
		if got := f != nil; got != tt.exists {
			t.Errorf("exists(%s %s) = %v, want %v", tt.doc, tt.path, got, tt.exists)
		}
		wantOnly := ""
		if IsString(f) {
			wantOnly = tt.str
		}
		if got := StringOnly(f); got != wantOnly {
			t.Errorf("StringOnly(%s %s) = %q, want %q", tt.doc, tt.path, got, wantOnly)
		}
	}
}

// TestStringsOutliveTheParse checks that what the readers return is a
// copy: a parser reused for the next document overwrites its buffer,
// and a string pointing into it would change under its holder.
func TestStringsOutliveTheParse(t *testing.T) {
	var p Parser
	v, err := p.Parse([]byte(`{"a":"first","n":12345,"o":{"k":"v"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, n, o := String(v.Get("a")), String(v.Get("n")), String(v.Get("o"))
	only := StringOnly(v.Get("a"))
	if _, err := p.Parse([]byte(`{"a":"XXXXX","n":99999,"o":{"k":"w"}}`)); err != nil {
		t.Fatal(err)
	}
	if a != "first" || only != "first" || n != "12345" || o != `{"k":"v"}` {
		t.Errorf("after the next parse: %q %q %q %q", a, only, n, o)
	}
}

// TestMalformed checks a document that is not valid JSON is refused
// whole, rather than read as far as it goes.
func TestMalformed(t *testing.T) {
	var p Parser
	for _, doc := range []string{``, `{`, `{"a":"x"`, `{"a":"x"} tail`, `not json`, `{"a":"x",}`, `{"a":"\ud800`} {
		if v, err := p.Parse([]byte(doc)); err == nil {
			t.Errorf("%q parsed as %s", doc, v)
		}
	}
}
