package commands

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Template is a prompt template: a Markdown file in a prompts/ directory
// whose body, with its arguments put in, stands for "/name args".
type Template struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// ArgumentHint is the frontmatter's "argument-hint", shown by
	// completions ("<file>").
	ArgumentHint string `json:"argumentHint,omitempty"`
	Path         string `json:"path"`
	// Location is "user" for a global template, "project" for one of
	// the session's project.
	Location string `json:"location"`
	Body     string `json:"-"`
}

// templatesIn loads the templates directly in dir (pi's discovery is not
// recursive). A file whose frontmatter does not parse still loads, as
// all body, with a warning.
func templatesIn(dir, location string, warn func(Warning)) []Template {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []Template
	for i, e := range entries {
		if i >= maxWalk {
			warn(Warning{Path: dir, Message: "too many entries; the rest are not loaded as templates"})
			break
		}
		name := e.Name()
		if !strings.HasSuffix(name, ".md") || strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		text, err := readBounded(p)
		if err != nil {
			warn(Warning{Path: p, Message: err.Error()})
			continue
		}
		fields, body, err := splitFrontmatter(text)
		if err != nil {
			warn(Warning{Path: p, Message: err.Error()})
		}
		t := Template{Name: strings.TrimSuffix(name, ".md"), Path: p, Location: location, Body: strings.TrimSpace(body)}
		t.Description, _ = str(fields, "description")
		t.Description = strings.TrimSpace(t.Description)
		t.ArgumentHint, _ = str(fields, "argument-hint")
		if t.Description == "" {
			t.Description = firstTextLine(t.Body)
		}
		if strings.ContainsAny(t.Name, " \t\n") || t.Name == "" {
			warn(Warning{Path: p, Message: "a template's file name must not contain spaces; not loaded"})
			continue
		}
		out = append(out, t)
	}
	return out
}

// firstTextLine is a template's description when its frontmatter gives
// none: its first non-empty line, cut to 60 characters as pi does.
func firstTextLine(body string) string {
	for line := range strings.SplitSeq(body, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > 60 {
			return string(r[:60]) + "..."
		}
		return line
	}
	return ""
}

// SplitArgs splits a command's argument string as pi does: on spaces and
// tabs, with single or double quotes keeping a space inside one
// argument.
func SplitArgs(s string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	have := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, have = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if have || cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if have || cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// placeholder matches what Substitute replaces: $1 $2 ..., $@,
// $ARGUMENTS, ${@:N} and ${@:N:L}.
var placeholder = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{@:(\d+)(?::(\d+))?\}|\$ARGUMENTS|\$@|\$(\d+)`) })

// Substitute puts args into a template's body: $1, $2, ... the
// positional arguments (empty when missing), $@ and $ARGUMENTS all of
// them joined by spaces, ${@:N} those from the Nth on and ${@:N:L} L of
// them from the Nth (bash's slice, 1-based). It is one pass: an
// argument that itself contains "$1" is left as written.
func Substitute(body string, args []string) string {
	return placeholder().ReplaceAllStringFunc(body, func(m string) string {
		switch {
		case m == "$ARGUMENTS" || m == "$@":
			return strings.Join(args, " ")
		case strings.HasPrefix(m, "${"):
			sub := placeholder().FindStringSubmatch(m)
			start, _ := strconv.Atoi(sub[1])
			start = max(start-1, 0)
			if start >= len(args) {
				return ""
			}
			end := len(args)
			if sub[2] != "" {
				n, _ := strconv.Atoi(sub[2])
				end = min(start+n, len(args))
			}
			return strings.Join(args[start:end], " ")
		}
		n, err := strconv.Atoi(m[1:])
		if err != nil || n < 1 || n > len(args) {
			return ""
		}
		return args[n-1]
	})
}
