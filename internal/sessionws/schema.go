package sessionws

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/server"
	"github.com/google/jsonschema-go/jsonschema"
)

// clientTypes are the messages a client may send, in the order the spec
// lists them (pong answers the server's ping).
var clientTypes = []string{"subscribe", "unsubscribe", "ping", "query_state", "provide_input", "pong"}

// validator checks client messages against the served schema, so that
// what the schema says is what the server enforces. It uses
// google/jsonschema-go (draft 2020-12; the MCP SDK links it already):
// writing a validator by hand would drift from the document clients
// read. santhosh-tekuri/jsonschema, used before, allocated 1.7 MB in
// 21,000 allocations at package init in every agentd process, whatever
// the command; the tests still check the server's messages with it, an
// independent second reading of the same schema.
type validator struct {
	client map[string]*jsonschema.Resolved
}

func newValidator(doc []byte) (*validator, error) {
	var root jsonschema.Schema
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("sessionws schema: %w", err)
	}
	v := &validator{client: map[string]*jsonschema.Resolved{}}
	for _, t := range clientTypes {
		// Each message type is its own schema: a reference into the
		// document's definitions, with the document's id as base.
		s := &jsonschema.Schema{Schema: root.Schema, ID: root.ID, Ref: "#/$defs/" + t, Defs: root.Defs}
		r, err := s.Resolve(nil)
		if err != nil {
			return nil, fmt.Errorf("sessionws schema %s: %w", t, err)
		}
		v.client[t] = r
	}
	return v, nil
}

// check parses and validates a client message. It returns the message's
// type and body, or why it is refused.
func (v *validator) check(b []byte) (string, map[string]any, *refusal) {
	b = bytes.TrimRight(b, " \t\r\n")
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return "", nil, &refusal{code: "invalid_message_format", msg: "Message must be a JSON object", details: map[string]any{"parse_error": err.Error()}}
		}
		return "", nil, &refusal{code: "invalid_message_format", msg: "Message is not valid JSON", details: map[string]any{"parse_error": err.Error()}}
	}
	if body == nil {
		return "", nil, &refusal{code: "invalid_message_format", msg: "Message must be a JSON object", details: map[string]any{"parse_error": "got null"}}
	}
	raw, ok := body["type"]
	typ, isString := raw.(string)
	if !ok || !isString {
		return "", nil, &refusal{code: "invalid_message_format", msg: `Message needs a "type" string`, details: map[string]any{"validation_errors": []string{`/type: required string`}}}
	}
	s := v.client[typ]
	if s == nil {
		return "", nil, &refusal{code: "unknown_message_type", msg: fmt.Sprintf("Message type '%s' is not supported", server.ClipUTF8(typ, 120)), supported: clientTypes}
	}
	var inst any
	if err := json.Unmarshal(b, &inst); err != nil {
		return "", nil, &refusal{code: "invalid_message_format", msg: "Message is not valid JSON", details: map[string]any{"parse_error": err.Error()}}
	}
	if err := s.Validate(inst); err != nil {
		problems := []string{describe(typ, err)}
		return "", nil, &refusal{code: "invalid_message_format", msg: "Invalid " + typ + " message: " + strings.Join(problems, "; "),
			details: map[string]any{"validation_errors": problems}}
	}
	return typ, body, nil
}

// describe turns a validation error into "where: what", where is the
// place in the message. The library names the place in the schema, as a
// chain of "validating <schema location>: " prefixes, innermost last;
// under a message type's definition, a property's location is the
// message's field.
func describe(typ string, err error) string {
	msg := err.Error()
	loc := "/"
	const prefix = "validating "
	for {
		i := strings.Index(msg, prefix)
		j := strings.Index(msg, ": ")
		if i != 0 || j < 0 {
			break
		}
		loc, msg = msg[len(prefix):j], msg[j+2:]
	}
	if rest, ok := strings.CutPrefix(loc, "/$defs/"+typ); ok {
		loc = strings.ReplaceAll(rest, "/properties/", "/")
	} else if strings.Contains(loc, "://") {
		loc = ""
	}
	if loc == "" {
		loc = "/"
	}
	return loc + ": " + msg
}
