package commands

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// splitFrontmatter separates a Markdown file's YAML frontmatter (between
// a first line "---" and the next line "---") from its body. A file
// without one has no fields; a frontmatter that is not a YAML mapping
// is an error, with the body still returned, so a caller can warn and
// go on as pi does.
func splitFrontmatter(text string) (fields map[string]any, body string, err error) {
	text = strings.TrimPrefix(text, "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") && text != "---" {
		return nil, text, nil
	}
	rest := strings.TrimPrefix(text, "---")
	rest = strings.TrimPrefix(rest, "\n")
	end := -1
	if strings.HasPrefix(rest, "---\n") || rest == "---" {
		end = 0
	} else if i := strings.Index(rest, "\n---\n"); i >= 0 {
		end = i + 1
	} else if strings.HasSuffix(rest, "\n---") {
		end = len(rest) - 3
	}
	if end < 0 {
		// No closing line: pi reads such a file as all body.
		return nil, text, nil
	}
	head := rest[:end]
	body = strings.TrimPrefix(rest[end+3:], "\n")
	fields = map[string]any{}
	if strings.TrimSpace(head) == "" {
		return fields, body, nil
	}
	if err := yaml.Unmarshal([]byte(head), &fields); err != nil {
		return nil, body, fmt.Errorf("frontmatter is not valid YAML: %v", firstLine(err.Error()))
	}
	return fields, body, nil
}

// str is a frontmatter field as a string: a string as it is, a number
// or boolean as written, anything else (a list, a mapping) as absent.
func str(fields map[string]any, key string) (string, bool) {
	v, ok := fields[key]
	if !ok || v == nil {
		return "", false
	}
	switch x := v.(type) {
	case string:
		return x, true
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), true
	}
	return "", false
}

// boolean is a frontmatter flag: true, or the string "true".
func boolean(fields map[string]any, key string) bool {
	switch x := fields[key].(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(strings.TrimSpace(x), "true")
	}
	return false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
