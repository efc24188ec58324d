package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The web UI offers the conversation's slash commands when "/" is typed
// (built-ins, templates, skills), completes one with Tab or Enter, sends
// a template that the server expands, shows a built-in's output, and
// lists the files the system prompt was built from.
func TestWebUISlashCommands(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	e2eCommandFiles(t, e)
	writeFileAll(t, filepath.Join(e.cwd, "AGENTS.md"), "Be terse.")
	s := svStartInProc(t, e)
	p := wuOpen(t, browser, s)
	p.newConversation("slash")

	p.until("the context files", `!document.getElementById('context-files').hidden && document.getElementById('context-files').textContent.includes(`+js(filepath.Join(e.cwd, "AGENTS.md"))+`)`)

	items := `[...document.querySelectorAll('#slash-list li')].map((li) => li.dataset.name)`
	p.run(chromedp.Focus(chromedp.CSS("#prompt")), wuType("#prompt", "/"))
	p.until("every command offered", `!document.getElementById('slash-list').hidden && ['help','compact','model','fork','undo','redo','review','skill:deploy','skill:lint'].every((n) => `+items+`.includes(n))`)
	p.shot("offered")
	// ("/re" is /redo's start too)
	p.run(wuType("#prompt", "rev"))
	p.until("only /review", `JSON.stringify(`+items+`) === '["review"]' && document.getElementById('slash-list').textContent.includes('Review a file')`)
	p.run(wuType("#prompt", "\t"))
	p.until("completed", `document.getElementById('prompt').value === '/review ' && document.getElementById('slash-list').hidden`)
	p.run(wuType("#prompt", "ui/x.go\r"))
	p.until("the answer", shows("Hello from mock! You said: REVIEW-TEMPLATE: review ui/x.go"))
	if body := string(e.mock.LastRequest(t).Body); !strings.Contains(body, "REVIEW-TEMPLATE: review ui/x.go for bugs") {
		t.Fatalf("not expanded:\n%s", body)
	}
	p.until("idle", stateIs("idle"))

	// Enter completes while the list is open; the next Enter sends.
	p.run(wuType("#prompt", "/hel"))
	p.until("only /help", `JSON.stringify(`+items+`) === '["help"]'`)
	p.run(wuType("#prompt", "\r"))
	// (chromedp's Enter also types a newline, which a person's does not)
	p.until("completed", `document.getElementById('prompt').value.trim() === '/help'`)
	n := len(e.mock.Requests())
	p.run(wuType("#prompt", "\r"))
	p.until("the output of /help", `[...document.querySelectorAll('.msg-command')].some((d) => d.textContent.includes('/skill:deploy') && d.textContent.includes('/review <file>'))`)
	if len(e.mock.Requests()) != n {
		t.Fatalf("/help reached the model")
	}
	p.shot("slash")
}
