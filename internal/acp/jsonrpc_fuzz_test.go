package acp

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeFrame: whatever a line holds, the decoder either accepts a
// well-formed frame or names an error whose answer is valid JSON-RPC.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}}`,
		`{"jsonrpc":"2.0","id":"7","result":{"outcome":{"outcome":"selected","optionId":"allow_once"}}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}`,
		`{"jsonrpc":"1.0","id":1,"method":"x"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"x"}`,
		`[{"jsonrpc":"2.0"}]`, `null`, `"x"`, `{`, `{"jsonrpc":"2.0","id":1e400,"method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, e := decodeFrame(line)
		if e == nil {
			if fr.JSONRPC != "2.0" {
				t.Fatalf("accepted jsonrpc %q", fr.JSONRPC)
			}
			if fr.Method == "" && (len(fr.ID) == 0 || fr.Result == nil && fr.Error == nil) {
				t.Fatalf("accepted a frame that is neither a message nor a response: %q", line)
			}
			if len(fr.ID) > 0 && !validID(fr.ID) {
				t.Fatalf("accepted id %s", fr.ID)
			}
			return
		}
		if e.Code != CodeParseError && e.Code != CodeInvalidRequest {
			t.Fatalf("code %d for %q", e.Code, line)
		}
		id := fr.ID
		if id == nil {
			id = nullID
		}
		b, err := json.Marshal(outFrame{JSONRPC: "2.0", ID: id, Error: e})
		if err != nil || !json.Valid(b) {
			t.Fatalf("answer to %q does not encode: %v %s", line, err, b)
		}
	})
}
