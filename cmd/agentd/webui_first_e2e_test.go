package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// The web UI's first hour in Chromium: the welcome, changing a
// conversation's model and thinking level, answering an approval from
// the keyboard, and tool cards that keep their state across a reload and
// a Stop. Each test has its own browser and server, so that one can run
// alone (the long TestWebUIConversation need not), and each checks that
// the page wrote no error to the console.

// wuConsole records the errors a tab writes to its console: calls of
// console.error, exceptions nothing caught, and the browser's own error
// entries (a failed request, a refused script).
type wuConsole struct {
	mu   sync.Mutex
	errs []string
}

func (c *wuConsole) add(s string) {
	c.mu.Lock()
	c.errs = append(c.errs, s)
	c.mu.Unlock()
}

// wuOpenAt opens a tab on s at a viewport of w×h (the browser's own size
// for 0), recording its console from before the first load.
func wuOpenAt(t *testing.T, browser context.Context, s *svServer, w, h int64) (*wuPage, *wuConsole) {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("opening a tab: %v", err)
	}
	con := &wuConsole{}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				con.add(m.String() + " (" + m.URL + ")")
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	p := &wuPage{t: t, ctx: ctx, base: "http://" + s.loopback(), srv: s}
	if w > 0 {
		p.run(chromedp.EmulateViewport(w, h))
	}
	p.run(chromedp.Navigate(p.base + "/"))
	return p, con
}

// clean fails the test if the console has an error other than those
// containing one of allowed (a refusal the test asked for).
func (c *wuConsole) clean(p *wuPage, allowed ...string) {
	p.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var bad []string
next:
	for _, e := range c.errs {
		for _, a := range allowed {
			if strings.Contains(e, a) {
				continue next
			}
		}
		bad = append(bad, e)
	}
	if len(bad) > 0 {
		p.fail("the console has errors:\n%s", strings.Join(bad, "\n"))
	}
}

// convID is the open conversation's id, from the page's address.
func (p *wuPage) convID() string {
	p.t.Helper()
	h := wuEval[string](p, `location.hash`)
	id, err := url.PathUnescape(strings.TrimPrefix(h, "#/c/"))
	if err != nil || id == h {
		p.fail("no conversation open: location.hash is %q", h)
	}
	return id
}

