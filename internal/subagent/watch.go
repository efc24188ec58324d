package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// maxActivity is how many of the child's latest tool calls a progress
// update lists.
const maxActivity = 8

// maxProgressText bounds the child's text in a progress update.
const maxProgressText = 4 << 10

// watch follows a child's events (on the child's emitting goroutine,
// without blocking it) into the progress its parent's clients are shown;
// the task's Execute goroutine reads it when changed says so.
type watch struct {
	mu   sync.Mutex
	d    Details
	text string
	// live is the text of the answer being streamed, up to
	// maxProgressText.
	live strings.Builder
	// changed has room for one signal: many events between two reads
	// make one update.
	changed chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newWatch(id, file, agentName, desc string) *watch {
	return &watch{
		d:       Details{SessionID: id, SessionFile: file, Agent: agentName, Description: desc, Status: "running"},
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
}

func (w *watch) observe(ev session.Event) {
	if ev.Type == session.EventStateChanged && ev.Outcome != "" {
		w.once.Do(func() { close(w.done) })
		return
	}
	w.mu.Lock()
	changed := true
	switch {
	case ev.Agent != nil && ev.Agent.Type == agent.EventTurnStart:
		w.d.Turns++
	case ev.Agent != nil && ev.Agent.Type == agent.EventToolExecutionStart:
		w.d.ToolCalls++
		w.d.Activity = append(w.d.Activity, describe(ev.Agent.ToolName, ev.Agent.Args))
		if len(w.d.Activity) > maxActivity {
			w.d.Activity = slices.Delete(w.d.Activity, 0, len(w.d.Activity)-maxActivity)
		}
	case ev.Agent != nil && ev.Agent.Type == agent.EventMessageUpdate && ev.Agent.Update != nil && ev.Agent.Update.Type == llm.EventTextDelta:
		// Only the delta: the partial message is valid during this call
		// only, and copying it whole per delta would cost its square.
		if w.live.Len() < maxProgressText {
			w.live.WriteString(ev.Agent.Update.Delta)
		} else {
			changed = false
		}
	case ev.Agent != nil && ev.Agent.Type == agent.EventMessageEnd && ev.Agent.Message != nil && ev.Agent.Message.Role == llm.RoleAssistant:
		m := ev.Agent.Message
		w.d.Usage.Add(m.Usage)
		w.live.Reset()
		if t := strings.TrimSpace(m.TextContent()); t != "" {
			w.text = t
		}
	case ev.Type == session.EventInteractionRequested:
		w.d.Status = "waiting"
	case ev.Type == session.EventInteractionResolved:
		w.d.Status = "running"
	default:
		changed = false
	}
	w.mu.Unlock()
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (w *watch) details() Details {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.d
	d.Activity = slices.Clone(d.Activity)
	return d
}

// result is the progress as a partial tool result: what the child is
// doing, in words, and its latest text.
func (w *watch) result() tool.Result {
	d := w.details()
	w.mu.Lock()
	text := w.text
	if w.live.Len() > 0 {
		text = w.live.String()
	}
	w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "Subagent %s (session %s)", d.Agent, d.SessionID)
	if d.Description != "" {
		fmt.Fprintf(&b, ": %s", d.Description)
	}
	fmt.Fprintf(&b, " [%s, %d turns, %d tool calls]\n", d.Status, d.Turns, d.ToolCalls)
	for _, a := range d.Activity {
		b.WriteString("→ " + a + "\n")
	}
	if text != "" {
		b.WriteString("\n" + clip(text, maxProgressText) + "\n")
	}
	return tool.Result{Content: []llm.Content{llm.Text(b.String())}, Details: d}
}

// describe says what a tool call does in a line.
func describe(name string, raw json.RawMessage) string {
	var a map[string]any
	_ = json.Unmarshal(raw, &a)
	for _, k := range []string{"path", "command", "pattern", "description", "question"} {
		if s, ok := a[k].(string); ok && s != "" {
			return name + " " + clip(strings.Join(strings.Fields(s), " "), 120)
		}
	}
	return name
}

// relay puts the child's questions (tool approvals, ask_user) to the
// parent's clients: each becomes a request of the parent's, and the
// first answer, given on either session, settles both.
type relay struct {
	parent *session.Session
	child  *session.Session
	label  string

	mu      sync.Mutex
	wg      sync.WaitGroup
	cancels map[string]context.CancelFunc
}

func (r *relay) observe(ctx context.Context, ev session.Event) {
	if ev.Interaction == nil {
		return
	}
	switch ev.Type {
	case session.EventInteractionRequested:
		r.start(ctx, ev.Interaction.Request)
	case session.EventInteractionResolved:
		r.mu.Lock()
		cancel := r.cancels[ev.Interaction.Request.ID]
		r.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
}

// start relays one request of the child's. Its goroutine is the task's:
// wait stops and waits for all of them before Execute returns.
func (r *relay) start(ctx context.Context, req interaction.Request) {
	r.mu.Lock()
	if r.cancels == nil {
		r.cancels = map[string]context.CancelFunc{}
	}
	if r.cancels[req.ID] != nil || ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	r.cancels[req.ID] = cancel
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer cancel()
		up := req
		// The parent's id names the child's, within the broker's bound
		// on ids (200 bytes, room left for its suffix).
		up.ID = "sub-" + req.ID
		if len(up.ID) > 180 {
			up.ID = up.ID[:180]
		}
		// The child's request has its own expiry, which settles this
		// one too.
		up.Timeout = -1
		up.CreatedAt, up.ExpiresAt = req.CreatedAt, req.ExpiresAt
		prefix := "[subagent " + r.label + "] "
		if up.Title != "" {
			up.Title = prefix + up.Title
		} else {
			up.Message = prefix + up.Message
		}
		resp, err := r.parent.Ask(rctx, up)
		if err != nil {
			return // answered on the child, expired, or the task ended
		}
		// A late answer (the child's request was settled meanwhile) is
		// told so by the child's broker; nothing to do then.
		_ = r.child.Answer(req.ID, resp)
	}()
}

func (r *relay) wait() { r.wg.Wait() }
