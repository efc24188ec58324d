package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestWebUIChanges: in Chromium, a turn that edits two files and runs bash
// to make a third gets a "Changes" box under its message; opened, it
// shows the three files with their hunks; "Revert files" puts them back
// and offers "Undo revert", which brings the turn's work back; "Revert
// files and conversation" also takes the conversation back to before the
// message and puts it in the message box, and the undo brings both back.
// The console stays clean.
func TestWebUIChanges(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	cpTurnScript(e)
	os.WriteFile(filepath.Join(e.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(e.cwd, "b.txt"), []byte("b before\n"), 0o644)
	s := svStartInProc(t, e)
	p, con := wuOpenAt(t, browser, s, 0, 0)
	p.newConversation("changes")
	p.send("change the files")
	p.until("the approval card", `document.querySelector('.approval button[data-action=auto]') !== null`)
	p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=auto]`)))
	p.until("the turn's changes box", `document.querySelector('#messages .msg-user .turn-changes') !== null && `+stateIs("idle"))
	cpFiles(t, e.cwd, "after the turn", cpAfter)

	open := func() {
		p.t.Helper()
		p.run(chromedp.Click(chromedp.CSS(`.turn-changes > summary`)))
		p.until("the diff", `[...document.querySelectorAll('.turn-changes .changed-file .path')].map((e) => e.textContent.trim()).join(',') === 'a.txt,b.txt,c.txt'`)
	}
	open()
	p.until("the edit's hunk", `(() => { const t = [...document.querySelectorAll('.turn-changes .diff span')].map((e) => e.textContent).join(''); return t.includes('@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n') && t.includes('+made\n'); })()`)
	p.shot("changes")

	p.run(chromedp.Click(chromedp.CSS(`.turn-changes button[data-action=revert]`)))
	p.until("the undo bar", `!document.getElementById('undo-bar').hidden && document.querySelector('#undo-bar button[data-action=undo-revert]') !== null`)
	p.until("the note", shows("Reverted 3 file(s) to before “change the files”."))
	cpFiles(t, e.cwd, "after Revert files", cpBefore)
	if n := wuEval[int](p, `document.querySelectorAll('#messages .msg-user').length`); n != 1 {
		p.fail("Revert files changed the conversation: %d user messages", n)
	}

	p.run(chromedp.Click(chromedp.CSS(`#undo-bar button[data-action=undo-revert]`)))
	p.until("the undo bar gone", `document.getElementById('undo-bar').hidden`)
	cpFiles(t, e.cwd, "after Undo revert", cpAfter)

	p.until("the changes box again", `document.querySelector('#messages .msg-user .turn-changes') !== null`)
	open()
	p.run(chromedp.Click(chromedp.CSS(`.turn-changes button[data-action=revert-truncate]`)))
	p.until("the conversation back before the message", `document.querySelectorAll('#messages .msg').length === 0 && !document.getElementById('undo-bar').hidden`)
	p.until("the message in the box", `document.getElementById('prompt').value === 'change the files'`)
	cpFiles(t, e.cwd, "after Revert files and conversation", cpBefore)
	p.shot("reverted")

	p.run(chromedp.Click(chromedp.CSS(`#undo-bar button[data-action=undo-revert]`)))
	p.until("the conversation back", shows("change the files")+` && document.querySelector('#messages .msg-user .turn-changes') !== null && document.getElementById('undo-bar').hidden`)
	cpFiles(t, e.cwd, "after the second undo", cpAfter)
	con.clean(p)
}
