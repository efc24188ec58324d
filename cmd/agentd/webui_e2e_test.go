package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// The web UI in real Chromium, against the real binary and the
// wire-level model mock. Chromium is driven over the DevTools protocol
// with chromedp; the page is used as a person uses it (clicks, keys) and
// checked by what it shows.

// wuChromium finds a Chromium or Chrome binary on PATH.
func wuChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// wuWait is how long a page has to show what a step expects.
const wuWait = 20 * time.Second

// wuBrowser starts a headless Chromium for the test and returns a
// context of its first tab.
func wuBrowser(t *testing.T) context.Context {
	t.Helper()
	bin := wuChromium()
	if bin == "" {
		t.Skip("no Chromium: install Debian's chromium package (apt-get install -y chromium) or put chromium, chromium-browser or google-chrome on PATH to run the web UI tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
		// Root in a container has no user namespaces for the sandbox.
		chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	return ctx
}

// wuPage is one tab on one server.
type wuPage struct {
	t    *testing.T
	ctx  context.Context
	base string
	srv  *svServer
}

func wuOpen(t *testing.T, browser context.Context, s *svServer) *wuPage {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	// The tab opens on the first action of its own context: an action's
	// timeout context would close it when cancelled.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	p := &wuPage{t: t, ctx: ctx, base: "http://" + s.loopback(), srv: s}
	p.run(chromedp.Navigate(p.base + "/"))
	return p
}

// wuType types text into the element sel, as chromedp.SendKeys does
// (focus, then a key event per character). SendKeys itself reads the
// node's attributes without the node's lock (chromedp v0.23.0,
// query.go), which the race detector reported when the page changed an
// attribute of the node meanwhile; Focus reads only the node's id.
func wuType(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Focus(chromedp.CSS(sel), chromedp.NodeVisible), chromedp.KeyEvent(text))
}

// wuPress presses keys as a browser does for a person: a key's keydown
// carries its character, so a page that takes the keydown
// (preventDefault) gets no character from it. chromedp.KeyEvent sends
// the character as an event of its own, a round trip after the
// keydown; by then the keydown may have moved the focus (an approval
// card answered gives it to the message box, Reject to the reason box),
// and the character lands there: a stray "y" in the message box kept
// the next card from taking the focus (TestWebUIApprovalKeys, 1 run in
// 3 with -race on a loaded machine).
func wuPress(keys string, opts ...chromedp.KeyOption) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			evs := kb.Encode(r)
			for _, k := range evs {
				for _, o := range opts {
					o(k)
				}
			}
			for i, k := range evs {
				if k.Type == kb.KeyChar {
					continue // its text went with the keydown
				}
				if k.Type == kb.KeyDown && i+1 < len(evs) && evs[i+1].Type == kb.KeyChar && k.Modifiers&^int64(chromedp.ModifierShift) == 0 {
					k.Text, k.UnmodifiedText = evs[i+1].Text, evs[i+1].UnmodifiedText
				}
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (p *wuPage) run(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wuWait+5*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fail("%v", err)
	}
}

// fail ends the test with the page's text and the server's log.
func (p *wuPage) fail(format string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 3*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	// Where the focus is, and the message box's text, which the page
	// text leaves out: a focus test's failure names what holds it.
	focus, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const a = document.activeElement; const d = a ? a.tagName + (a.id ? '#' + a.id : '') + (a.className ? '.' + a.className : '') + (a.dataset && a.dataset.action ? '[' + a.dataset.action + ']' : '') : 'none'; const b = document.getElementById('prompt'); return d + ', message box ' + JSON.stringify(b ? b.value : null); })()`))
	p.shot("failed")
	p.t.Fatalf(format+"\nfocus: %s\npage text:\n%s\nserver stderr:\n%s", append(args, focus, e2eClip(text, 3000), p.srv.stderrTail(3000))...)
}

// until waits for a JavaScript expression to be true.
func (p *wuPage) until(what, js string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wuWait+5*time.Second)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(wuWait)))
		if wuStaleContext(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			p.fail("waiting for %s (%s): %v", what, js, err)
		}
		return
	}
}

// wuStaleContext says whether a poll was sent to the execution context
// of a document the page has left. chromedp (v0.23.0, Target.run) ends
// Reload and Navigate at the load event, which its listeners see on one
// goroutine, while the target learns of the new document's context on
// another, from events queued before it: a poll right after a reload
// may still name the old context (TestWebUIApprovalKeys and
// TestWebUIReplayCut both, once in 12 runs with -race at a load of 29).
// Polling again names the new one once the target has caught up.
func wuStaleContext(err error) bool {
	var ce *cdproto.Error
	return errors.As(err, &ce) && ce.Message == "Cannot find context with specified id"
}

// wuEval evaluates a JavaScript expression on the page.
func wuEval[T any](p *wuPage, js string, opts ...chromedp.EvaluateOption) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, wuWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		p.fail("evaluating %s: %v", js, err)
	}
	return v
}

// shot saves a screenshot of the page when WEBUI_SCREENSHOTS names a
// directory.
func (p *wuPage) shot(name string) {
	dir := os.Getenv("WEBUI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	file := filepath.Join(dir, strings.NewReplacer("/", "-", " ", "-").Replace(p.t.Name())+"-"+name+".png")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
	}
}

// js quotes s as a JavaScript string.
func js(s string) string { return strconv.Quote(s) }

// shows is the expression: #messages shows s.
func shows(s string) string {
	return `document.getElementById('messages').textContent.includes(` + js(s) + `)`
}

func stateIs(s string) string {
	return `document.getElementById('state').textContent === ` + js(s)
}

// newConversation creates one through the form and waits until it is
// open.
func (p *wuPage) newConversation(name string) {
	p.t.Helper()
	p.until("the app", `!document.getElementById('app').hidden`)
	p.run(chromedp.Click(chromedp.CSS("#new-conv")))
	p.until("the model list", `document.querySelectorAll('#new-model option').length > 0`)
	// Models without a key are listed too, greyed out, saying why.
	p.until("an unusable model with its reason", `[...document.querySelectorAll('#new-model option:disabled')].some((o) => /not usable: .*key/i.test(o.textContent)) && document.querySelector('#new-model option:checked:enabled') !== null`)
	p.run(wuType("#new-name", name))
	p.run(chromedp.Click(chromedp.CSS(`#new-form button[type=submit]`)))
	p.until("the conversation", `location.hash.startsWith('#/c/web-') && !document.getElementById('prompt').disabled && document.getElementById('conv-title').textContent === `+js(name))
	p.until("the event stream", `document.getElementById('state').textContent === 'idle'`)
}

