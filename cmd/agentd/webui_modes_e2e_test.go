package main

import "testing"

// The web UI's mode chip: a conversation shows its mode next to the
// model, choosing plan switches the conversation (REST's config says
// plan, and the chip is marked read-only), and a switch made on another
// face (pi-server's set_mode) reaches the open page through the event
// stream.
func TestWebUIModeChip(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	p := wuOpen(t, browser, s)
	p.newConversation("modes")
	p.until("the mode chip", `!document.getElementById('conv-mode').hidden && document.getElementById('conv-mode').value === 'build' && [...document.querySelectorAll('#conv-mode option')].map((o) => o.value).join() === 'build,plan'`)
	id := wuEval[string](p, `decodeURIComponent(location.hash.slice('#/c/'.length))`)

	// As a person's choice: the value, then one change event.
	wuEval[bool](p, `(() => { const s = document.getElementById('conv-mode'); s.value = 'plan'; return s.dispatchEvent(new Event('change')); })()`)
	p.until("plan mode shown as read-only", `document.getElementById('conv-mode').classList.contains('mode-ro') && document.getElementById('messages').textContent.includes('From now on: plan mode.')`)
	cfg := rsOK(t, s, "GET", rsConvPath(id)+"/config", nil)
	if chat, _ := cfg.m["chat"].(map[string]any); chat["mode"] != "plan" {
		t.Fatalf("after choosing plan in the page, REST config says %v", cfg.m["chat"])
	}
	p.shot("plan")

	c := s.dial("pi")
	c.must("set_mode", svM{"sessionId": id, "mode": "build"})
	p.until("the switch made on pi-server", `document.getElementById('conv-mode').value === 'build' && !document.getElementById('conv-mode').classList.contains('mode-ro')`)
}
