package session_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/session"
)

// TestTreeOpaquePreviews pins what a node shows of entries agentd keeps
// but cannot decode (a field of the wrong type makes an entry opaque),
// read from the line itself: strings with escapes, lone surrogates,
// fields of the wrong type, missing fields, custom data as written.
func TestTreeOpaquePreviews(t *testing.T) {
	lines := []string{
		// Messages: the role, if a string; the content's strings and
		// text/thinking/content fields; else text, output, command or
		// summary.
		msgLine("m1", "", 1, `{"role":"user","content":[{"type":"text","text":"a \"quoted\" \\ \u00e9 \ud83d\ude00 b"},{"type":"video","url":"x"}],"timestamp":1}`),
		msgLine("m2", "", 2, `{"role":"user","content":[{"type":"text","text":"lone \ud800 surrogate"},{"type":"video"}],"timestamp":1}`),
		msgLine("m3", "", 3, `{"role":5,"content":[{"type":"video"},"plain string",{"type":"x","thinking":"thought"},{"type":"x","content":"inner"},{"type":"x","text":5,"content":"fallback"}],"timestamp":1}`),
		msgLine("m4", "", 4, `{"role":"bashExecution","content":5,"text":7,"output":"out\tput","command":"ls","timestamp":1}`),
		msgLine("m5", "", 5, `{"role":"custom","content":{"text":"not an array"},"summary":"the summary","timestamp":"x"}`),
		msgLine("m6", "", 6, `{"role":"user","content":"a string","timestamp":"x"}`),
		msgLine("m7", "", 7, `{"role":"user","timestamp":"x","output":""}`),
		msgLine("m8", "", 8, `{"role":"user","content":[{"type":"video"}],"content":[{"type":"text","text":"duplicate"}],"timestamp":1}`),
		// Custom entries: the custom type if a non-empty string, else the
		// data: a string unescaped, anything else as written.
		`{"type":"custom","customType":5,"data":{ "k" : [1, 2], "s":"x\ny\u00e9" },` + env("c1", "", 9) + `}`,
		`{"type":"custom","customType":5,"data":"text \\n \ud800 \u0041",` + env("c2", "", 10) + `}`,
		`{"type":"custom","customType":5,"data":123456789012345678901234567890,` + env("c3", "", 11) + `}`,
		`{"type":"custom","customType":5,"data":null,` + env("c4", "", 12) + `}`,
		`{"type":"custom","customType":5,` + env("c5", "", 13) + `}`,
		`{"type":"custom","customType":5,"d\u0061ta":"escaped key",` + env("c6", "", 14) + `}`,
		`{"type":"custom","customType":"shown","data":1,"extra":{},` + env("c7", "", 15) + `,"display":5}`,
		`{"type":"custom","customType":5,"data":[1,{"a":"b"}],"data":"second",` + env("c8", "", 16) + `}`,
		`{"type":"custom","customType":5,"data":-1.5e3,` + env("c9", "", 17) + `}`,
		`{"type":"custom","customType":5,"data":true,` + env("ca", "", 18) + `}`,
		// Non-opaque custom entries for comparison.
		`{"type":"custom","data":{ "k" : [1, 2] },` + env("cb", "", 19) + `}`,
		`{"type":"custom","data":"text \ud800 \u0041",` + env("cc", "", 20) + `}`,
		// The other types.
		`{"type":"custom_message","customType":5,"content":[{"type":"text","text":"cm text"}],"display":true,` + env("cm", "", 21) + `}`,
		`{"type":"custom_message","customType":"n","content":"cm string","display":"yes",` + env("cn", "", 22) + `}`,
		`{"type":"branch_summary","fromId":5,"summary":"sum\u00e9",` + env("bs", "", 23) + `}`,
		`{"type":"compaction","summary":7,"firstKeptEntryId":"x","tokensBefore":"many",` + env("cp", "", 24) + `}`,
		`{"type":"model_change","provider":5,"modelId":"m",` + env("mc", "", 25) + `}`,
		`{"type":"model_change","provider":"p","modelId":"m","extra":1,"thinkingLevel":5,` + env("md", "", 26) + `}`,
		`{"type":"thinking_level_change","thinkingLevel":5,` + env("tl", "", 27) + `}`,
		`{"type":"label","targetId":5,"label":"lbl",` + env("lb", "", 28) + `}`,
		`{"type":"label","targetId":"m1","label":6,` + env("lc", "", 29) + `}`,
		`{"type":"session_info","name":5,` + env("si", "", 30) + `}`,
		`{"type":"future_thing","text":"not shown",` + env("fx", "", 31) + `}`,
	}
	p := writeSession(t, lines...)
	h := newHarness(t, func(c *session.Config) { c.Open = p })
	var got []string
	for _, n := range h.s.Tree().Nodes {
		got = append(got, nodeLine(n))
	}
	want := []string{
		"m1< message/user a \"quoted\" \\ é 😀 b",
		"m2< message/user lone � surrogate",
		"m3< message plain stringthoughtinnerfallback",
		"m4< message/bashExecution out put",
		"m5< message/custom not an array",
		"m6< message/user a string",
		"m7< message/user [user]",
		"m8< message/user duplicate",
		"c1< custom { \"k\" : [1, 2], \"s\":\"x\\ny\\u00e9\" }",
		"c2< custom text \\n � A",
		"c3< custom 123456789012345678901234567890",
		"c4< custom null",
		"c5< custom [custom]",
		"c6< custom escaped key",
		"c7< custom shown",
		"c8< custom [1,{\"a\":\"b\"}]",
		"c9< custom -1.5e3",
		"ca< custom true",
		"cb< custom { \"k\" : [1, 2] }",
		"cc< custom text � A",
		"cm< custom_message cm text",
		"cn< custom_message cm string",
		"bs< branch_summary sumé",
		"cp< compaction [compaction]",
		"mc< model_change m",
		"md< model_change p/m",
		"tl< thinking_level_change [thinking_level_change]",
		"lb< label lbl",
		"lc< label (cleared) → m1",
		"si< session_info [session_info]",
		"fx< future_thing [future_thing]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree\n got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// BenchmarkTreeOpaque measures get_tree on a session of 10,000 entries
// agentd keeps opaque (messages with a content block of a type it does
// not know), each a couple of kilobytes long: their previews are read
// from the lines.
func BenchmarkTreeOpaque(b *testing.B) {
	benchTree(b, func(text string) string {
		return fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q},{"type":"video","url":"v"}],"timestamp":1}`, text)
	})
}
