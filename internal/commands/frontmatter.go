package commands

import (
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/frontmatter"
)

// splitFrontmatter separates a Markdown file's YAML frontmatter from
// its body (package frontmatter). A file without one, or whose
// frontmatter is never closed, has no fields (pi reads the latter as all
// body); a frontmatter that is not a YAML mapping is an error, with the
// body still returned, so a caller can warn and go on as pi does.
func splitFrontmatter(text string) (fields map[string]any, body string, err error) {
	head, b, ok, err := frontmatter.Split([]byte(text))
	if !ok || err != nil {
		return nil, string(b), nil
	}
	fields = map[string]any{}
	if err := frontmatter.Decode(head, &fields, false); err != nil {
		return nil, string(b), err
	}
	return fields, string(b), nil
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
