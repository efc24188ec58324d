package server

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
)

// A stream-opening command with no client behind its origin (a journal
// replay, a face's mistake) subscribes nobody and says so.
func TestSubscribeOriginWithoutAClient(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		name   string
		origin any
	}{
		{"none", nil},
		{"a principal", Principal{Subject: "alice"}},
		{"a watch without a client", &WatchOrigin{Who: Principal{Subject: "alice"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.SubscribeOrigin(tc.origin, nil, nil); fault.CodeOf(err) != fault.Internal {
				t.Errorf("SubscribeOrigin(%T) = %v, want an internal error", tc.origin, err)
			}
		})
	}
	if got := principalOf(Principal{Subject: "alice", Scoped: true}); got.Subject != "alice" || !got.Scoped {
		t.Errorf("principalOf(Principal) = %+v: a REST command forwarded between nodes would run unscoped", got)
	}
	if got := principalOf(&WatchOrigin{Who: Principal{Subject: "bob", Scoped: true}}); got.Subject != "bob" || !got.Scoped {
		t.Errorf("principalOf(WatchOrigin) = %+v", got)
	}
}
