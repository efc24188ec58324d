package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// ExportOptions configures ExportHTML.
type ExportOptions struct {
	// LeafID is the end of the branch to render; "" renders the current
	// branch.
	LeafID string
	// Title overrides the page title (default: the session name, else the
	// first user message, else the session id).
	Title string
}

// ExportHTML writes one branch of the session as a self-contained HTML
// page: inline CSS, no scripts, no external resources; images are inline
// data URLs. Everything from the session is escaped (page.write), so a
// transcript can hold any text without it becoming markup.
//
// The page shows every entry on the branch, including messages that a
// later compaction summarised away, since an export is a record of what
// happened rather than of what the model currently sees. Token and cost
// totals cover every assistant message in the file, on all branches:
// abandoned branches were paid for too.
func ExportHTML(w io.Writer, f *File, opts ExportOptions) error {
	f.mu.RLock()
	leaf := opts.LeafID
	if leaf == "" {
		leaf = f.leaf
	}
	path := f.branchLocked(leaf)
	var total llm.Usage
	var assistants int
	for _, e := range f.entries {
		if e.Type == TypeMessage && e.raw == nil && e.Message.Role == llm.RoleAssistant {
			total.Add(e.Message.Usage)
			assistants++
		}
	}
	var name string
	for i := len(f.entries) - 1; i >= 0; i-- {
		if e := f.entries[i]; e.Type == TypeSessionInfo && e.raw == nil {
			name = trimSpace(e.Name)
			break
		}
	}
	labels := make(map[string]string, len(f.labels))
	for k, v := range f.labels {
		labels[k] = v.label
	}
	f.mu.RUnlock()

	p := page{
		Name:      name,
		ID:        f.header.ID,
		Cwd:       f.header.Cwd,
		Parent:    f.header.ParentSession,
		Total:     total,
		Responses: assistants,
		Entries:   len(path),
	}
	if t, ok := parseISO(f.header.Timestamp); ok {
		p.Created = t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	for _, e := range path {
		if b, ok := renderEntry(e); ok {
			b.Label = labels[e.ID]
			p.Blocks = append(p.Blocks, b)
		}
		if e.Type == TypeMessage && e.raw == nil && e.Message.Role == llm.RoleUser && p.First == "" {
			p.First = e.Message.TextContent()
		}
	}
	p.Title = opts.Title
	if p.Title == "" {
		p.Title = firstNonEmpty(name, oneLine(p.First, 80), "Session "+f.header.ID)
	}
	return p.write(w)
}

type page struct {
	Title, Name, ID, Cwd, Parent, Created, First string
	Total                                        llm.Usage
	Responses, Entries                           int
	Blocks                                       []block
}

// block is one rendered entry. Kind picks the template branch and the CSS
// class.
type block struct {
	Kind   string // user, assistant, tool, bash, custom, summary, event, unknown
	Title  string
	Meta   string
	Time   string
	Label  string
	Error  string
	Parts  []part
	IsErr  bool
	Detail string // collapsed extra, e.g. compaction details
}

// part is one piece of a message body.
type part struct {
	Kind  string // text, thinking, call, image, pre
	Text  string
	Name  string
	Image string // a data URL, from imageURL
}

func renderEntry(e *Entry) (block, bool) {
	b := block{Time: shortTime(e.Timestamp)}
	if e.raw != nil {
		b.Kind, b.Title = "unknown", "Entry of type "+string(e.Type)
		b.Parts = []part{{Kind: "pre", Text: string(e.raw)}}
		return b, true
	}
	switch e.Type {
	case TypeMessage:
		return renderMessage(e.Message, b), true
	case TypeCustomMessage:
		b.Kind, b.Title = "custom", "Extension message · "+e.CustomType
		b.Parts = contentParts(e.Content)
		return b, true
	case TypeCompaction:
		b.Kind, b.Title = "summary", "Compaction"
		b.Meta = fmt.Sprintf("%s tokens summarised", thousands(e.TokensBefore))
		b.Parts = []part{{Kind: "text", Text: e.Summary}}
		b.Detail = prettyJSON(e.Details)
		return b, true
	case TypeBranchSummary:
		b.Kind, b.Title = "summary", "Branch summary"
		b.Meta = "from " + e.FromID
		b.Parts = []part{{Kind: "text", Text: e.Summary}}
		b.Detail = prettyJSON(e.Details)
		return b, true
	case TypeModelChange:
		b.Kind, b.Title = "event", "Model: "+e.Provider+"/"+e.ModelID
		return b, true
	case TypeThinkingLevelChange:
		b.Kind, b.Title = "event", "Thinking level: "+string(e.ThinkingLevel)
		return b, true
	case TypeSessionInfo:
		b.Kind, b.Title = "event", "Session named: "+e.Name
		if e.Name == "" {
			b.Title = "Session name cleared"
		}
		return b, true
	}
	// label entries show as the label on their target; custom entries are
	// extension state, not conversation.
	return b, false
}

func renderMessage(m *llm.Message, b block) block {
	switch m.Role {
	case llm.RoleUser:
		b.Kind, b.Title = "user", "User"
		b.Parts = contentParts(m.Content)
	case llm.RoleAssistant:
		b.Kind, b.Title = "assistant", "Assistant"
		b.Meta = m.Provider + "/" + m.Model
		if u := m.Usage; u.TotalTokens > 0 || u.Cost.Total > 0 {
			b.Meta += fmt.Sprintf(" · %s in · %s out", thousands(u.Input), thousands(u.Output))
			if u.CacheRead > 0 || u.CacheWrite > 0 {
				b.Meta += fmt.Sprintf(" · cache %s read, %s write", thousands(u.CacheRead), thousands(u.CacheWrite))
			}
			if u.Cost.Total > 0 {
				b.Meta += " · " + dollars(u.Cost.Total)
			}
		}
		b.Parts = contentParts(m.Content)
		switch m.StopReason {
		case llm.StopError, llm.StopAborted:
			b.Error = firstNonEmpty(m.ErrorMessage, string(m.StopReason))
		}
	case llm.RoleToolResult:
		b.Kind, b.Title, b.IsErr = "tool", "Tool result · "+m.ToolName, m.IsError
		b.Meta = m.ToolCallID
		b.Parts = contentParts(m.Content)
	case llm.RoleBashExecution:
		b.Kind, b.Title = "bash", "$ "+m.Command
		var meta []string
		if m.ExitCode != nil {
			meta = append(meta, "exit "+strconv.Itoa(*m.ExitCode))
			b.IsErr = *m.ExitCode != 0
		}
		if m.Cancelled {
			meta = append(meta, "cancelled")
		}
		if m.Truncated {
			meta = append(meta, "output truncated")
			if m.FullOutputPath != "" {
				meta = append(meta, "full output: "+m.FullOutputPath)
			}
		}
		if m.ExcludeFromContext {
			meta = append(meta, "not sent to the model")
		}
		b.Meta = strings.Join(meta, " · ")
		b.Parts = []part{{Kind: "pre", Text: m.Output}}
	case llm.RoleCustom:
		b.Kind, b.Title = "custom", "Extension message · "+m.CustomType
		b.Parts = contentParts(m.Content)
	case llm.RoleBranchSummary:
		b.Kind, b.Title = "summary", "Branch summary"
		b.Parts = []part{{Kind: "text", Text: m.Summary}}
	case llm.RoleCompactionSummary:
		b.Kind, b.Title = "summary", "Compaction"
		b.Parts = []part{{Kind: "text", Text: m.Summary}}
	}
	return b
}

func contentParts(content []llm.Content) []part {
	out := make([]part, 0, len(content))
	for _, c := range content {
		switch c.Type {
		case llm.ContentText:
			out = append(out, part{Kind: "text", Text: c.Text})
		case llm.ContentThinking:
			if c.Redacted {
				out = append(out, part{Kind: "thinking", Text: "(redacted thinking)"})
			} else {
				out = append(out, part{Kind: "thinking", Text: c.Thinking})
			}
		case llm.ContentToolCall:
			out = append(out, part{Kind: "call", Name: c.Name, Text: prettyJSON(c.Arguments)})
		case llm.ContentImage:
			if u, ok := imageURL(c.MimeType, c.Data); ok {
				out = append(out, part{Kind: "image", Image: u, Name: c.MimeType})
			} else {
				out = append(out, part{Kind: "text", Text: "[image: " + c.MimeType + "]"})
			}
		}
	}
	return out
}

// imageURL builds a data URL for raster types only, and only from data
// that is plain base64, so nothing in it can end the attribute or smuggle
// in a scriptable document (SVG).
func imageURL(mime, data string) (string, bool) {
	switch mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return "", false
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return "", false
		}
	}
	return "data:" + mime + ";base64," + data, true
}

