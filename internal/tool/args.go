package tool

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
)

// args decodes one call's arguments against the tool's schema. Models get
// types slightly wrong often enough ("10" for 10, "true" for true) that
// pi converts them before validating; args does the same conversions, and
// collects every problem so the model can fix them all in one retry.
type args struct {
	tool string
	raw  json.RawMessage
	m    map[string]json.RawMessage
	errs []string
}

func parseArgs(tool string, raw json.RawMessage) *args {
	a := &args{tool: tool, raw: raw}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		a.m = map[string]json.RawMessage{}
		return a
	}
	if trimmed[0] != '{' {
		a.fail("root", "arguments must be a JSON object")
		return a
	}
	if err := json.Unmarshal(trimmed, &a.m); err != nil {
		a.fail("root", "arguments are not valid JSON: "+err.Error())
	}
	return a
}

func (a *args) fail(field, msg string) { a.errs = append(a.errs, field+": "+msg) }

// present reports whether name was given with a non-null value.
func (a *args) present(name string) bool {
	v, ok := a.m[name]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// str returns a string field. Numbers and booleans are converted to their
// text; a missing or null required field is an error.
func (a *args) str(name string, required bool) (string, bool) {
	if !a.present(name) {
		if required {
			a.fail(name, "required string is missing")
		}
		return "", false
	}
	s, ok := convertString(a.m[name])
	if !ok {
		a.fail(name, "must be a string")
		return "", false
	}
	return s, true
}

// num returns a number field; numeric strings and booleans convert.
func (a *args) num(name string) (float64, bool) {
	if !a.present(name) {
		return 0, false
	}
	f, ok := convertNumber(a.m[name])
	if !ok {
		a.fail(name, "must be a number")
		return 0, false
	}
	return f, true
}

// boolean returns a boolean field; "true"/"false" and 1/0 convert.
func (a *args) boolean(name string) (bool, bool) {
	if !a.present(name) {
		return false, false
	}
	b, ok := convertBool(a.m[name])
	if !ok {
		a.fail(name, "must be a boolean")
		return false, false
	}
	return b, true
}

// onlyKeys rejects properties outside allowed (for schemas that declare
// additionalProperties: false).
func (a *args) onlyKeys(allowed ...string) {
	var extra []string
	for k := range a.m {
		found := false
		for _, w := range allowed {
			if k == w {
				found = true
				break
			}
		}
		if !found {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		a.fail(k, "unknown property (not allowed by the schema)")
	}
}

// failed returns the validation error result when any field was wrong.
func (a *args) failed() (Result, bool) {
	if len(a.errs) == 0 {
		return Result{}, false
	}
	var b strings.Builder
	b.WriteString(`Validation failed for tool "` + a.tool + `":`)
	for _, e := range a.errs {
		b.WriteString("\n  - " + e)
	}
	b.WriteString("\n\nReceived arguments:\n")
	b.WriteString(echoArgs(a.raw))
	return Errorf("%s", b.String()), true
}

// echoArgs shows the model what it sent, indented, but bounded: a write
// with megabytes of content must not come back as a megabyte of error.
func echoArgs(raw json.RawMessage) string {
	const max = 2000
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		out.Reset()
		out.Write(raw)
	}
	s := out.String()
	if len(s) > max {
		s = truncateUTF8(s, max) + "\n... (truncated)"
	}
	return s
}

func convertString(v json.RawMessage) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return "", false
		}
		return strconv.FormatBool(b), true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return "", false
		}
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	return "", false
}

func convertNumber(v json.RawMessage) (float64, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return 0, false
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil || strings.TrimSpace(s) == "" {
			return 0, false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false
		}
		return f, true
	case 't':
		return 1, string(v) == "true"
	case 'f':
		return 0, string(v) == "false"
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, false
	}
	return f, true
}

func convertBool(v json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(v)) {
	case "true", `"true"`, "1":
		return true, true
	case "false", `"false"`, "0":
		return false, true
	}
	return false, false
}

// clampInt converts a model-supplied number to an int without overflow:
// JSON allows 1e300, and a limit that large just means "no limit".
func clampInt(f float64, lo, hi int) int {
	if math.IsNaN(f) || f < float64(lo) {
		return lo
	}
	if f > float64(hi) {
		return hi
	}
	return int(math.Floor(f))
}