// send types a prompt and presses Enter.
func (p *wuPage) send(text string) {
	p.t.Helper()
	// Enter with wuPress: a character of its own (chromedp.KeyEvent)
	// came after the message went, and landed wherever the focus was by
	// then; on an approval card that had appeared and taken the focus,
	// it pressed Run.
	p.run(chromedp.Focus(chromedp.CSS("#prompt")), wuType("#prompt", text), wuPress("\r"))
}

func (p *wuPage) count(s string) int {
	return wuEval[int](p, `document.getElementById('messages').textContent.split(`+js(s)+`).length - 1`)
}

func TestWebUIConversation(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStart(t, e)
	top := t // a server started in a subtest outlives it

	t.Run("served", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.until("the app", `!document.getElementById('app').hidden`)
		title := wuEval[string](p, `document.title`)
		if title != "agentd" {
			t.Errorf("title %q, want agentd", title)
		}
		// The page's headers, and the Host check in front of it: a page
		// reached through a rebinding DNS name is refused.
		for _, tc := range []struct {
			host   string
			status int
		}{{s.loopback(), 200}, {"evil.example", 403}} {
			req, _ := http.NewRequest("GET", "http://"+s.loopback()+"/", nil)
			req.Host = tc.host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Errorf("GET / with Host %s: %d, want %d", tc.host, res.StatusCode, tc.status)
			}
			if tc.status == 200 && !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("GET / has no strict Content-Security-Policy: %q", res.Header.Get("Content-Security-Policy"))
			}
		}
	})

	t.Run("prompt streams an answer", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("first chat")
		p.send("hello there")
		want := "Hello from mock! You said: hello there"
		p.until("the answer", shows(want))
		p.until("idle", stateIs("idle"))
		if n := p.count(want); n != 1 {
			p.fail("the answer shows %d times, want once", n)
		}
		ms := wuEval[string](p, `document.querySelector('.msg-assistant').dataset.firstTokenMs || ''`)
		t.Logf("first token shown %s ms after Enter", ms)
		p.until("the list", `[...document.querySelectorAll('.conv-name')].some(e => e.textContent.startsWith('first chat'))`)
		p.shot("end")
	})

	t.Run("thinking streams into its box", func(t *testing.T) {
		e.tweak("think it over", func(s *wiremock.Script) { s.Thinking = []string{"weighing ", "the options"} })
		release := e.proxy.holdAfter("think it over", 2)
		p := wuOpen(t, browser, s)
		p.newConversation("thinking")
		p.send("think it over")
		p.until("the thinking streaming in an open box", `(document.querySelector('.streaming details.thinking[open] .thinking-text')?.textContent || '').startsWith('weighing')`)
		if body := wuEval[string](p, `document.querySelector('.streaming .stream-text').textContent`); body != "" {
			p.fail("the streamed answer's text is %q while the model thinks, want empty", body)
		}
		close(release)
		p.until("the answer", shows("Hello from mock! You said: think it over"))
		p.until("the answer's thinking", `[...document.querySelectorAll('.msg-assistant details.thinking .thinking-text')].some(e => e.textContent === 'weighing the options')`)
	})

	t.Run("approvals", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("approvals")

		p.send("CMD:echo hi-from-browser")
		p.until("the approval card", `document.querySelector('.tool .approval button[data-action=run]') !== null`)
		p.until("waiting", stateIs("waiting for you"))
		p.until("the command", shows("$ echo hi-from-browser"))
		p.shot("pending")
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("the output", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('hi-from-browser'))`)
		p.until("the answer", shows("Tool said: hi-from-browser"))
		p.until("the card gone", `document.querySelector('.approval') === null`)
		p.until("idle", stateIs("idle"))

		p.send("CMD:echo original-command")
		p.until("the approval card", `document.querySelector('.approval button[data-action=edit]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=edit]`)),
			chromedp.SetValue(chromedp.CSS(`.approval-edit`), "echo edited-by-browser"),
			chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("the edited output", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('edited-by-browser'))`)
		p.until("idle", stateIs("idle"))
		if n := p.count("original-command\n"); n != 0 {
			p.fail("the original command ran: its output shows %d times", n)
		}

		p.send("CMD:echo skipped-command")
		p.until("the approval card", `document.querySelector('.approval button[data-action=skip]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=skip]`)))
		p.until("the card gone", `document.querySelector('.approval') === null`)
		p.until("idle", stateIs("idle"))

		p.send("CMD:echo rejected-command")
		p.until("the approval card", `document.querySelector('.approval button[data-action=reject]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=reject]`)),
			wuType(`.approval-feedback`, "not on my machine"),
			chromedp.Click(chromedp.CSS(`.approval button[data-action=reject]`)))
		p.until("the card gone", `document.querySelector('.approval') === null`)
		p.until("the rejection", shows("not on my machine"))
		p.until("idle", stateIs("idle"))
		ran := wuEval[bool](p, `[...document.querySelectorAll('.tool-output')].some(e => /^(skipped|rejected)-command$/m.test(e.textContent))`)
		if ran {
			p.fail("a skipped or rejected command ran")
		}

		p.send("CMD:echo auto-one")
		p.until("the approval card", `document.querySelector('.approval button[data-action=auto]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=auto]`)))
		p.until("auto-one ran", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('auto-one'))`)
		p.until("idle", stateIs("idle"))
		p.send("CMD:echo auto-two") // within the 5 given: runs without a card
		p.until("auto-two ran", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('auto-two'))`)
		p.until("idle", stateIs("idle"))
		p.shot("end")
	})

	t.Run("always", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("always")
		p.send("CMD:echo always-one")
		p.until("the approval card", `document.querySelector('.approval button[data-action=always]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=always]`)))
		p.until("always-one ran", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('always-one'))`)
		p.until("idle", stateIs("idle"))
		for i := range 6 { // more than auto's count: bash is allowed for good
			p.send(fmt.Sprintf("CMD:echo always-%d", i+2))
			p.until("it ran without a card", fmt.Sprintf(`[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('always-%d'))`, i+2))
			p.until("idle", stateIs("idle"))
		}
	})

	t.Run("second tab answers", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("two tabs")
		p.send("CMD:echo answered-elsewhere")
		p.until("the approval card", `document.querySelector('.approval button[data-action=run]') !== null`)
		hash := wuEval[string](p, `location.hash`)
		q := wuOpen(t, browser, s)
		q.run(chromedp.Navigate(q.base + "/" + hash))
		q.until("the card in the second tab", `document.querySelector('.approval button[data-action=run]') !== null`)
		q.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("the card gone in the first tab", `document.querySelector('.approval') === null`)
		p.until("the output in the first tab", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('answered-elsewhere'))`)
		p.until("idle", stateIs("idle"))
	})

	t.Run("questions", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("questions")
		p.send("ASK:select")
		p.until("the question", `document.querySelector('.elicit input[value=green]') !== null`)
		p.until("waiting", stateIs("waiting for you"))
		p.run(chromedp.Click(chromedp.CSS(`.elicit input[value=green]`)), chromedp.Click(chromedp.CSS(`.elicit button[type=submit]`)))
		p.until("the question gone", `document.querySelector('.elicit') === null`)
		p.until("the answer reached the model", shows("Tool said:"))
		p.until("idle", stateIs("idle"))
		if !strings.Contains(wuEval[string](p, `[...document.querySelectorAll('.tool-output')].map(e => e.textContent).join('|')`), "green") {
			p.fail("the answer green is not in the tool result")
		}

		p.send("ASK:form")
		p.until("the form", `document.querySelector('.elicit input[type=number]') !== null`)
		p.run(wuType(`.elicit input[type=number]`, "2"), chromedp.Click(chromedp.CSS(`.elicit button[type=submit]`)))
		p.until("the form gone", `document.querySelector('.elicit') === null`)
		p.until("idle", stateIs("idle"))
		if !strings.Contains(wuEval[string](p, `[...document.querySelectorAll('.tool-output')].map(e => e.textContent).join('|')`), "12") {
			p.fail("the form's answer 12 (1 by default, then 2 typed) is not in the tool result")
		}
		p.shot("end")
	})

	t.Run("retry, plan and totals", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("state")
		p.send("FLAKY:503 then fine")
		p.until("the retry countdown", `/^retrying \(1\/3\) in [0-9]+ s$/.test(document.getElementById('state').textContent)`)
		p.shot("retrying")
		p.until("the answer after the retry", shows("You said: FLAKY:503 then fine"))
		p.until("idle", stateIs("idle"))
		// The mock counts 42 input and 7 output tokens per answer, at $1
		// and $2 a million.
		p.until("the totals", `document.getElementById('totals').textContent.includes('49 tokens · $0.0001')`)

		e.tweak("make a plan", func(sc *wiremock.Script) {
			*sc = e2eToolScript("todo", map[string]any{"todos": []map[string]any{
				{"id": 1, "content": "read the code", "status": "completed"},
				{"id": 2, "content": "write the fix", "status": "in_progress"}}})
		})
		p.send("make a plan") // the todo tool runs without asking
		p.until("the plan", `!document.getElementById('plan').hidden && document.getElementById('plan-text').textContent === '1/2 done'`)
		p.until("idle", stateIs("idle"))
		p.shot("end")
	})

	t.Run("rename, search, fork, delete", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("to manage")
		p.send("remember this line")
		p.until("the answer", shows("You said: remember this line"))
		p.until("idle", stateIs("idle"))

		p.run(chromedp.Click(chromedp.CSS("#rename")))
		p.until("the name field", `document.querySelector('#conv-title input') !== null`)
		wuEval[bool](p, `(document.querySelector('#conv-title input').value = '') === ''`)
		p.run(wuType("#conv-title input", "renamed chat\r"))
		p.until("the new name", `document.getElementById('conv-title').textContent === 'renamed chat'`)
		p.until("the new name in the list", `[...document.querySelectorAll('.conv-name')].some(e => e.textContent.startsWith('renamed chat'))`)

		p.run(wuType("#search", "renamed"))
		p.until("the search", `[...document.querySelectorAll('.conv-name')].map(e => e.textContent).join('|') === 'renamed chat'`)
		wuEval[bool](p, `(document.getElementById('search').value = '') === ''`)

		orig := wuEval[string](p, `location.hash`)
		p.run(chromedp.Click(chromedp.CSS("#fork")))
		p.until("the fork", `location.hash !== `+js(orig)+` && document.getElementById('messages').textContent.includes('You said: remember this line')`)

		p.run(chromedp.Navigate(p.base + "/" + orig))
		p.until("the original", `document.getElementById('conv-title').textContent === 'renamed chat'`)
		p.run(chromedp.Click(chromedp.CSS("#delete")))
		p.until("the second click asked for", `document.getElementById('delete').textContent === 'Really delete?'`)
		p.run(chromedp.Click(chromedp.CSS("#delete")))
		p.until("no conversation open", `document.getElementById('conv-title').textContent === 'Welcome' && !document.getElementById('welcome').hidden`)
		p.until("gone from the list", `![...document.querySelectorAll('.conv-name')].some(e => e.textContent.startsWith('renamed chat'))`)
	})

	t.Run("tool cards", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(e.cwd, "notes.txt"), []byte("old line\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e.tweak("change the notes", func(sc *wiremock.Script) {
			*sc = e2eToolScript("edit", map[string]any{"path": "notes.txt", "edits": []map[string]string{{"oldText": "old line", "newText": "new line"}}})
		})
		e.tweak("write a file", func(sc *wiremock.Script) {
			*sc = e2eToolScript("write", map[string]any{"path": "hello.txt", "content": "hello <b>world</b>"})
		})
		p := wuOpen(t, browser, s)
		p.newConversation("tool cards")
		p.send("change the notes")
		p.until("the diff", `document.querySelector('.diff .del')?.textContent === '-old line\n' && document.querySelector('.diff .add')?.textContent === '+new line\n'`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("the edit's result", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('notes.txt'))`)
		p.until("idle", stateIs("idle"))
		if b, _ := os.ReadFile(filepath.Join(e.cwd, "notes.txt")); string(b) != "new line\n" {
			p.fail("notes.txt is %q after the edit", b)
		}
		p.send("write a file")
		p.until("the write", `[...document.querySelectorAll('.tool .path')].some(e => e.textContent === 'write hello.txt') && [...document.querySelectorAll('pre.file')].some(e => e.textContent === 'hello <b>world</b>')`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("idle", stateIs("idle"))
		p.shot("end")
	})

	t.Run("markdown", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.until("the app", `!document.getElementById('app').hidden`)
		tests := []struct{ md, html string }{
			{"# Title", "<h3>Title</h3>"},
			{"a **b** *c* `d`", "<p>a <strong>b</strong> <em>c</em> <code>d</code></p>"},
			{"- one\n- two", "<ul><li>one</li><li>two</li></ul>"},
			{"1. one\n2. two", "<ol><li>one</li><li>two</li></ol>"},
			{"```go\nx := <b>\n```", `<pre class="code" data-lang="go"><code>x := &lt;b&gt;</code></pre>`},
			{"[ok](https://example.com)", `<p><a href="https://example.com" target="_blank" rel="noopener noreferrer">ok</a></p>`},
			{"[bad](javascript:alert(1))", "<p>[bad](javascript:alert(1))</p>"},
			{"__init__ and a__b__c", "<p><strong>init</strong> and a__b__c</p>"}, // as CommonMark: only intraword __ stays
			{"<img src=x onerror=alert(1)>", "<p>&lt;img src=x onerror=alert(1)&gt;</p>"},
			{"> quoted <i>", "<blockquote>quoted &lt;i&gt;</blockquote>"},
		}
		for _, tt := range tests {
			got := wuEval[string](p, `import('/ui/md.js').then(m => { const d = document.createElement('div'); d.append(m.render(`+js(tt.md)+`)); return d.innerHTML; })`, chromedp.EvalAwaitPromise)
			if got != tt.html {
				t.Errorf("render(%q) = %s, want %s", tt.md, got, tt.html)
			}
		}
	})

	t.Run("interrupt mid-stream", func(t *testing.T) {
		release := e.proxy.holdAfter("stop me while streaming", 2)
		defer close(release)
		p := wuOpen(t, browser, s)
		p.newConversation("interrupt")
		p.send("stop me while streaming")
		p.until("streamed text", `(document.querySelector('.streaming')?.textContent || '').includes('Hello')`)
		p.until("running", stateIs("running"))
		p.run(chromedp.KeyEvent("\x1b"))
		p.until("interrupted", shows("Interrupted."))
		p.until("idle", stateIs("idle"))
		p.shot("end")
	})

	t.Run("interrupt mid-tool", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("interrupt tool")
		p.send("CMD:sleep 30")
		p.until("the approval card", `document.querySelector('.approval button[data-action=run]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("running", `document.querySelector('.status-running') !== null`)
		p.run(chromedp.Click(chromedp.CSS("#interrupt")))
		p.until("idle", stateIs("idle"))
	})

	t.Run("reload mid-stream", func(t *testing.T) {
		release := e.proxy.holdAfter("reload me while streaming", 2)
		p := wuOpen(t, browser, s)
		p.newConversation("reload")
		p.send("reload me while streaming")
		p.until("streamed text", `(document.querySelector('.streaming')?.textContent || '').includes('Hello')`)
		p.run(chromedp.Reload())
		p.until("running after the reload", stateIs("running"))
		// What streamed before the reload shows again, from the events
		// before the log's seq.
		p.until("the text streamed before the reload", `(document.querySelector('.streaming .stream-text')?.textContent || '') === 'Hello fr'`)
		close(release)
		want := "Hello from mock! You said: reload me while streaming"
		p.until("the answer", shows(want))
		p.until("idle", stateIs("idle"))
		if n := p.count(want); n != 1 {
			p.fail("the answer shows %d times after the reload, want once", n)
		}
		if n := p.count("reload me while streaming"); n != 2 { // the prompt and the answer
			p.fail("the prompt's text shows %d times, want 2 (the prompt and the answer quoting it)", n)
		}
	})

	t.Run("server restart", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.newConversation("restart")
		p.send("before the restart")
		p.until("the answer", shows("You said: before the restart"))
		p.until("idle", stateIs("idle"))
		s.killGroup()
		<-s.exited
		p.until("reconnecting", stateIs("reconnecting…"))
		s2 := svStart(top, e, "--port", s.port())
		p.srv = s2
		p.until("reconnected", stateIs("idle"))
		p.send("after the restart")
		p.until("the answer after the restart", shows("You said: after the restart"))
		if n := p.count("You said: before the restart"); n != 1 {
			p.fail("the answer before the restart shows %d times, want once", n)
		}
		s = s2
	})

	t.Run("model output is text", func(t *testing.T) {
		evil := `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> [x](javascript:window.__pwned=3) **bold**`
		e.tweak("show me some html", func(sc *wiremock.Script) { sc.Text = e2eChunks(evil, 7) })
		p := wuOpen(t, browser, s)
		p.newConversation("xss")
		p.send("show me some html")
		p.until("the answer", shows(`<img src=x onerror="window.__pwned=2">`))
		p.until("idle", stateIs("idle"))
		p.send(`CMD:printf '%s' '<img src=y onerror=window.__pwned=4>'`)
		p.until("the approval card", `document.querySelector('.approval button[data-action=run]') !== null`)
		p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
		p.until("the tool output", `[...document.querySelectorAll('.tool-output')].some(e => e.textContent.includes('<img src=y'))`)
		p.until("idle", stateIs("idle"))
		bad := wuEval[string](p, `JSON.stringify({pwned: window.__pwned ?? null, tags: document.querySelectorAll('#messages img, #messages script, #messages a[href^="javascript"]').length, bold: document.querySelectorAll('#messages strong').length})`)
		if bad != `{"pwned":null,"tags":0,"bold":1}` {
			p.fail("model or tool output became markup: %s", bad)
		}
		p.shot("end")
	})

	t.Run("phone width", func(t *testing.T) {
		p := wuOpen(t, browser, s)
		p.run(chromedp.EmulateViewport(390, 844))
		p.until("the app", `!document.getElementById('app').hidden`)
		p.run(chromedp.Click(chromedp.CSS("#menu")))
		p.until("the sidebar open", `getComputedStyle(document.getElementById('sidebar')).transform === 'none'`)
		p.newConversation("phone")
		p.send("hello from a phone")
		p.until("the answer", shows("You said: hello from a phone"))
		menu := wuEval[bool](p, `getComputedStyle(document.getElementById('menu')).display !== 'none' && document.documentElement.scrollWidth <= 390`)
		if !menu {
			p.fail("at 390 px the menu button is hidden or the page scrolls sideways")
		}
		p.shot("end")
	})
}

func TestWebUITokenLogin(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--token", "webui-secret-0123456789")
	p := wuOpen(t, browser, s)
	p.until("the login form", `!document.getElementById('login').hidden && document.getElementById('app').hidden`)
	p.run(wuType("#login-token", "wrong"), chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)))
	p.until("the refusal", `document.getElementById('login-error').textContent.includes('not accepted')`)
	wuEval[bool](p, `(document.getElementById('login-token').value = '') === ''`)
	p.run(wuType("#login-token", "webui-secret-0123456789"),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)))
	p.until("the app", `!document.getElementById('app').hidden && document.getElementById('login').hidden`)
	p.run(chromedp.Reload())
	p.until("the app after a reload", `!document.getElementById('app').hidden && document.getElementById('login').hidden`)
	p.newConversation("with a token")
	p.send("hello with a token")
	p.until("the streamed answer", shows("Hello from mock! You said: hello with a token"))
	p.until("sign out offered", `!document.getElementById('logout').hidden`)
	p.shot("end")
	p.run(chromedp.Click(chromedp.CSS("#logout")))
	p.until("the login form again", `!document.getElementById('login').hidden`)
}
