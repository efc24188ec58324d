package jsonfield

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStrings pins what a field reads as, for every kind of value and
// the odd ones (wrong types, escapes, lone surrogates, duplicate and
// escaped keys): a string's text, decoded as encoding/json decodes it,
// and "" for anything else.
func TestStrings(t *testing.T) {
	tests := []struct {
		doc, path string
		str       string
		exists    bool
	}{
		{"{\"a\":\"x\"}", "a", "x", true},
		{"{\"a\":\"x\"}", "b", "", false},
		{"{\"a\":null}", "a", "", true},
		{"{\"a\":true}", "a", "", true},
		{"{\"a\":false}", "a", "", true},
		{"{\"a\":0}", "a", "", true},
		{"{\"a\":12}", "a", "", true},
		{"{\"a\":1.5}", "a", "", true},
		{"{\"a\":123456789012345678901234567890}", "a", "", true},
		{"{\"a\":\"12\"}", "a", "12", true},
		{"{\"a\":\"-12\"}", "a", "-12", true},
		{"{\"a\":\"1.9\"}", "a", "1.9", true},
		{"{\"a\":\"1e3\"}", "a", "1e3", true},
		{"{\"a\":\"99999999999999999999999\"}", "a", "99999999999999999999999", true},
		{"{\"a\":\"-5\"}", "a", "-5", true},
		{"{\"a\":\"abc\"}", "a", "abc", true},
		{"{\"a\":\"\"}", "a", "", true},
		{"{\"a\":\"true\"}", "a", "true", true},
		{"{\"a\":\"TRUE\"}", "a", "TRUE", true},
		{"{\"a\":\"t\"}", "a", "t", true},
		{"{\"a\":\"1\"}", "a", "1", true},
		{"{\"a\":\"yes\"}", "a", "yes", true},
		{"{\"a\":{\"b\":1}}", "a", "", true},
		{"{\"a\":[1,2]}", "a", "", true},
		{"{\"a\":[]}", "a", "", true},
		{"{\"a\":{}}", "a", "", true},
		{"{\"a\":{\"b\":{\"c\":\"deep\"}}}", "a.b.c", "deep", true},
		{"{\"a\":{\"b\":[{\"c\":1}]}}", "a.b.c", "", false},
		{"{\"a\":\"s\"}", "a.b", "", false},
		{"{\"a\":[{\"b\":1}]}", "a.b", "", false},
		{"[{\"a\":1}]", "a", "", false},
		{"\"str\"", "a", "", false},
		{"{\"a\":1,\"a\":2}", "a", "", true},
		{"{\"a\":{\"b\":1},\"a\":{\"b\":2}}", "a.b", "", true},
		{"{\"d\\u0061ta\":\"esc key\"}", "data", "esc key", true},
		{"{\"a\":\"tab\\there \\\"q\\\" \\\\ \\/ \\u00e9 \\ud83d\\ude00 end\"}", "a", "tab\there \"q\" \\ / é 😀 end", true},
		{"{\"a\":\"lone \\ud800 here\"}", "a", "lone � here", true},
		{"{\"a\":\"lone low \\udc00\"}", "a", "lone low �", true},
		{"{\"a\":\"at end \\ud83d\"}", "a", "at end �", true},
		{"{\"a\":\"pair reversed \\ude00\\ud83d x\"}", "a", "pair reversed �� x", true},
		{"{\"a\":\"high high \\ud800\\ud800 x\"}", "a", "high high �� x", true},
		{"{\"a\":\"lone before a letter \\ud800\\u0041 x\"}", "a", "lone before a letter �A x", true},
		{"{\"a\":\"lone before a pair \\ud800\\udbff\\udfff x\"}", "a", "lone before a pair �\U0010ffff x", true},
		{"{\"a\":\"escaped backslash \\\\ud800 x\"}", "a", "escaped backslash \\ud800 x", true},
		{"{\"a\":\"escaped backslash then lone \\\\\\ud800 x\"}", "a", "escaped backslash then lone \\� x", true},
		{"{\"a\":\"nul \\u0000 x\"}", "a", "nul \x00 x", true},
		{"{\"a\":\"bad utf8 \xff\xfe x\"}", "a", "bad utf8 \xff\xfe x", true},
		{"{\"a\":\"two lone \\udbff and \\udfff\"}", "a", "two lone � and �", true},
		{" { \"a\" : \"spaced\" } ", "a", "spaced", true},
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
		if got := f != nil; got != tt.exists {
			t.Errorf("exists(%s %s) = %v, want %v", tt.doc, tt.path, got, tt.exists)
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
	a := String(v.Get("a"))
	if _, err := p.Parse([]byte(`{"a":"XXXXX","n":99999,"o":{"k":"w"}}`)); err != nil {
		t.Fatal(err)
	}
	if a != "first" {
		t.Errorf("after the next parse: %q", a)
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

// FuzzStringMatchesEncodingJSON checks the package's promise on any
// string literal: valid JSON (in valid UTF-8, which encoding/json would
// otherwise rewrite) reads as encoding/json reads it, escapes and lone
// surrogates included.
func FuzzStringMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`x`, `\ud800`, `\ud800\u0041`, `\ude00\ud83d`, `\ud800\udbff\udfff`, `\\ud800`, `\ud83d\ude00`, `\u00e9\t`} {
		f.Add(s)
	}
	var p Parser
	f.Fuzz(func(t *testing.T, lit string) {
		doc := []byte(`{"a":"` + lit + `"}`)
		var want struct{ A string }
		if !utf8.Valid(doc) || json.Unmarshal(doc, &want) != nil {
			return
		}
		v, err := p.Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v; encoding/json reads it", doc, err)
		}
		if got := String(v.Get("a")); got != want.A {
			t.Errorf("%s: %q, encoding/json %q", doc, got, want.A)
		}
	})
}
