package llm

import (
	"context"
	"testing"
)

// Only an auth failure gets the hint its stream was given, after the
// provider's words, so every face that shows errorMessage says which key
// to check; other failures and streams without a hint are left alone.
func TestStreamAuthHint(t *testing.T) {
	m := &Model{Provider: "mock", ID: "m1"}
	hint := AuthHint("mock", "MOCK_API_KEY")
	for _, tt := range []struct {
		name string
		err  *Error
		hint string
		want string
	}{
		{"401 with a key", &Error{Kind: ErrAuth, Status: 401, Message: "invalid api key"}, hint, "401 invalid api key (mock refused the API key: check MOCK_API_KEY)"},
		{"401, no key known", &Error{Kind: ErrAuth, Status: 401, Message: "invalid api key"}, AuthHint("mock", ""), "401 invalid api key (mock refused the API key; models.json can set one with apiKey)"},
		{"401 without a hint", &Error{Kind: ErrAuth, Status: 401, Message: "invalid api key"}, "", "401 invalid api key"},
		{"429", &Error{Kind: ErrRateLimit, Status: 429, Message: "slow down"}, hint, "429 slow down"},
		{"403", &Error{Kind: ErrPermission, Status: 403, Message: "no access"}, hint, "403 no access"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			orig := *tt.err
			s := NewStream(context.Background(), m, &stepDecoder{openErr: tt.err}, 0)
			s.SetAuthHint(tt.hint)
			msg, err := Collect(s)
			if err == nil || msg.StopReason != StopError {
				t.Fatalf("err %v, stop %s", err, msg.StopReason)
			}
			if msg.ErrorMessage != tt.want || s.Err().Error() != tt.want {
				t.Fatalf("errorMessage %q, Err %q, want %q", msg.ErrorMessage, s.Err().Error(), tt.want)
			}
			if *tt.err != orig {
				t.Fatalf("the decoder's error was changed: %+v", *tt.err)
			}
		})
	}
}
