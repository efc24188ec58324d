package piwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Fields are the command fields pi's RPC mode and pi-server share, with
// pi's names. Each face embeds them in its own command type, next to the
// fields only it has.
type Fields struct {
	Message            *string       `json:"message"`
	Images             []llm.Content `json:"images"`
	StreamingBehavior  string        `json:"streamingBehavior"`
	ParentSession      string        `json:"parentSession"`
	Provider           string        `json:"provider"`
	ModelID            string        `json:"modelId"`
	Level              string        `json:"level"`
	Mode               string        `json:"mode"`
	CustomInstructions string        `json:"customInstructions"`
	Enabled            *bool         `json:"enabled"`
	Command            *string       `json:"command"`
	ExcludeFromContext bool          `json:"excludeFromContext"`
	OutputPath         string        `json:"outputPath"`
	// Overwrite lets export_html replace an existing file (agentd's).
	Overwrite   bool    `json:"overwrite"`
	SessionPath string  `json:"sessionPath"`
	EntryID     string  `json:"entryId"`
	Name        *string `json:"name"`
	// Turn and Truncate are the checkpoint commands' (agentd's).
	Turn     string `json:"turn"`
	Truncate bool   `json:"truncate"`
}

// DescribeJSONError says, for a client, what is wrong with JSON that did
// not decode: where the syntax broke, which field has the wrong type, or
// that a command must be an object.
func DescribeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s at offset %d", se.Error(), se.Offset)
	case errors.As(err, &te) && te.Field != "":
		// encoding/json names a field of an embedded Fields "Fields.x";
		// the client wrote "x".
		field := strings.TrimPrefix(te.Field, "Fields.")
		return fmt.Sprintf("field %q must be %s, not %s", field, kindName(te.Type.Kind().String()), te.Value)
	case errors.As(err, &te):
		return "a frame must be a JSON object, not " + te.Value
	case err.Error() == "EOF":
		return "empty frame"
	}
	return err.Error()
}

func kindName(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "ptr", "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + k
}
