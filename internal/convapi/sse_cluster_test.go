package convapi

import (
	"net/http/httptest"
	"testing"
)

// Only a GET of a conversation's event stream is served on every
// cluster node; everything else naming a conversation goes to its owner.
func TestServedEverywhere(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/api/v2/conversations/c1/events", true},
		{"GET", "/api/conversations/c1/events", true},
		{"GET", "/api/v2/conversations/c1/events/", true},
		{"GET", "/api/v2/conversations/c%2F1/events", true},
		{"POST", "/api/v2/conversations/c1/events", false},
		{"HEAD", "/api/v2/conversations/c1/events", false},
		{"GET", "/api/v2/conversations/c1", false},
		{"GET", "/api/v2/conversations/c1/events/x", false},
		{"GET", "/api/v2/conversations//events", false},
		{"GET", "/api/v2/sessions/s1/events", false},
		{"GET", "/api/v1/ws/sessions/c1", false},
		{"GET", "/other/conversations/c1/events", false},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if got := ServedEverywhere(r); got != tc.want {
			t.Errorf("ServedEverywhere(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}
