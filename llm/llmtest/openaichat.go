package llmtest

// chatWire renders scripts in this API's wire format. (Being written.)
type chatWire struct{}

// Frames implements Wire.
func (chatWire) Frames(s *Script, r *Request) []string { return nil }

// ErrorBody implements Wire.
func (chatWire) ErrorBody(s *Script) []byte { return []byte(`{"error":{"message":"not yet"}}`) }
