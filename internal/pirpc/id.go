package pirpc

import (
	"bytes"
	"encoding/json"
	"errors"
)

// rawID is a command's id as the client sent it, a string or a number,
// echoed back byte for byte: pi takes any id and answers with it as it
// came, and a client matching responses by a numeric id (JSON-RPC habit)
// must find its own number, not a string of it, nor 1e3 for 1000.
type rawID []byte

var errID = errors.New(`field "id" must be a string or a number`)

// UnmarshalJSON keeps a string or a number as it is.
func (r *rawID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errID
	}
	switch c := b[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errID
		}
	case c == '-' || (c >= '0' && c <= '9'):
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return errID
		}
	default:
		return errID
	}
	*r = append((*r)[:0], b...)
	return nil
}

// MarshalJSON writes the id as it came.
func (r rawID) MarshalJSON() ([]byte, error) { return r, nil }

// text is the id as a string: a string's value, a number's digits.
func (r *rawID) text() string {
	if len(*r) > 0 && (*r)[0] == '"' {
		var s string
		_ = json.Unmarshal(*r, &s)
		return s
	}
	return string(*r)
}
