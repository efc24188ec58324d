package convapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
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

// conversation_edited carries the conversation's log as it stands; a
// node whose stream is fed for a conversation another node runs has no
// log, and tells the client to reload instead of sending an empty one.
func TestCodecEditedElsewhere(t *testing.T) {
	ev := session.Event{Type: session.EventConversationEdited, Seq: 12, Index: 3, Truncated: true}
	for _, tc := range []struct {
		name     string
		messages func(string) []*llm.Message
		want     string
	}{
		{"loaded here", func(string) []*llm.Message {
			return []*llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}}}
		}, `"type":"conversation_edited"`},
		{"loaded here, empty", func(string) []*llm.Message { return []*llm.Message{} }, `"log":[]`},
		{"run by another node", func(string) []*llm.Message { return nil },
			`id: 12` + "\n" + `data: {"type":"resync","reason":"The conversation was edited at message 3 on the node that runs it: reload the conversation (GET) and continue from seq","after":11,"seq":12}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cd := &codec{requests: &requestIDs{}, messages: tc.messages}
			if got := string(cd.Encode("s1", ev).Data); !strings.Contains(got, tc.want) {
				t.Errorf("frame lacks %s:\n%s", tc.want, got)
			}
		})
	}
}
