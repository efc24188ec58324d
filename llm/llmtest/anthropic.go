package llmtest

// anthropicWire renders scripts in this API's wire format. (Being written.)
type anthropicWire struct{}

// Frames implements Wire.
func (anthropicWire) Frames(s *Script, r *Request) []string { return nil }

// ErrorBody implements Wire.
func (anthropicWire) ErrorBody(s *Script) []byte { return []byte(`{"error":{"message":"not yet"}}`) }
