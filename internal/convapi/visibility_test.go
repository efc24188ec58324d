package convapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// routeBodies is a request body, valid for the conversation's owner, for
// every route that names a conversation, keyed by method and path. A new
// route fails TestEveryRouteHidesOthersConversations until it is given
// one here, so it cannot be added without being walked.
var routeBodies = map[string]any{
	"GET /conversations/{conversation_id}":                     nil,
	"PUT /conversations/{conversation_id}":                     userMsgs("bob's"),
	"POST /conversations/{conversation_id}":                    map[string]any{"role": "user", "content": "from bob"},
	"DELETE /conversations/{conversation_id}":                  nil,
	"GET /conversations/{conversation_id}/events":              nil,
	"POST /conversations/{conversation_id}/step":               map[string]any{},
	"POST /conversations/{conversation_id}/tool/confirm":       map[string]any{"tool_id": "tool-x", "action": "confirm"},
	"POST /conversations/{conversation_id}/interrupt":          map[string]any{},
	"GET /conversations/{conversation_id}/commands":            nil,
	"GET /conversations/{conversation_id}/config":              nil,
	"PATCH /conversations/{conversation_id}/config":            map[string]any{"chat": map[string]any{"name": "bob's now"}},
	"PATCH /conversations/{conversation_id}/messages/{index}":  map[string]any{"content": "rewritten by bob"},
	"DELETE /conversations/{conversation_id}/messages/{index}": nil,
	"POST /conversations/{conversation_id}/fork":               nil,
	"POST /conversations/{conversation_id}/rerun":              map[string]any{},
	"POST /conversations/{conversation_id}/transcript":         transcriptBody("CA-alice", "from bob"),
	"POST /conversations/{conversation_id}/elicit/respond":     map[string]any{"elicit_id": "e1", "action": "decline"},
	"GET /conversations/{conversation_id}/changes":             nil,
	"GET /conversations/{conversation_id}/changes/diff":        nil,
	"POST /conversations/{conversation_id}/changes/revert":     map[string]any{"truncate": true},
	"POST /conversations/{conversation_id}/changes/undo":       nil,
	"POST /conversations/{conversation_id}/workspace/upload":   []byte("--x--\r\n"),
}

func transcriptBody(sid, text string) map[string]any {
	return map[string]any{"turns": []any{map[string]any{"role": "user", "text": text}}, "call_metadata": map[string]any{"call_sid": sid}}
}

// Every route of the face's table that names a conversation, walked with
// a second subject's JWT: on another subject's conversation it answers
// exactly as on one that does not exist (the same 404), and changes
// nothing. The routes that make a missing conversation (PUT, and the
// voice transcript, which on main added bob's turns to alice's
// conversation and answered already_acked for her call) cannot make one
// whose id is taken: they answer 409 and 404 and add nothing.
func TestEveryRouteHidesOthersConversations(t *testing.T) {
	fx := newJWTFixture(t, testToken)
	alice, bob := bearer(jwtFor(t, "alice")), bearer(jwtFor(t, "bob"))
	fx.ok("PUT", "/api/v2/conversations/alices", userMsgs("alice's secret"), alice...)
	if r := fx.ok("POST", "/api/v2/conversations/alices/transcript", transcriptBody("CA-alice", "by phone"), alice...); r.str("status") != "ok" {
		t.Fatalf("alice's transcript: %s", r)
	}
	fx.ok("PUT", "/api/v2/conversations/bobs", userMsgs("bob's own"), bob...)
	before := fx.ok("GET", "/api/v2/conversations/alices", nil, alice...).body
	beforeCfg := fx.ok("GET", "/api/v2/conversations/alices/config", nil, alice...).body

	creates := map[string]struct {
		status int
		msg    string
	}{
		"PUT /conversations/{conversation_id}":             {http.StatusConflict, "Conversation already exists: alices"},
		"POST /conversations/{conversation_id}/transcript": {http.StatusNotFound, "Conversation not found: alices"},
	}
	walked := 0
	for _, rt := range fx.face.routes() {
		if !strings.Contains(rt.path, "{conversation_id}") {
			continue
		}
		key := rt.method + " " + rt.path
		walked++
		t.Run(key, func(t *testing.T) {
			if rt.public {
				t.Fatal("a public route names a conversation: it would skip the visibility check")
			}
			body, ok := routeBodies[key]
			if !ok {
				t.Fatalf("no request for %s in routeBodies: add one so the walk covers it", key)
			}
			path := func(conv string) string {
				p := strings.ReplaceAll(rt.path, "{conversation_id}", conv)
				p = strings.ReplaceAll(p, "{index}", "0")
				if strings.HasSuffix(rt.path, "/fork") {
					p += "?after_message=0"
				}
				return "/api/v2" + p
			}
			got := fx.do(rt.method, path("alices"), body, bob...)
			if want, ok := creates[key]; ok {
				if !rt.creates {
					t.Errorf("%s makes conversations but is not marked creates", key)
				}
				wantErr(t, got, want.status, want.msg)
				return
			}
			if rt.creates {
				t.Errorf("%s is marked creates: add what it answers on a taken id to the test", key)
			}
			missing := fx.do(rt.method, path("nobody"), body, bob...)
			if got.status != http.StatusNotFound {
				t.Errorf("bob on alice's conversation: %s, want 404", got)
			}
			if g, m := got.str("error"), strings.ReplaceAll(missing.str("error"), "nobody", "alices"); got.status != missing.status || g != m {
				t.Errorf("bob on alice's conversation: %s\nand on a missing one: %s", got, missing)
			}
			// The design document's paths (/api/conversations/...) are the
			// same routes.
			alias := fx.do(rt.method, strings.Replace(path("alices"), "/api/v2", "/api", 1), body, bob...)
			if alias.status != got.status || alias.str("error") != got.str("error") {
				t.Errorf("bob on alice's conversation by /api: %s, by /api/v2: %s", alias, got)
			}
		})
	}
	if walked != len(routeBodies) {
		t.Errorf("walked %d routes naming a conversation, routeBodies has %d: remove what the table no longer has", walked, len(routeBodies))
	}

	// A call alice's conversation has not seen is not added either.
	wantErr(t, fx.do("POST", "/api/v2/conversations/alices/transcript", transcriptBody("CA-bob-new", "injected"), bob...), http.StatusNotFound, "Conversation not found: alices")

	// Nothing bob sent reached alice's conversation, and bob's transcript
	// made no conversation under her id for him.
	if after := fx.ok("GET", "/api/v2/conversations/alices", nil, alice...).body; string(after) != string(before) {
		t.Errorf("alice's conversation changed:\nbefore %s\nafter  %s", before, after)
	}
	if after := fx.ok("GET", "/api/v2/conversations/alices/config", nil, alice...).body; string(after) != string(beforeCfg) {
		t.Errorf("alice's config changed:\nbefore %s\nafter  %s", beforeCfg, after)
	}
	if ids := listed(t, fx, bob...); len(ids) != 1 || ids[0] != "bobs" {
		t.Errorf("bob lists %v", ids)
	}
	// Bob's own transcript still makes and adds to his conversations.
	for _, id := range []string{"bobs", "bobs-call"} {
		r := fx.ok("POST", "/api/v2/conversations/"+id+"/transcript", transcriptBody("CA-bob", "hello"), bob...)
		var tr TranscriptResponse
		if err := json.Unmarshal(r.body, &tr); err != nil || tr.Status != "ok" || tr.MessagesAdded != 1 {
			t.Errorf("bob's transcript to %s: %s", id, r)
		}
	}
}
