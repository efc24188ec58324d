package convapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// doc is the served OpenAPI document, decoded.
type doc struct {
	t   *testing.T
	m   map[string]any
	sch map[string]any
}

func loadDoc(t *testing.T, fx *fixture) *doc {
	t.Helper()
	r := fx.ok("GET", "/api/v2/openapi.json", nil)
	d := &doc{t: t}
	if err := json.Unmarshal(r.body, &d.m); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	d.sch = d.m["components"].(map[string]any)["schemas"].(map[string]any)
	return d
}

// check validates v against schema s; it returns the problems.
func (d *doc) check(path string, s any, v any) []string {
	sm, ok := s.(map[string]any)
	if !ok {
		if s == true || s == nil {
			return nil
		}
		return []string{path + ": schema is false"}
	}
	if ref, ok := sm["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		target, ok := d.sch[name]
		if !ok {
			return []string{path + ": dangling $ref " + ref}
		}
		return d.check(path, target, v)
	}
	if alts, ok := sm["oneOf"].([]any); ok {
		var all []string
		for _, a := range alts {
			p := d.check(path, a, v)
			if len(p) == 0 {
				return nil
			}
			all = append(all, p...)
		}
		return []string{fmt.Sprintf("%s: matches none of oneOf: %v", path, all)}
	}
	if e, ok := sm["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return reflect.DeepEqual(x, v) }) {
		return []string{fmt.Sprintf("%s: %v is not in enum %v", path, v, e)}
	}
	typ, _ := sm["type"].(string)
	switch typ {
	case "":
		return nil
	case "null":
		if v != nil {
			return []string{path + ": want null"}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return []string{fmt.Sprintf("%s: want a string, got %v", path, v)}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return []string{fmt.Sprintf("%s: want a boolean, got %v", path, v)}
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok || (typ == "integer" && n != float64(int64(n))) {
			return []string{fmt.Sprintf("%s: want an %s, got %v", path, typ, v)}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an array, got %v", path, v)}
		}
		var out []string
		for i, x := range a {
			out = append(out, d.check(fmt.Sprintf("%s[%d]", path, i), sm["items"], x)...)
		}
		return out
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, v)}
		}
		props, _ := sm["properties"].(map[string]any)
		var out []string
		req, _ := sm["required"].([]any)
		for _, r := range req {
			if _, ok := o[r.(string)]; !ok {
				out = append(out, path+": lacks required "+r.(string))
			}
		}
		for k, x := range o {
			ps, ok := props[k]
			if !ok {
				if ap, has := sm["additionalProperties"]; has && ap != false {
					out = append(out, d.check(path+"."+k, ap, x)...)
					continue
				}
				if props != nil {
					out = append(out, path+": undocumented field "+k)
				}
				continue
			}
			out = append(out, d.check(path+"."+k, ps, x)...)
		}
		return out
	}
	return nil
}

// The document names every route of the face, on every path it serves,
// and every event the stream can carry.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	d := loadDoc(t, fx)
	if d.m["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v", d.m["openapi"])
	}
	paths := d.m["paths"].(map[string]any)
	n := 0
	for _, rt := range fx.face.table {
		for _, p := range aliases(rt.path) {
			item, _ := paths[p].(map[string]any)
			if item[strings.ToLower(rt.method)] == nil {
				t.Errorf("%s %s is not documented", rt.method, p)
			}
			n++
		}
	}
	count := 0
	for _, item := range paths {
		count += len(item.(map[string]any))
	}
	if count != n {
		t.Errorf("the document has %d operations, the face serves %d", count, n)
	}
	for _, e := range eventTypes {
		name := reflect.TypeOf(e).Name()
		s, ok := d.sch[name].(map[string]any)
		if !ok {
			t.Errorf("event %s has no schema", name)
			continue
		}
		typ := s["properties"].(map[string]any)["type"].(map[string]any)["enum"]
		if len(typ.([]any)) != 1 {
			t.Errorf("event %s: its type is not one constant: %v", name, typ)
		}
	}
	// The strict decoders take their fields from the types the document
	// is generated from.
	for _, body := range []any{StepRequest{}, ConfirmRequest{}, InterruptRequest{}, RerunRequest{}, ElicitRequest{}, EditRequest{}} {
		name := reflect.TypeOf(body).Name()
		var got []string
		for k := range d.sch[name].(map[string]any)["properties"].(map[string]any) {
			got = append(got, k)
		}
		want := fieldNames(body)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: schema fields %v, decoder fields %v", name, got, want)
		}
	}
}