// config reads the open conversation's chat config from the server.
func (p *wuPage) config() map[string]any {
	p.t.Helper()
	res, err := http.Get("http://" + p.srv.loopback() + "/api/v2/conversations/" + url.PathEscape(p.convID()) + "/config")
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	var c struct {
		Chat map[string]any `json:"chat"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil || res.StatusCode != 200 {
		p.t.Fatalf("GET config: %d %v", res.StatusCode, err)
	}
	return c.Chat
}

const focusedAction = `((document.activeElement && document.activeElement.dataset.action) || document.activeElement.id || document.activeElement.tagName)`

func TestWebUIWelcome(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)

	t.Run("desktop", func(t *testing.T) {
		p, con := wuOpenAt(t, browser, s, 1280, 900)
		p.until("the welcome", `!document.getElementById('app').hidden && !document.getElementById('welcome').hidden && document.getElementById('messages').hidden`)
		p.until("the usable model, marked default", `(document.querySelector('#welcome-models li.usable[data-id="mock/mock-model"]')?.textContent || '').includes('default')`)
		p.until("the models that need a key, with the key", `[...document.querySelectorAll('#welcome-unusable li')].some((l) => l.dataset.provider === 'anthropic' && l.textContent.includes('ANTHROPIC_API_KEY'))`)
		if n := wuEval[int](p, `document.querySelectorAll('#welcome-examples button.example:enabled').length`); n < 3 || n > 4 {
			p.fail("%d things to try, want 3 or 4", n)
		}
		if got := wuEval[string](p, `document.getElementById('conv-title').textContent`); got != "Welcome" {
			p.fail("the title is %q on the first screen, want Welcome", got)
		}
		p.until("the message box, ready for a first message", `!document.getElementById('prompt').disabled && document.getElementById('prompt').placeholder.includes('mock/mock-model')`)
		p.shot("welcome")

		// A thing to try fills the box; Enter starts a conversation on
		// the default model and sends it.
		want := wuEval[string](p, `document.querySelector('#welcome-examples button.example span').textContent`)
		p.run(chromedp.Click(chromedp.CSS(`#welcome-examples button.example`)))
		p.until("the box filled and focused", `document.getElementById('prompt').value === `+js(want)+` && document.activeElement === document.getElementById('prompt')`)
		p.run(chromedp.KeyEvent("\r"))
		p.until("a conversation", `location.hash.startsWith('#/c/web-') && document.getElementById('welcome').hidden && !document.getElementById('messages').hidden`)
		p.until("the answer", shows("Hello from mock! You said: "+want[:40]))
		p.until("idle", stateIs("idle"))
		if got := p.config()["model"]; got != "mock/mock-model" {
			p.fail("the conversation started from the welcome runs on %v, want the default mock/mock-model", got)
		}
		p.until("the conversation in the list, named after the message", `[...document.querySelectorAll('.conv-name')].some((e) => e.textContent.startsWith(`+js(want[:30])+`))`)
		if n := p.count(want); n != 1 {
			p.fail("the message shows %d times, want once", n)
		}
		con.clean(p)
	})

	t.Run("phone", func(t *testing.T) {
		p, con := wuOpenAt(t, browser, s, 390, 844)
		p.until("the welcome", `!document.getElementById('app').hidden && !document.getElementById('welcome').hidden`)
		p.until("the models", `document.querySelector('#welcome-models li.usable') !== null`)
		// Without opening the list: the way to start is on the page, in
		// view, and nothing scrolls sideways.
		ok := wuEval[bool](p, `(() => {
			const b = document.getElementById('welcome-start').getBoundingClientRect();
			return getComputedStyle(document.getElementById('sidebar')).transform !== 'none' &&
				b.width > 0 && b.left >= 0 && b.right <= 390 && b.bottom <= 844 &&
				document.documentElement.scrollWidth <= 390 &&
				[...document.querySelectorAll('#welcome-examples button')].every((x) => x.getBoundingClientRect().right <= 390);
		})()`)
		if !ok {
			p.fail("at 390 px the welcome's start button is hidden or off screen, or the page scrolls sideways")
		}
		p.shot("welcome-phone")
		p.run(chromedp.Click(chromedp.CSS("#welcome-start")))
		p.until("the new conversation form", `!document.getElementById('new-form-wrap').hidden && document.querySelector('#new-model option:checked:enabled') !== null`)
		p.run(wuType("#new-name", "from a phone"),
			chromedp.Click(chromedp.CSS(`#new-form button[type=submit]`)))
		p.until("the conversation", `document.getElementById('conv-title').textContent === 'from a phone' && !document.getElementById('prompt').disabled`)
		p.send("hello from the welcome")
		p.until("the answer", shows("You said: hello from the welcome"))
		con.clean(p)
	})
}

