package convapi

import (
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The OpenAPI 3.1 document of the face is generated from the route table
// and the wire types (wire.go): paths, methods, parameters, bodies and
// events cannot drift from what the handlers serve. Schemas are inferred
// by github.com/google/jsonschema-go (openapischema.go), which emits JSON Schema
// 2020-12, the dialect OpenAPI 3.1 uses.

// eventTypes are the payloads of the event stream, each with its "type".
var eventTypes = []any{
	ConnectedEvent{}, ResyncEvent{}, PingEvent{}, GenerationStartedEvent{}, GenerationProgressEvent{}, MessageAddedEvent{},
	GenerationCompleteEvent{}, ToolPendingEvent{}, ToolExecutingEvent{}, ToolOutputEvent{}, ToolCompleteEvent{},
	ElicitPendingEvent{}, InterruptedEvent{}, RunEndedEvent{}, ErrorEvent{}, ConfigChangedEvent{}, ConversationEditedEvent{},
	CompactionStartedEvent{}, CompactionEndedEvent{}, RetryStartedEvent{}, RetryEndedEvent{}, TodoEvent{},
}

// openapiCache holds the document, built once per server.
type openapiCache struct {
	once sync.Once
	doc  []byte
	err  error
}

// openapiDoc builds the document.
func (s *Server) openapiDoc() ([]byte, error) {
	// Compiled here, not at start: the document is built once, on the
	// first request for it.
	pathParam := regexp.MustCompile(`\{([a-z_]+)\}`)
	comps := newComponents()
	ref := func(v any) map[string]any {
		return comps.ref(reflect.TypeOf(v))
	}
	errRef := ref(ErrorResponse{})
	var events []any
	for _, e := range eventTypes {
		events = append(events, ref(e))
	}
	paths := map[string]any{}
	for _, rt := range s.routes() {
		op := map[string]any{"summary": rt.summary, "operationId": operationID(rt.method, rt.path)}
		if rt.public {
			op["security"] = []any{}
		}
		var ps []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			typ := "string"
			if m[1] == "index" {
				typ = "integer"
			}
			ps = append(ps, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": typ}})
		}
		for _, q := range rt.query {
			ps = append(ps, map[string]any{"name": q.name, "in": "query", "description": q.desc, "schema": map[string]any{"type": q.typ}})
		}
		if rt.stream {
			ps = append(ps, map[string]any{"name": "Last-Event-ID", "in": "header", "description": "resume after this frame id: a seq, or <seq>.<part> for a frame of an event written as several", "schema": map[string]any{"type": "string", "pattern": `^[0-9]+(\.[1-9])?$`}})
		}
		if rt.body != nil || rt.method == "POST" || rt.method == "PATCH" || rt.method == "PUT" {
			ps = append(ps, map[string]any{"name": "Idempotency-Key", "in": "header",
				"description": "a command repeated with the same key within the idempotency TTL gets the first one's answer and does not run again",
				"schema":      map[string]any{"type": "string", "maxLength": 256}})
		}
		if len(ps) > 0 {
			op["parameters"] = ps
		}
		if rt.body != nil {
			op["requestBody"] = map[string]any{"required": rt.method != "POST" || strings.HasSuffix(rt.path, "}"),
				"content": map[string]any{"application/json": map[string]any{"schema": ref(rt.body)}}}
		}
		ok := map[string]any{"description": "OK"}
		switch {
		case rt.stream:
			ok["description"] = "Server-Sent Events: each frame is \"id: <seq>\\ndata: <event>\\n\\n\" (id <seq>.1, <seq>.2, … when one event is several frames), never with an event: line; connected first, a ping at least every 15 s"
			ok["content"] = map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"oneOf": events}}}
		case rt.resp != nil && rt.list && rt.alt != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"oneOf": []any{
				map[string]any{"type": "array", "items": ref(rt.resp)}, ref(rt.alt)}}}}
		case rt.resp != nil && rt.alt != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"oneOf": []any{ref(rt.resp), ref(rt.alt)}}}}
		case rt.resp != nil && rt.list:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "array", "items": ref(rt.resp)}}}
		case rt.resp != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": ref(rt.resp)}}
		default:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}
		}
		resps := map[string]any{"200": ok}
		statuses := append(append([]int(nil), errStatuses...), rt.statuses...)
		if rt.public {
			statuses = []int{500}
		}
		for _, st := range statuses {
			resps[strconv.Itoa(st)] = map[string]any{"description": http.StatusText(st), "content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
		}
		if rt.path == "/conversations" {
			resps["304"] = map[string]any{"description": "Not modified (If-None-Match matched the ETag)"}
		}
		op["responses"] = resps
		for _, p := range aliases(rt.path) {
			item, _ := paths[p].(map[string]any)
			if item == nil {
				item = map[string]any{}
				paths[p] = item
			}
			o := op
			if p != "/api/v2"+rt.path {
				o = map[string]any{}
				for k, v := range op {
					o[k] = v
				}
				o["operationId"] = op["operationId"].(string) + "Alias"
				o["description"] = "The design document's path of " + "/api/v2" + rt.path
			}
			item[strings.ToLower(rt.method)] = o
		}
	}
	schemas, err := comps.schemas()
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "agentd conversation API", "version": s.opt.Version,
			"description": "The conversation API (gptme's v2 wire) of agentd serve. Errors are {\"error\": \"...\"}. Commands that change a conversation take an Idempotency-Key header."},
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"paths":             paths,
		"components": map[string]any{
			"schemas": schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer"},
				"cookie": map[string]any{"type": "apiKey", "in": "cookie", "name": cookieName},
				"query":  map[string]any{"type": "apiKey", "in": "query", "name": "token"},
			},
		},
		"security": []any{map[string]any{"bearer": []any{}}, map[string]any{"cookie": []any{}}, map[string]any{"query": []any{}}},
	}
	return marshal(doc), nil
}

// aliases are the paths a route is served on.
func aliases(rel string) []string {
	out := []string{"/api/v2" + rel}
	if strings.HasPrefix(rel, "/conversations") {
		out = append(out, "/api"+rel)
	}
	return out
}

func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.Trim(seg, "{}")
		for _, part := range strings.Split(seg, "_") {
			if part != "" {
				b.WriteString(strings.ToUpper(part[:1]) + part[1:])
			}
		}
	}
	if path == "" {
		b.WriteString("Root")
	}
	return strings.ReplaceAll(b.String(), ".", "")
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ params) error {
	s.doc.once.Do(func() { s.doc.doc, s.doc.err = s.openapiDoc() })
	if s.doc.err != nil {
		return s.doc.err
	}
	writeRaw(w, http.StatusOK, s.doc.doc)
	return nil
}