func prettyJSON(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func shortTime(iso string) string {
	t, ok := parseISO(iso)
	if !ok {
		return iso
	}
	return t.UTC().Format(time.TimeOnly)
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func dollars(f float64) string {
	if f < 0.01 {
		return "$" + strconv.FormatFloat(f, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(f, 'f', 2, 64)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// write writes the page: a fixed layout around the session's values,
// each one escaped by writeEscaped, so no text from a session becomes
// markup. (It replaced an html/template whose package initialisation
// every agentd start paid for, export or not: 18 KB in 90 allocations;
// TestExportHTMLMatchesTemplate holds it to that template's output.)
func (p *page) write(w io.Writer) error {
	var b bytes.Buffer
	lit := func(s ...string) {
		for _, x := range s {
			b.WriteString(x)
		}
	}
	val := func(s string) { writeEscaped(&b, s) }
	lit(pageHead)
	val(p.Title)
	lit("</title>\n", pageStyle, "</head>\n<body>\n<main>\n<header>\n<h1>")
	val(p.Title)
	lit("</h1>\n<dl>\n")
	if p.Name != "" {
		lit("<dt>Name</dt><dd>")
		val(p.Name)
		lit("</dd>")
	}
	lit("\n<dt>Session</dt><dd>")
	val(p.ID)
	lit("</dd>\n")
	if p.Created != "" {
		lit("<dt>Created</dt><dd>")
		val(p.Created)
		lit("</dd>")
	}
	lit("\n<dt>Directory</dt><dd>")
	val(p.Cwd)
	lit("</dd>\n")
	if p.Parent != "" {
		lit("<dt>Forked from</dt><dd>")
		val(p.Parent)
		lit("</dd>")
	}
	lit("\n<dt>Entries</dt><dd>", strconv.Itoa(p.Entries), " on this branch · ", strconv.Itoa(p.Responses), " model responses in the session</dd>\n<dt>Tokens</dt><dd>")
	val(thousands(p.Total.Input))
	lit(" in · ")
	val(thousands(p.Total.Output))
	lit(" out")
	if p.Total.CacheRead != 0 || p.Total.CacheWrite != 0 {
		lit(" · cache ")
		val(thousands(p.Total.CacheRead))
		lit(" read, ")
		val(thousands(p.Total.CacheWrite))
		lit(" write")
	}
	lit("</dd>\n<dt>Cost</dt><dd>")
	val(dollars(p.Total.Cost.Total))
	lit("</dd>\n</dl>\n</header>\n")
	for _, bl := range p.Blocks {
		lit("\n<section class=\"entry ")
		val(bl.Kind)
		if bl.IsErr {
			lit(" err")
		}
		lit("\">\n<div class=\"head\"><b>")
		val(bl.Title)
		lit("</b>")
		if bl.Meta != "" {
			lit("<span>")
			val(bl.Meta)
			lit("</span>")
		}
		if bl.Label != "" {
			lit(`<span class="label">`)
			val(bl.Label)
			lit("</span>")
		}
		lit(`<span class="time">`)
		val(bl.Time)
		lit("</span></div>\n")
		for _, pt := range bl.Parts {
			switch pt.Kind {
			case "text":
				lit(`<div class="text">`)
				val(pt.Text)
				lit("</div>\n")
			case "thinking":
				lit(`<details class="thinking"><summary>Thinking</summary><div class="text">`)
				val(pt.Text)
				lit("</div></details>\n")
			case "call":
				lit(`<div class="call"><span class="name">`)
				val(pt.Name)
				lit("</span><pre>")
				val(pt.Text)
				lit("</pre></div>\n")
			case "image":
				// pt.Image is a data URL of base64 (imageURL), which
				// nothing but escaping needs to be done to.
				lit(`<img src="`)
				val(pt.Image)
				lit(`" alt="`)
				val(pt.Name)
				lit("\">\n")
			default:
				lit("<pre>")
				val(pt.Text)
				lit("</pre>\n")
			}
		}
		if bl.Error != "" {
			lit(`<div class="error">`)
			val(bl.Error)
			lit("</div>")
		}
		if bl.Detail != "" {
			lit("<details><summary>Details</summary><pre>")
			val(bl.Detail)
			lit("</pre></details>")
		}
		lit("\n</section>\n")
	}
	lit("\n</main>\n</body>\n</html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// writeEscaped writes s as HTML text or a quoted attribute's value, with
// the replacements html/template makes: the five characters that can
// end text or an attribute, '+' (a UTF-7 sign) and NUL.
func writeEscaped(b *bytes.Buffer, s string) {
	last := 0
	for i := 0; i < len(s); i++ {
		var r string
		switch s[i] {
		case 0:
			r = "\uFFFD"
		case '"':
			r = "&#34;"
		case '&':
			r = "&amp;"
		case '\'':
			r = "&#39;"
		case '+':
			r = "&#43;"
		case '<':
			r = "&lt;"
		case '>':
			r = "&gt;"
		default:
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString(r)
		last = i + 1
	}
	b.WriteString(s[last:])
}

const pageHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="agentd">
<title>`

const pageStyle = `<style>
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
`