func TestWebUIModelAndThinking(t *testing.T) {
	browser := wuBrowser(t)
	thinker := map[string]any{
		"id": "mock-thinker", "name": "Mock Thinker", "reasoning": true, "input": []string{"text"},
		"cost":          map[string]float64{"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
		"contextWindow": 128000, "maxTokens": 4096,
		"compat": map[string]bool{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
	}
	e := e2eNewEnv(t, e2eOpts{proxy: true, extra: []any{thinker}})
	s := svStartInProc(t, e)
	p, con := wuOpenAt(t, browser, s, 0, 0)
	p.newConversation("switching")
	p.until("the model shown", `document.getElementById('conv-model').textContent.startsWith('mock/mock-model · thinking ')`)

	// Another model and a level, chosen on the page, reach the server
	// and the next answer.
	p.run(chromedp.Click(chromedp.CSS("#conv-model")))
	p.until("the form with both models", `!document.getElementById('settings-wrap').hidden && document.querySelector('#set-model option[value="mock/mock-thinker"]:enabled') !== null && document.getElementById('set-model').value === 'mock/mock-model'`)
	p.run(chromedp.SetValue(chromedp.CSS("#set-model"), "mock/mock-thinker"),
		chromedp.SetValue(chromedp.CSS("#set-thinking"), "high"),
		chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)))
	p.until("the new model shown", `document.getElementById('conv-model').textContent === 'mock/mock-thinker · thinking high' && document.getElementById('settings-wrap').hidden`)
	p.until("the change said", shows("From now on: mock/mock-thinker, thinking high."))
	if c := p.config(); c["model"] != "mock/mock-thinker" || c["thinking"] != "high" {
		p.fail("the server's config is %v/%v, want mock/mock-thinker/high", c["model"], c["thinking"])
	}
	p.send("which model answers")
	p.until("the answer, by the new model", `[...document.querySelectorAll('.msg-assistant')].some((m) => m.textContent.includes('You said: which model answers') && m.querySelector('.model')?.textContent.includes('mock/mock-thinker'))`)
	p.until("idle", stateIs("idle"))

	// A model that cannot think: the level it gets is said, not hidden.
	p.run(chromedp.Click(chromedp.CSS("#conv-model")))
	p.until("the form", `!document.getElementById('settings-wrap').hidden && document.getElementById('set-model').value === 'mock/mock-thinker' && document.getElementById('set-thinking').value === 'high'`)
	p.run(chromedp.SetValue(chromedp.CSS("#set-model"), "mock/mock-model"),
		chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)))
	// The form closed too: config_changed on the event stream may show
	// the new label before the PATCH's answer closes the form, and a
	// click on the chip then would close it instead of opening it.
	p.until("the level the model takes", `document.getElementById('conv-model').textContent === 'mock/mock-model · thinking off' && document.getElementById('settings-wrap').hidden`)
	if c := p.config(); c["model"] != "mock/mock-model" || c["thinking"] != "off" {
		p.fail("the server's config is %v/%v, want mock/mock-model/off", c["model"], c["thinking"])
	}
	p.run(chromedp.Click(chromedp.CSS("#conv-model")))
	p.until("the form", `!document.getElementById('settings-wrap').hidden && document.getElementById('set-model').value === 'mock/mock-model'`)
	p.run(chromedp.SetValue(chromedp.CSS("#set-thinking"), "medium"),
		chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)))
	p.until("the clamp said", shows("mock/mock-model does not think at level medium, so the level is off."))

	// The server's refusal is shown where the change was asked for.
	release := e.proxy.holdAfter("keep it busy", 2)
	p.send("keep it busy")
	p.until("running", stateIs("running"))
	p.run(chromedp.Click(chromedp.CSS("#conv-model")))
	p.until("the form", `!document.getElementById('settings-wrap').hidden && document.querySelector('#set-model option[value="mock/mock-thinker"]') !== null`)
	p.run(chromedp.SetValue(chromedp.CSS("#set-model"), "mock/mock-thinker"),
		chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)))
	p.until("the server's error", `document.getElementById('set-error').textContent.includes('generation is in progress') && !document.getElementById('settings-wrap').hidden`)
	p.shot("refused")
	close(release)
	p.until("idle", stateIs("idle"))
	if c := p.config(); c["model"] != "mock/mock-model" {
		p.fail("a refused change changed the model to %v", c["model"])
	}
	p.run(chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)))
	p.until("the change after the run", `document.getElementById('conv-model').textContent.startsWith('mock/mock-thinker · ')`)
	con.clean(p, "status of 409")
}

