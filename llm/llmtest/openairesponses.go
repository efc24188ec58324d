package llmtest

// responsesWire renders scripts in this API's wire format. (Being written.)
type responsesWire struct{}

// Frames implements Wire.
func (responsesWire) Frames(s *Script, r *Request) []string { return nil }

// ErrorBody implements Wire.
func (responsesWire) ErrorBody(s *Script) []byte { return []byte(`{"error":{"message":"not yet"}}`) }
