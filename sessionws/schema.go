package sessionws

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/server"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// clientTypes are the messages a client may send, in the order the spec
// lists them (pong answers the server's ping).
var clientTypes = []string{"subscribe", "unsubscribe", "ping", "query_state", "provide_input", "pong"}

// validator checks client messages against the served schema, so that
// what the schema says is what the server enforces. It uses
// santhosh-tekuri/jsonschema (draft 2020-12, well kept, no cgo): writing
// a validator by hand would drift from the document clients read.
type validator struct {
	client map[string]*jsonschema.Schema
	server *jsonschema.Schema
}

const schemaURL = "https://agentd.dev/schemas/session-websocket.json"

func newValidator(doc []byte) (*validator, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("sessionws schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, parsed); err != nil {
		return nil, fmt.Errorf("sessionws schema: %w", err)
	}
	v := &validator{client: map[string]*jsonschema.Schema{}}
	for _, t := range clientTypes {
		s, err := c.Compile(schemaURL + "#/$defs/" + t)
		if err != nil {
			return nil, fmt.Errorf("sessionws schema %s: %w", t, err)
		}
		v.client[t] = s
	}
	if v.server, err = c.Compile(schemaURL + "#/$defs/server"); err != nil {
		return nil, fmt.Errorf("sessionws schema server: %w", err)
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
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return "", nil, &refusal{code: "invalid_message_format", msg: "Message is not valid JSON", details: map[string]any{"parse_error": err.Error()}}
	}
	if err := s.Validate(inst); err != nil {
		problems := describe(err)
		return "", nil, &refusal{code: "invalid_message_format", msg: "Invalid " + typ + " message: " + strings.Join(problems, "; "),
			details: map[string]any{"validation_errors": problems}}
	}
	return typ, body, nil
}

// describe flattens a validation error into "where: what" lines.
func describe(err error) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(u jsonschema.OutputUnit)
	walk = func(u jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			loc := u.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			out = append(out, loc+": "+u.Error.String())
		}
		for _, e := range u.Errors {
			walk(e)
		}
	}
	walk(*ve.BasicOutput())
	if len(out) == 0 {
		out = []string{ve.Error()}
	}
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}
