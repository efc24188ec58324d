package pirpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Whatever a client sends as an id, an accepted one is echoed as valid
// JSON, byte for byte, and is a string or a number.
func FuzzRawID(f *testing.F) {
	for _, s := range []string{`7`, `-1.5e3`, `"x"`, `"\u00e9"`, `true`, `null`, `{}`, `[1]`, `01`, `"`, `1e`, ` 3 `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rawID
		if err := r.UnmarshalJSON(b); err != nil {
			return
		}
		out, _ := r.MarshalJSON()
		if !json.Valid(out) || !bytes.Equal(out, bytes.TrimSpace(b)) {
			t.Fatalf("%q echoed as %q", b, out)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber() // a number too large for a float64 is still one
		_ = dec.Decode(&v)
		switch v.(type) {
		case string, json.Number:
		default:
			t.Fatalf("%q accepted as %T", b, v)
		}
	})
}