// What the face answers and streams matches the document: a conversation
// driven through every kind of event and every endpoint, each 200 body
// and each event checked against its schema.
func TestOpenAPIMatchesTheWire(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	d := loadDoc(t, fx)
	paths := d.m["paths"].(map[string]any)
	checkBody := func(method, path string, r reply) {
		t.Helper()
		rel, _ := relative(strings.SplitN(path, "?", 2)[0])
		rt, _, _, _ := fx.face.match(method, rel)
		if rt == nil {
			t.Fatalf("%s %s: no route", method, path)
		}
		op := paths["/api/v2"+rt.path].(map[string]any)[strings.ToLower(method)].(map[string]any)
		resp := op["responses"].(map[string]any)[fmt.Sprint(r.status)]
		if resp == nil {
			t.Errorf("%s %s answered %d, which is not documented", method, path, r.status)
			return
		}
		content, _ := resp.(map[string]any)["content"].(map[string]any)
		js, _ := content["application/json"].(map[string]any)
		if js == nil {
			return
		}
		var v any
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return
		}
		for _, p := range d.check("body", js["schema"], v) {
			t.Errorf("%s %s: %s", method, path, p)
		}
	}
	call := func(method, path string, body any) reply {
		t.Helper()
		r := fx.do(method, path, body)
		checkBody(method, path, r)
		return r
	}
	sid := call("PUT", "/api/v2/conversations/doc", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}).str("session_id")
	st := fx.open("/api/v2/conversations/doc/events?session_id=" + sid)
	fx.faux.Push(
		faux.Response{Text: "hello", ToolCalls: []faux.ToolCall{{ID: "w", Name: "write", Args: `{"path":"d.txt","content":"x"}`}}},
		faux.Response{ToolCalls: []faux.ToolCall{{ID: "q", Name: "ask_user", Args: `{"question":"Which?","options":["a","b"]}`}}},
		faux.Response{ToolCalls: []faux.ToolCall{{ID: "s", Name: "slow", Args: `{"ms":1,"text":"t"}`}}},
		faux.Response{Text: "done"})
	call("POST", "/api/v2/conversations/doc/step", map[string]any{"session_id": sid})
	call("POST", "/api/v2/conversations/doc/tool/confirm", map[string]any{"tool_id": st.next("tool_pending").str("tool_id"), "action": "confirm"})
	call("POST", "/api/v2/conversations/doc/elicit/respond", map[string]any{"elicit_id": st.next("elicit_pending").str("elicit_id"), "action": "accept", "value": "a"})
	call("POST", "/api/v2/conversations/doc/tool/confirm", map[string]any{"tool_id": st.next("tool_pending").str("tool_id"), "action": "auto", "count": 3})
	st.next("tool_output")
	if i, _, ok := st.find(st.cursor, func(e event) bool { return e.typ() == "generation_complete" && strings.Contains(e.raw, `"done"`) }); !ok {
		t.Fatalf("the run did not end:\n%s", st.dump())
	} else {
		st.cursor = i + 1
	}
	st.next("run_ended")
	call("POST", "/api/v2/conversations/doc", map[string]any{"role": "user", "content": "again"})
	call("PATCH", "/api/v2/conversations/doc/config", map[string]any{"chat": map[string]any{"thinking": "low", "name": "Doc", "tools": []string{"read", "write", "slow", "ask_user"}}})
	call("GET", "/api/v2/conversations/doc/config", nil)
	wantErr(t, call("PATCH", "/api/v2/conversations/doc/messages/0", map[string]any{"content": "hi!"}), http.StatusConflict, errKeepAfter.Message)
	call("PATCH", "/api/v2/conversations/doc/messages/0?truncate=1", map[string]any{"content": "hi!"})
	st.next("conversation_edited")
	call("POST", "/api/v2/conversations/doc/fork?after_message=0", nil)
	call("GET", "/api/v2/conversations/doc?limit=2", nil)
	call("GET", "/api/v2/conversations", nil)
	call("GET", "/api/v2/conversations?paginated=1&limit=1", nil)
	call("GET", "/api/v2/sessions", nil)
	call("GET", "/api/v2/server/health", nil)
	call("GET", "/api/v2/models", nil)
	call("GET", "/api/v2", nil)
	call("GET", "/api/v2/version", nil)
	call("POST", "/api/v2/conversations/doc/transcript", map[string]any{"turns": []any{map[string]any{"role": "user", "text": "by phone"}}, "call_metadata": map[string]any{"call_sid": "CA-doc"}})
	call("POST", "/api/v2/conversations/doc/transcript", map[string]any{"turns": []any{map[string]any{"role": "user", "text": "by phone"}}, "call_metadata": map[string]any{"call_sid": "CA-doc"}})
	call("POST", "/api/v2/conversations/doc/interrupt", map[string]any{"session_id": sid})
	call("POST", "/api/v2/conversations/doc/rerun", map[string]any{"session_id": sid})
	call("POST", "/api/v2/conversations/doc/interrupt", map[string]any{"session_id": sid})
	call("DELETE", "/api/v2/conversations/doc/messages/2", nil)
	call("GET", "/api/v2/conversations/nope", nil)
	call("DELETE", "/api/v2/sessions/"+sid, nil)
	call("DELETE", "/api/v2/conversations/doc", nil)
	st.waitEnded()

	seen := map[string]bool{}
	for _, e := range st.snapshot() {
		seen[e.typ()] = true
		name := eventSchemaName(e.typ())
		if name == "" {
			t.Errorf("an event of an undocumented type: %s", e.raw)
			continue
		}
		for _, p := range d.check(e.typ(), map[string]any{"$ref": "#/components/schemas/" + name}, e.m) {
			t.Errorf("event %s", p)
		}
	}
	for _, want := range []string{"connected", "ping", "run_ended", "generation_started", "generation_progress", "message_added", "generation_complete",
		"tool_pending", "tool_executing", "tool_output", "tool_complete", "elicit_pending", "config_changed", "conversation_edited"} {
		if !seen[want] {
			t.Errorf("the scenario did not produce %s", want)
		}
	}
}

// eventSchemaName is the schema of an event type.
func eventSchemaName(typ string) string {
	for _, e := range eventTypes {
		f, _ := reflect.TypeOf(e).FieldByName("Type")
		if slices.Contains(strings.Split(f.Tag.Get("enum"), ","), typ) {
			return reflect.TypeOf(e).Name()
		}
	}
	return ""
}
