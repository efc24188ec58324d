package convapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/jwtauth"
)

// streamsOf is how many event streams the face counts for subject.
func (fx *fixture) streamsOf(subject string) int {
	return fx.face.streams.Held(subject)
}

// waitStreams waits until the face counts n streams of subject: a
// stream's handler returns a moment after its client hung up.
func (fx *fixture) waitStreams(subject string, n int) {
	fx.t.Helper()
	deadline := time.Now().Add(wait)
	for fx.streamsOf(subject) != n {
		if time.Now().After(deadline) {
			fx.t.Fatalf("%s holds %d streams, want %d", subject, fx.streamsOf(subject), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One JWT subject holds at most MaxStreamsPerSubject event streams on a
// node: the next is refused as every limit of the face is (429, gptme's
// error body, Retry-After), whatever conversation it names, while
// another subject, and the shared token, still connect; a stream that
// ends frees its slot.
func TestStreamsPerSubject(t *testing.T) {
	v, err := jwtauth.New(jwtauth.Options{Secret: jwtSecret})
	if err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fixtureOptions{token: testToken, tokens: v, maxStreams: 2})
	alice, bob := jwtFor(t, "alice"), jwtFor(t, "bob")
	for _, c := range []struct{ id, tok string }{{"a1", alice}, {"a2", alice}, {"b1", bob}} {
		fx.ok("PUT", "/api/v2/conversations/"+c.id, map[string]any{}, bearer(c.tok)...)
	}
	a1 := fx.open("/api/v2/conversations/a1/events", bearer(alice)...)
	a1.next("connected")
	fx.open("/api/v2/conversations/a2/events", bearer(alice)...).next("connected")
	const refused = "Too many event streams for this user (at most 2): close one first"
	for _, tc := range []struct {
		name, path string
		hdr        []string
	}{
		{"a third stream of the same conversation", "/api/v2/conversations/a1/events", bearer(alice)},
		{"another conversation", "/api/v2/conversations/a2/events", bearer(alice)},
		{"the token in the URL", "/api/v2/conversations/a1/events?token=" + alice, nil},
		{"a resume", "/api/v2/conversations/a1/events", append(bearer(alice), "Last-Event-ID", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fx.do("GET", tc.path, nil, tc.hdr...)
			wantErr(t, r, http.StatusTooManyRequests, refused)
			if r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("refusal headers: %v", r.header)
			}
		})
	}
	// Others are not starved: another subject, and the shared token
	// (bounded by the node's connection limit alone).
	fx.open("/api/v2/conversations/b1/events", bearer(bob)...).next("connected")
	fx.open("/api/v2/conversations/a1/events", bearer(testToken)...).next("connected")
	if n := fx.streamsOf("alice"); n != 2 {
		t.Errorf("alice holds %d streams after her refusals, want 2", n)
	}

	// A stream alice closes frees its slot.
	a1.close()
	fx.waitStreams("alice", 1)
	fx.open("/api/v2/conversations/a1/events", bearer(alice)...).next("connected")
	wantErr(t, fx.do("GET", "/api/v2/conversations/a1/events", nil, bearer(alice)...), http.StatusTooManyRequests, refused)

	// A stream the server ends (its conversation deleted) frees it too.
	fx.ok("DELETE", "/api/v2/conversations/a2", nil, bearer(alice)...)
	fx.waitStreams("alice", 1)
	fx.open("/api/v2/conversations/a1/events", bearer(alice)...).next("connected")
}
