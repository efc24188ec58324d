package main

import (
	"context"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// wuCutReplay is put in the page before its next load: the page's second
// event stream after a load (the replay: the first found a message being
// written) fails once, right after it has delivered its first
// generation_started, as a flaky network would cut it. Only the page's
// own stream is wrapped: the server, its events and the page's code run
// as ever. window.__replayCut says whether the cut was made.
const wuCutReplay = `(() => {
  const ES = window.EventSource;
  let made = 0, cut = false;
  window.__replayCut = 'armed';
  window.EventSource = class extends ES {
    constructor(url, init) { super(url, init); this.n = ++made; }
    get onmessage() { return super.onmessage; }
    set onmessage(f) {
      super.onmessage = (e) => {
        f.call(this, e);
        if (cut || this.n !== 2 || JSON.parse(e.data).type !== 'generation_started') return;
        cut = true;
        window.__replayCut = 'cut';
        this.close();
        this.onerror(new Event('error'));
      };
    }
  };
})();`

// TestWebUIReplayCut: a page opened on a conversation mid-run rebuilds
// the message being written from the events before the log's seq (the
// replay). When its stream is cut inside the replay, the page shows what
// one that kept up shows: no bubble of a message the replay had not
// finished (one the log already shows), and the text streamed so far of
// the message being written. The cut once left the replay's bubble of an
// earlier message on the page for good, and lost the text so far.
func TestWebUIReplayCut(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStartInProc(t, e)
	e.tweak("two calls", func(sc *wiremock.Script) {
		*sc = wiremock.Script{ToolCalls: []wiremock.ToolCall{
			{ID: "call_a", Name: "bash", Args: []string{`{"command":"echo first-call"}`}},
			{ID: "call_b", Name: "bash", Args: []string{`{"command":"echo second-call"}`}}}}
	})
	ran := func(s string) string {
		return `[...document.querySelectorAll('.tool-output')].some((e) => e.textContent.includes(` + js(s) + `))`
	}
	const bubbles = `document.querySelectorAll('.msg-assistant.streaming').length`

	tests := []struct {
		name string
		// run starts the run the page is reloaded in, and waits until
		// the page shows it.
		run func(p *wuPage) (release func())
		// after checks the page after the reload and the cut, and ends
		// the run.
		after func(p *wuPage, release func())
	}{
		{
			name: "while text streams",
			run: func(p *wuPage) func() {
				hold := e.proxy.holdAfter("cut me while streaming", 2)
				p.send("cut me while streaming")
				p.until("streamed text", `(document.querySelector('.streaming')?.textContent || '').includes('Hello')`)
				return func() { close(hold) }
			},
			after: func(p *wuPage, release func()) {
				p.until("the text streamed before the reload, in one bubble", `(document.querySelector('.streaming .stream-text')?.textContent || '') === 'Hello fr' && `+bubbles+` === 1`)
				release()
				want := "Hello from mock! You said: cut me while streaming"
				p.until("the answer", shows(want))
				p.until("idle", stateIs("idle"))
				if n := p.count(want); n != 1 {
					p.fail("the answer shows %d times, want once", n)
				}
				if n := wuEval[int](p, bubbles); n != 0 {
					p.fail("%d streaming bubbles left after the run", n)
				}
			},
		},
		{
			name: "while a call waits",
			run: func(p *wuPage) func() {
				p.send("two calls")
				p.until("the first card", `document.querySelectorAll('.approval').length === 1`)
				return nil
			},
			after: func(p *wuPage, _ func()) {
				p.until("the first card, focused", `document.querySelectorAll('.approval').length === 1 && `+focusedAction+` === 'run'`)
				p.run(wuPress("y"))
				// Events of the run reach the page after the replay's: the
				// second card says the page has caught up, and nothing is
				// being written then.
				p.until("the second card", ran("first-call")+` && document.querySelectorAll('.approval').length === 1 && `+focusedAction+` === 'run'`)
				last := `[...[...document.querySelectorAll('.msg-assistant')].pop().querySelectorAll('.tool')].map((e) => e.dataset.callId).join(' ')`
				if got := wuEval[string](p, last); got != "call_a call_b" {
					p.fail("the last assistant message has the calls %q, want call_a call_b (the message with the calls)", got)
				}
				if n := wuEval[int](p, bubbles); n != 0 {
					p.fail("%d streaming bubbles while a call waits, want none", n)
				}
				p.run(wuPress("y"))
				p.until("both ran", ran("second-call"))
				p.until("idle", stateIs("idle"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, con := wuOpenAt(t, browser, s, 0, 0)
			p.newConversation("cut " + tt.name)
			// An earlier message: the replay goes through it before it
			// reaches the one being written.
			p.send("an earlier message")
			p.until("its answer", shows("You said: an earlier message"))
			p.until("idle", stateIs("idle"))
			release := tt.run(p)
			p.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: wuCutReplay})
				return err
			}))
			p.run(chromedp.Reload())
			p.until("the replay cut", `window.__replayCut === 'cut'`)
			tt.after(p, release)
			con.clean(p)
		})
	}
}
