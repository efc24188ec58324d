package sessionws

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// Only a connection to a session's WebSocket is served on every cluster
// node; anything else naming a session is passed on to its owner.
func TestServedEverywhere(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodGet, "/api/v1/ws/sessions/s1", true},
		{http.MethodGet, "/api/v1/ws/conversions/s1", true},
		{http.MethodGet, "/api/v1/ws/sessions/s1/", true},
		{http.MethodGet, "/api/v1/ws/sessions/s1/x", false},
		{http.MethodGet, "/api/v1/ws/sessions/", false},
		{http.MethodPost, "/api/v1/ws/sessions/s1", false},
		{http.MethodGet, "/api/v1/ws/schema.json", false},
		{http.MethodGet, "/api/v2/conversations/s1", false},
	} {
		if got := ServedEverywhere(httptest.NewRequest(tc.method, tc.path, nil)); got != tc.want {
			t.Errorf("ServedEverywhere(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

// The watch of a session another node runs encodes from its view: the
// owner's reading (sent as JSON), then the events after it. State changes
// number on from the owner's history, a run's end says completed, a
// question asked live is asked and one answered is no longer pending, and
// a question replayed from before the reading is asked only if it was
// still open then.
func TestAwayWatchEncodes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	open := interaction.Request{ID: "q-open", Kind: interaction.KindConfirm, Title: "Still open?"}
	reading := seed{Status: server.Status{State: server.StateRunning, Seq: 20, Updated: at, Run: &server.RunProgress{Started: at}},
		History: []server.Transition{{Version: 3, Seq: 18, Old: server.StateIdle, New: server.StateRunning}},
		Pending: []interaction.Request{open}, Created: at}
	b, err := json.Marshal(reading)
	if err != nil {
		t.Fatal(err)
	}
	var s seed
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	f := &Face{opt: Options{}, aways: map[*watch]struct{}{}}
	f.opt.fill()
	f.closing = true // no progress goroutine: Encode alone is under test
	w := f.awayWatchFor(&conn{f: f, id: "s1"}, &s)
	asked := func(r interaction.Request, seq uint64) session.Event {
		return session.Event{Type: session.EventInteractionRequested, Seq: seq, Time: at, Interaction: &interaction.Event{Type: interaction.EventRequested, Request: r}}
	}
	types := func(fr server.Frame) []string {
		var out []string
		for _, d := range append([][]byte{fr.Data}, fr.More...) {
			if d == nil {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(d, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m["type"].(string))
			if m["type"] == "status_change" && m["version"].(float64) != 4 {
				t.Errorf("status_change version %v, want 4 (after the owner's 3)", m["version"])
			}
		}
		return out
	}
	// Replayed from before the reading: the open question is asked, one
	// answered since is not.
	if got := types(w.Encode("s1", asked(open, 15))); len(got) != 1 || got[0] != "input_required" {
		t.Errorf("a replayed open question encodes as %v", got)
	}
	if got := types(w.Encode("s1", asked(interaction.Request{ID: "q-done", Kind: interaction.KindConfirm}, 16))); len(got) != 0 {
		t.Errorf("a replayed answered question encodes as %v", got)
	}
	live := interaction.Request{ID: "q-live", Kind: interaction.KindConfirm, Title: "Go?"}
	if got := types(w.Encode("s1", asked(live, 21))); len(got) != 1 || got[0] != "input_required" {
		t.Errorf("a live question encodes as %v", got)
	}
	if n := len(w.v.Interactions()); n != 2 {
		t.Errorf("%d questions pending, want 2", n)
	}
	w.Encode("s1", session.Event{Type: session.EventInteractionResolved, Seq: 22, Time: at,
		Interaction: &interaction.Event{Type: interaction.EventResolved, Request: live, Resolution: &interaction.Resolution{By: interaction.ResolvedAnswered}}})
	if _, ok := w.v.InteractionByID("q-live"); ok {
		t.Error("an answered question is still pending")
	}
	end := session.Event{Type: session.EventStateChanged, Seq: 23, Time: at.Add(time.Second), State: session.StateIdle, Previous: session.StateRunning, Outcome: session.OutcomeCompleted}
	if got := types(w.Encode("s1", end)); len(got) != 2 || got[0] != "status_change" || got[1] != "completed" {
		t.Errorf("the run's end encodes as %v", got)
	}
	// The same event again (a client moved onto the session this node
	// took over is replayed from its last frame) changes nothing.
	rev := w.v.StatusRev()
	w.Encode("s1", end)
	if w.v.StatusRev() != rev || w.v.Status().State != server.StateCompleted {
		t.Errorf("an event encoded again changed the view: %+v", w.v.Status())
	}
}
