package transcript

import (
	"bytes"
	"html/template"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// templateHTML is the html/template the export page was rendered with
// before page.write; it stays here, in a test, as the oracle for
// page.write's output and escaping.
const templateHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="agentd">
<title>{{.Title}}</title>
<style>
:root { --bg:#fbfbfa; --fg:#1d1d1f; --muted:#6b6b70; --card:#fff; --line:#e3e3e6;
  --user:#eef4ff; --tool:#f6f6f7; --err:#fdecec; --errfg:#a21c1c; --sum:#fff8e6; --code:#f3f3f5; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#161618; --fg:#e8e8ea; --muted:#9a9aa0; --card:#1f1f22; --line:#333338;
    --user:#1d2636; --tool:#232326; --err:#3a1d1d; --errfg:#ff9c9c; --sum:#2e2a1c; --code:#2a2a2e; }
}
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:15px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, sans-serif; }
main { max-width: 860px; margin: 0 auto; padding: 24px 16px 64px; }
header { border-bottom:1px solid var(--line); margin-bottom:20px; padding-bottom:12px; }
h1 { font-size:22px; margin:0 0 8px; overflow-wrap:anywhere; }
dl { display:grid; grid-template-columns:max-content 1fr; gap:2px 12px; margin:0; font-size:13px; }
dt { color:var(--muted); } dd { margin:0; overflow-wrap:anywhere; }
.entry { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; margin:10px 0; }
.entry.user { background:var(--user); }
.entry.tool, .entry.bash { background:var(--tool); }
.entry.err { background:var(--err); }
.entry.summary { background:var(--sum); }
.entry.event { background:none; border:none; padding:2px 14px; color:var(--muted); font-size:13px; }
.head { display:flex; gap:8px; align-items:baseline; font-size:13px; color:var(--muted); }
.head b { color:var(--fg); font-weight:600; overflow-wrap:anywhere; }
.head .time { margin-left:auto; white-space:nowrap; }
.label { background:var(--code); border-radius:4px; padding:0 6px; }
.text { white-space:pre-wrap; overflow-wrap:anywhere; margin:6px 0; }
pre { background:var(--code); border-radius:6px; padding:8px 10px; margin:6px 0; overflow-x:auto;
  white-space:pre-wrap; overflow-wrap:anywhere; font:13px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
details { margin:6px 0; } summary { cursor:pointer; color:var(--muted); font-size:13px; }
.thinking { color:var(--muted); font-style:italic; }
.call .name { font:600 13px ui-monospace, SFMono-Regular, Menlo, monospace; }
.error { color:var(--errfg); font-weight:600; margin:6px 0; }
img { max-width:100%; border-radius:6px; border:1px solid var(--line); margin:6px 0; }
</style>
</head>
<body>
<main>
<header>
<h1>{{.Title}}</h1>
<dl>
{{if .Name}}<dt>Name</dt><dd>{{.Name}}</dd>{{end}}
<dt>Session</dt><dd>{{.ID}}</dd>
{{if .Created}}<dt>Created</dt><dd>{{.Created}}</dd>{{end}}
<dt>Directory</dt><dd>{{.Cwd}}</dd>
{{if .Parent}}<dt>Forked from</dt><dd>{{.Parent}}</dd>{{end}}
<dt>Entries</dt><dd>{{.Entries}} on this branch · {{.Responses}} model responses in the session</dd>
<dt>Tokens</dt><dd>{{thousands .Total.Input}} in · {{thousands .Total.Output}} out{{if or .Total.CacheRead .Total.CacheWrite}} · cache {{thousands .Total.CacheRead}} read, {{thousands .Total.CacheWrite}} write{{end}}</dd>
<dt>Cost</dt><dd>{{dollars .Total.Cost.Total}}</dd>
</dl>
</header>
{{range .Blocks}}
<section class="entry {{.Kind}}{{if .IsErr}} err{{end}}">
<div class="head"><b>{{.Title}}</b>{{if .Meta}}<span>{{.Meta}}</span>{{end}}{{if .Label}}<span class="label">{{.Label}}</span>{{end}}<span class="time">{{.Time}}</span></div>
{{range .Parts}}{{if eq .Kind "text"}}<div class="text">{{.Text}}</div>
{{else if eq .Kind "thinking"}}<details class="thinking"><summary>Thinking</summary><div class="text">{{.Text}}</div></details>
{{else if eq .Kind "call"}}<div class="call"><span class="name">{{.Name}}</span><pre>{{.Text}}</pre></div>
{{else if eq .Kind "image"}}<img src="{{safeURL .Image}}" alt="{{.Name}}">
{{else}}<pre>{{.Text}}</pre>
{{end}}{{end}}{{if .Error}}<div class="error">{{.Error}}</div>{{end}}{{if .Detail}}<details><summary>Details</summary><pre>{{.Detail}}</pre></details>{{end}}
</section>
{{end}}
</main>
</body>
</html>
`

// The export page is byte for byte what html/template made of it, for
// every kind of block and part, with values that need escaping in text,
// attributes and the title.
func TestExportHTMLMatchesTemplate(t *testing.T) {
	tmpl := oracle()
	const evil = "<script>alert('x')</script> \"><img src=x onerror=alert(2)> & a+b \x00 \u00e9 \xff"
	img, ok := imageURL("image/png", "iVBORw0KGgo+/A==")
	if !ok {
		t.Fatal("imageURL refused plain base64")
	}
	full := page{
		Title: evil, Name: evil, ID: "s1" + evil, Cwd: "/w/" + evil, Parent: evil, Created: "2026-01-02 03:04:05 UTC",
		Total:     llm.Usage{Input: 1234567, Output: 89, CacheRead: 1, CacheWrite: 0, Cost: llm.Cost{Total: 0.004}},
		Responses: 3, Entries: 12,
		Blocks: []block{
			{Kind: "user", Title: "User", Time: "03:04:05", Parts: []part{{Kind: "text", Text: evil}}},
			{Kind: "assistant", Title: "Assistant", Meta: evil, Label: evil, Time: evil, Error: evil, Parts: []part{
				{Kind: "thinking", Text: evil}, {Kind: "call", Name: evil, Text: evil}, {Kind: "image", Image: img, Name: "image/png"},
				{Kind: "text", Text: ""}}},
			{Kind: "tool", Title: "Tool result · " + evil, IsErr: true, Parts: []part{{Kind: "pre", Text: evil}}},
			{Kind: "summary", Title: "Compaction", Detail: evil, Parts: []part{{Kind: "text", Text: evil}}},
			{Kind: "event", Title: evil},
		},
	}
	tests := []struct {
		name string
		p    page
	}{
		{"every field", full},
		{"empty", page{Title: "Session x", ID: "x"}},
		{"cache write only, big cost", page{Title: "t", Total: llm.Usage{CacheWrite: 5, Cost: llm.Cost{Total: 12.5}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want, got bytes.Buffer
			if err := tmpl.Execute(&want, tc.p); err != nil {
				t.Fatal(err)
			}
			if err := tc.p.write(&got); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				g, w := got.String(), want.String()
				i := 0
				for i < len(g) && i < len(w) && g[i] == w[i] {
					i++
				}
				t.Fatalf("differs from the template at byte %d:\ngot  %q\nwant %q", i, clip(g[i:]), clip(w[i:]))
			}
			if strings.Contains(got.String(), "<script") {
				t.Fatal("markup from a value got through")
			}
		})
	}
}

func oracle() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"thousands": thousands,
		"dollars":   dollars,
		"safeURL":   func(s string) template.URL { return template.URL(s) },
	}).Parse(templateHTML))
}

// Any text in any place comes out as html/template would have written it.
func FuzzExportHTMLEscaping(f *testing.F) {
	for _, s := range []string{"", "<b>", "a+b&c", "\x00\xff\u2028", `"'><`} {
		f.Add(s)
	}
	tmpl := oracle()
	f.Fuzz(func(t *testing.T, s string) {
		p := page{Title: s, Name: s, Cwd: s, Blocks: []block{{Kind: s, Title: s, Meta: s, Label: s, Time: s, Error: s, Detail: s,
			Parts: []part{{Kind: "text", Text: s}, {Kind: "call", Name: s, Text: s}, {Kind: "image", Image: "data:image/gif;base64,R0lG", Name: s}}}}}
		var want, got bytes.Buffer
		if err := tmpl.Execute(&want, p); err != nil {
			t.Skip(err)
		}
		if err := p.write(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("%q: page.write differs from the template", s)
		}
	})
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
