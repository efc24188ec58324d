package convapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// Request bodies are read whole (within the layer's frame limit), checked
// to be one JSON object, and then read field by field: each endpoint
// decides what a missing field, a null or a wrong type means, with the
// error text of gptme's server where it has one, so that a client learns
// exactly which field to fix.

// readBody reads a request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, error) {
	if r.ContentLength > int64(limit) {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(limit)
	}
	if err != nil {
		return nil, fault.New(fault.Invalid, "Could not read the request body: "+err.Error())
	}
	return body, nil
}

func tooLarge(limit int) *fault.Error {
	return fault.New(fault.TooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes", limit))
}

// object is a request body that is one JSON object.
type object map[string]json.RawMessage

// parseObject reads body as one JSON object. An empty body is an empty
// object when empty is allowed, else emptyMsg.
func parseObject(body []byte, emptyMsg string) (object, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		if emptyMsg != "" {
			return nil, fault.New(fault.Invalid, emptyMsg)
		}
		return object{}, nil
	}
	if !utf8.Valid(body) {
		return nil, fault.New(fault.Invalid, "Malformed JSON in request body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fault.New(fault.Invalid, "Malformed JSON in request body")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fault.New(fault.Invalid, "Malformed JSON in request body")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fault.New(fault.Invalid, "JSON body must be an object")
	}
	var o object
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, fault.New(fault.Invalid, "Malformed JSON in request body")
	}
	return o, nil
}

// only refuses fields outside allowed: on endpoints that act, a misspelt
// field would otherwise be silently ignored.
func (o object) only(allowed ...string) error {
	var unknown []string
	for k := range o {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fault.New(fault.Invalid, fmt.Sprintf("Unknown field %s; allowed fields: %s", strconv.Quote(clip(unknown[0], 100)), strings.Join(allowed, ", ")))
}

// present reports whether k is set to something other than null.
func (o object) present(k string) bool {
	raw, ok := o[k]
	return ok && string(bytes.TrimSpace(raw)) != "null"
}

// str reads an optional string; ok is false when it is absent or null.
func (o object) str(k string) (v string, ok bool, err error) {
	if !o.present(k) {
		return "", false, nil
	}
	if json.Unmarshal(o[k], &v) != nil {
		return "", false, fault.New(fault.Invalid, k+" must be a string")
	}
	return v, true, nil
}

// requiredStr reads a required string that must not be blank (gptme's
// _get_required_string_field), trimmed.
func (o object) requiredStr(k string) (string, error) {
	v, ok, err := o.str(k)
	if err != nil {
		return "", err
	}
	if !ok || strings.TrimSpace(v) == "" {
		return "", fault.New(fault.Invalid, k+" is required")
	}
	return strings.TrimSpace(v), nil
}

// optionalStr reads an optional string that, when given, must not be
// blank (gptme's _get_optional_string_field), trimmed.
func (o object) optionalStr(k string) (string, error) {
	v, ok, err := o.str(k)
	if err != nil || !ok {
		return "", err
	}
	if strings.TrimSpace(v) == "" {
		return "", fault.New(fault.Invalid, k+" must be a non-empty string")
	}
	return strings.TrimSpace(v), nil
}

// boolean reads an optional boolean.
func (o object) boolean(k string) (v bool, ok bool, err error) {
	if !o.present(k) {
		return false, false, nil
	}
	if json.Unmarshal(o[k], &v) != nil {
		return false, false, fault.New(fault.Invalid, fmt.Sprintf("Invalid '%s' value: '%s' must be a boolean", k, k))
	}
	return v, true, nil
}

// integer reads an optional JSON integer (not a float, not a boolean, not
// a string), within ±2^53.
func (o object) integer(k string) (v int64, ok bool, err error) {
	if !o.present(k) {
		return 0, false, nil
	}
	n, isInt := jsonInt(o[k])
	if !isInt {
		return 0, false, fault.New(fault.Invalid, k+" must be an integer")
	}
	return n, true, nil
}

func jsonInt(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || strings.ContainsAny(s, ".eE") || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > 1<<53 || n < -(1<<53) {
		return 0, false
	}
	return n, true
}

// number reads an optional JSON number.
func (o object) number(k string) (v float64, ok bool, err error) {
	if !o.present(k) {
		return 0, false, nil
	}
	if json.Unmarshal(o[k], &v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false, fault.New(fault.Invalid, k+" must be a number")
	}
	return v, true, nil
}

// strings reads an optional list of strings; ok is false when absent or
// null.
func (o object) strings(k string) (v []string, ok bool, err error) {
	if !o.present(k) {
		return nil, false, nil
	}
	if json.Unmarshal(o[k], &v) != nil {
		return nil, false, fault.New(fault.Invalid, k+" must be a list of strings")
	}
	if v == nil {
		v = []string{}
	}
	return v, true, nil
}

// obj reads an optional nested object.
func (o object) obj(k, msg string) (object, bool, error) {
	if !o.present(k) {
		return nil, false, nil
	}
	var v object
	if json.Unmarshal(o[k], &v) != nil || v == nil {
		return nil, false, fault.New(fault.Invalid, msg)
	}
	return v, true, nil
}

// autoConfirm reads auto_confirm: a boolean, or an integer count of tool
// calls to confirm without asking.
func (o object) autoConfirm() (always bool, next int, err error) {
	if !o.present("auto_confirm") {
		return false, 0, nil
	}
	bad := withFields(fault.New(fault.Invalid, "Invalid 'auto_confirm' value: 'auto_confirm' must be a boolean or a non-negative integer"),
		map[string]any{"message": "'auto_confirm' must be a boolean or integer"})
	var b bool
	if json.Unmarshal(o["auto_confirm"], &b) == nil {
		return b, 0, nil
	}
	n, ok := jsonInt(o["auto_confirm"])
	if !ok || n < 0 || n > 1<<31 {
		return false, 0, bad
	}
	return false, int(n), nil
}

// clip shortens s for an error message, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return server.ClipUTF8(s, n) + "…"
}

// optionalStrRequired reads session_id as step, interrupt and rerun take
// it: absent is allowed (the design document's requests have none), but
// when given it must be a non-blank string ("session_id is required",
// gptme's text for a blank one).
func (o object) optionalStrRequired(k string) (string, error) {
	if !o.present(k) {
		return "", nil
	}
	return o.requiredStr(k)
}

// atoi reads a query parameter's integer, as Python's int() does (an
// optional sign, digits, surrounding space).
func atoi(s string) (int, error) {
	return strconv.Atoi(strings.TrimSpace(s))
}

// unmarshalInto decodes raw JSON the face has checked already.
func unmarshalInto(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// fieldNames are the JSON names of a request type's fields: the fields a
// strict endpoint accepts, taken from the type the OpenAPI document is
// generated from.
func fieldNames(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, fieldNames(reflect.New(f.Type).Elem().Interface())...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