func TestWebUIApprovalKeys(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStartInProc(t, e)
	p, con := wuOpenAt(t, browser, s, 0, 0)
	p.newConversation("keys")
	ran := func(s string) string {
		return `[...document.querySelectorAll('.tool-output')].some((e) => e.textContent.includes(` + js(s) + `))`
	}

	// Focus moves to the card, at Run; the row goes Run … Reject, each
	// with its key shown.
	p.send("CMD:echo by-key-y")
	p.until("the card, focused at Run", `document.querySelector('.approval') !== null && `+focusedAction+` === 'run'`)
	order := wuEval[string](p, `[...document.querySelectorAll('.approval button')].map((b) => b.dataset.action + ':' + b.querySelector('kbd').textContent).join(' ')`)
	if order != "run:y edit:e skip:s auto:a always:w reject:n" {
		p.fail("the card's buttons are %q, want Run first and Reject last, each with its key", order)
	}
	p.shot("card")
	p.run(wuPress("\t"))
	if f := wuEval[string](p, focusedAction); f != "edit" {
		p.fail("Tab from Run goes to %q, want edit", f)
	}
	p.run(wuPress("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
	p.run(wuPress("y"))
	p.until("it ran", ran("by-key-y"))
	p.until("idle", stateIs("idle"))
	p.until("focus back in the message box", `document.activeElement === document.getElementById('prompt')`)

	p.send("CMD:echo by-key-enter")
	p.until("the card, focused", `document.querySelector('.approval') !== null && `+focusedAction+` === 'run'`)
	p.run(wuPress("\r"))
	p.until("it ran", ran("by-key-enter"))
	p.until("idle", stateIs("idle"))

	// n asks for a reason; Enter sends the rejection with it.
	p.send("CMD:echo by-key-n")
	p.until("the card, focused", `document.querySelector('.approval') !== null && `+focusedAction+` === 'run'`)
	p.run(wuPress("n"))
	p.until("the reason box, focused", `document.activeElement?.classList.contains('approval-feedback')`)
	p.run(wuPress("not by key\r"))
	p.until("the card gone", `document.querySelector('.approval') === null`)
	// The reason is what was typed: the n that opened its box is not in it.
	p.until("the rejection", shows("rejected this tool call: not by key"))
	p.until("idle", stateIs("idle"))

	// Esc rejects this call; it does not interrupt the run.
	p.send("CMD:echo by-key-esc")
	p.until("the card, focused", `document.querySelector('.approval') !== null && `+focusedAction+` === 'run'`)
	p.run(wuPress("\x1b"))
	p.until("the card gone", `document.querySelector('.approval') === null`)
	p.until("idle", stateIs("idle"))
	if wuEval[bool](p, ran("by-key-n")+` || `+ran("by-key-esc")) {
		p.fail("a rejected command ran")
	}
	if n := p.count("Interrupted."); n != 0 {
		p.fail("Esc on the card interrupted the run")
	}

	// Someone typing in the message box keeps the focus and their keys.
	release := e.proxy.holdAfter("CMD:echo while-typing", 1)
	p.send("CMD:echo while-typing")
	p.until("running", stateIs("running"))
	// (send's Enter leaves nothing in the box: see wuPress.)
	p.run(wuType("#prompt", "draft"))
	close(release)
	p.until("the card", `document.querySelector('.approval button[data-action=run]') !== null`)
	p.run(wuPress("y"))
	if got := wuEval[string](p, `document.getElementById('prompt').value + '|' + (document.activeElement === document.getElementById('prompt'))`); got != "drafty|true" {
		p.fail("typing in the message box while a card appeared: box and focus %q, want drafty|true", got)
	}
	if wuEval[bool](p, `document.querySelector('.approval') === null`) {
		p.fail("a y typed in the message box answered the card")
	}
	// Shift+Tab from the box goes to the card's Run.
	p.run(wuPress("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
	p.until("Run focused", focusedAction+` === 'run'`)
	if got := wuEval[string](p, `document.getElementById('prompt').value`); got != "drafty" {
		p.fail("Shift+Tab changed the message box to %q", got)
	}
	p.run(wuPress("y"))
	p.until("it ran", ran("while-typing"))
	p.until("idle", stateIs("idle"))

	// Two calls in one message, asked about in turn. After a reload the
	// first waits and the second, not asked yet, is not shown running;
	// answering one moves focus to the next.
	e.tweak("two calls", func(sc *wiremock.Script) {
		*sc = wiremock.Script{ToolCalls: []wiremock.ToolCall{
			{ID: "call_a", Name: "bash", Args: []string{`{"command":"echo first-call"}`}},
			{ID: "call_b", Name: "bash", Args: []string{`{"command":"echo second-call"}`}}}}
	})
	wuEval[bool](p, `(document.getElementById('prompt').value = '') === ''`)
	p.send("two calls")
	p.until("the first card", `document.querySelectorAll('.approval').length === 1`)
	p.run(chromedp.Reload())
	p.until("the first card after the reload, focused", `document.querySelectorAll('.approval').length === 1 && `+focusedAction+` === 'run'`)
	// The card comes with the stream's first event, before the replay
	// of the events before the log's seq (which makes and ends a bubble
	// per message it goes through): the calls are found by their cards,
	// not as the last message on the page, which may be such a bubble
	// still (1 run in 18 with -race on a loaded machine).
	statuses := `[...document.querySelectorAll('.tool[data-call-id=call_a], .tool[data-call-id=call_b]')].map((e) => e.querySelector('.tool-status').textContent).join('|')`
	if got := wuEval[string](p, statuses); got != "waiting for you|" {
		p.fail("after a reload the two calls' states are %q, want the first waiting and the second blank", got)
	}
	p.run(wuPress("y"))
	p.until("the second card, focused", ran("first-call")+` && document.querySelectorAll('.approval').length === 1 && `+focusedAction+` === 'run'`)
	// The run's events come after the replay's: by now the page has
	// caught up, and shows what one that kept up shows, the message
	// with the calls last and no bubble (nothing is being written).
	last := `[...[...document.querySelectorAll('.msg-assistant')].pop().querySelectorAll('.tool')].map((e) => e.dataset.callId).join(' ') + ' ' + document.querySelectorAll('.streaming').length`
	if got := wuEval[string](p, last); got != "call_a call_b 0" {
		p.fail("after the reload, the last message's calls and the streaming bubbles are %q, want call_a call_b 0", got)
	}
	p.run(wuPress("y"))
	p.until("both ran", ran("second-call"))
	p.until("idle", stateIs("idle"))
	con.clean(p)
}

func TestWebUIToolState(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStartInProc(t, e)
	p, con := wuOpenAt(t, browser, s, 0, 0)
	p.newConversation("long tool")
	p.send("CMD:echo started; sleep 60")
	p.until("the card", `document.querySelector('.approval button[data-action=run]') !== null`)
	p.run(chromedp.Click(chromedp.CSS(`.approval button[data-action=run]`)))
	p.until("running", `document.querySelector('.tool .status-running')?.textContent === 'running…'`)
	p.until("its output", `[...document.querySelectorAll('.tool-output')].some((e) => e.textContent.includes('started'))`)

	// After a reload the call still shows as running, with its output so
	// far (the event log keeps none: the stream's connected event has it).
	p.run(chromedp.Reload())
	p.until("running after the reload", `document.querySelector('.tool .status-running')?.textContent === 'running…' && document.getElementById('state').textContent === 'running'`)
	p.until("its output after the reload", `[...document.querySelectorAll('.tool-output')].some((e) => e.textContent.includes('started'))`)
	p.shot("running-after-reload")

	// Stop says stopped, not failed.
	p.run(chromedp.Click(chromedp.CSS("#interrupt")))
	p.until("stopped", `/^stopped after [0-9.]+ m?s$/.test(document.querySelector('.tool .tool-status')?.textContent || '')`)
	p.until("interrupted", shows("Interrupted."))
	p.until("idle", stateIs("idle"))
	p.shot("stopped")
	if got := wuEval[string](p, `[...document.querySelectorAll('.tool-status')].map((e) => e.textContent).join('|')`); strings.Contains(got, "failed") {
		p.fail("a stopped call is labelled %q", got)
	}

	// /think on the offline faux model at level off: its thinking says
	// why it thinks, not "Thinking (off)".
	p.run(chromedp.Click(chromedp.CSS("#new-conv")))
	p.until("faux/echo offered", `document.querySelector('#new-model option[value="faux/echo"]:enabled') !== null`)
	p.run(chromedp.SetValue(chromedp.CSS("#new-model"), "faux/echo"), chromedp.SetValue(chromedp.CSS("#new-thinking"), "off"),
		wuType("#new-name", "think"), chromedp.Click(chromedp.CSS(`#new-form button[type=submit]`)))
	p.until("the conversation", `document.getElementById('conv-title').textContent === 'think' && document.getElementById('conv-model').textContent === 'faux/echo · thinking off'`)
	p.run(chromedp.SetValue(chromedp.CSS("#prompt"), "/think\nponder this"), chromedp.Focus(chromedp.CSS("#prompt")), chromedp.KeyEvent("\r"))
	p.until("the answer", shows("You said: ponder this"))
	got := wuEval[string](p, `document.querySelector('.msg-assistant details.thinking .thinking-text')?.textContent || ''`)
	if !strings.HasPrefix(got, "Thinking (asked for with /think; the thinking level is off)") {
		p.fail("the /think answer's thinking is %q", got)
	}
	con.clean(p)
}
