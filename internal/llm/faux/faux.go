// Package faux is an in-process llm.Provider that needs no network and no
// key: a deterministic stand-in for a model, for tests and for trying
// agentd offline.
//
// # Echo mode
//
// With nothing scripted, the provider answers the last user message with
// "You said: <text>", streamed a word per chunk. Plain markers in the last
// user message make it do more, one marker per line:
//
//	/bash <command>        call the tool "bash" with {"command": "<command>"}
//	/tool <name> [json]    call tool <name> with the JSON object given ({} if none)
//	/think                 think before answering, whatever the thinking level
//
// Marker lines are not echoed. A turn with tool calls says which tools it
// calls and ends with stop reason toolUse. A thinking level other than off
// (clamped by the model) also makes it think first: a short thinking
// block precedes the answer. When the conversation ends with tool results,
// the answer summarises them instead, one line per result: "Tool <name>
// returned: <first 200 characters>", and stops.
//
// Usage is estimated as one token per four characters: input counts the
// system prompt, every message and the tool definitions; output counts
// what was generated. The faux model costs nothing.
//
// # Scripted mode
//
// Tests queue responses with Push; each request takes the next one (FIFO)
// and falls back to echo mode when the queue is empty. Requests returns a
// copy of every context the provider was sent, so a test can assert what
// the engine asked.
//
// Nothing depends on randomness or the clock: the same requests give the
// same events. Only Options.ChunkDelay and Response.Delay make it wait,
// and a cancelled context ends the stream at once as aborted, keeping
// what was streamed so far.
package faux

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
)

// The faux model's identity.
const (
	ProviderName = "faux"
	ModelID      = "echo"
	ModelName    = "Faux echo (offline, no LLM)"
)

// Model returns the faux model, a fresh copy on every call. It reasons
// (so thinking can be shown) at every level including xhigh, takes text
// and images, and costs nothing.
func Model() *llm.Model {
	xhigh := true
	return &llm.Model{
		ID: ModelID, Name: ModelName, API: llm.APIFaux, Provider: ProviderName,
		Reasoning: true, Input: []string{"text", "image"},
		ContextWindow: 128000, MaxTokens: 16384,
		Compat: &llm.Compat{SupportsXHigh: &xhigh},
	}
}

// ToolCall is a tool call in a scripted Response. Args is the raw JSON
// object of arguments; it is streamed in pieces like a real model's.
type ToolCall struct {
	ID   string // empty: a deterministic id is made up
	Name string
	Args string // empty means {}
}

// Response is one scripted model answer, streamed in this order: thinking,
// text, tool calls, then the end.
type Response struct {
	Thinking  string
	Text      string
	ToolCalls []ToolCall
	// Usage is reported as given and priced with the model; the zero
	// value means "estimate it", as in echo mode.
	Usage llm.Usage
	// Stop is the stop reason; empty means stop, or toolUse when there
	// are tool calls. StopError and StopAborted without Err end the
	// stream with a generic error of that kind.
	Stop llm.StopReason
	// Err ends the stream with this error after the content above has
	// been streamed; its Kind decides error versus aborted.
	Err *llm.Error
	// Delay is waited before the first chunk, like a slow first token.
	Delay time.Duration
}

// Options configure a Provider.
type Options struct {
	// ChunkDelay is waited between chunks, to watch streaming happen.
	ChunkDelay time.Duration
}

// Provider is the faux llm.Provider. It is safe for concurrent use.
type Provider struct {
	opts Options

	mu       sync.Mutex
	queue    []Response
	requests []llm.Context
	calls    int
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider with an empty script.
func New(opts Options) *Provider { return &Provider{opts: opts} }

// Push queues responses for the next requests, in order.
func (p *Provider) Push(rs ...Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, rs...)
}

// Pending reports how many pushed responses have not been used yet.
func (p *Provider) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Requests returns a copy of the context of every request so far, oldest
// first.
func (p *Provider) Requests() []llm.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]llm.Context, len(p.requests))
	for i := range p.requests {
		out[i] = copyContext(&p.requests[i])
	}
	return out
}

// Stream answers c with the next scripted response, or by echoing.
func (p *Provider) Stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	if c == nil {
		c = &llm.Context{}
	}
	if o == nil {
		o = &llm.StreamOptions{}
	}
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.requests = append(p.requests, copyContext(c))
	var r Response
	scripted := len(p.queue) > 0
	if scripted {
		r = p.queue[0]
		p.queue = p.queue[1:]
	}
	p.mu.Unlock()

	if !scripted {
		r = echo(m, c, o)
	}
	d := &decoder{
		ops:        plan(r, n, c),
		responseID: fmt.Sprintf("faux-%d", n),
		firstDelay: r.Delay,
		chunkDelay: p.opts.ChunkDelay,
	}
	return llm.NewStream(ctx, m, d, o.IdleTimeout)
}

// echo works out the answer of echo mode.
func echo(m *llm.Model, c *llm.Context, o *llm.StreamOptions) Response {
	level := m.ClampThinking(o.Thinking)
	think := level != llm.ThinkingOff
	// label says why it thinks: its level, or the /think marker at level
	// off (a block labelled "off" read as a model thinking while off).
	label := string(level)

	// Trailing tool results: summarise them and stop.
	var results []llm.Message
	for i := len(c.Messages) - 1; i >= 0 && c.Messages[i].Role == llm.RoleToolResult; i-- {
		results = append([]llm.Message{c.Messages[i]}, results...)
	}
	if len(results) > 0 {
		lines := make([]string, len(results))
		for i := range results {
			lines[i] = fmt.Sprintf("Tool %s returned: %s", results[i].ToolName, firstRunes(results[i].TextContent(), 200))
		}
		r := Response{Text: strings.Join(lines, "\n")}
		if think {
			r.Thinking = fmt.Sprintf("Thinking (%s): %d tool result(s) came back; I will summarise them.", level, len(results))
		}
		return r
	}

	var user *llm.Message
	for i := len(c.Messages) - 1; i >= 0; i-- {
		if c.Messages[i].Role == llm.RoleUser {
			user = &c.Messages[i]
			break
		}
	}
	if user == nil {
		return Response{Text: "You said nothing: there is no user message."}
	}

	var kept []string
	var calls []ToolCall
	var problems []string
	for _, line := range strings.Split(user.TextContent(), "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "/think":
			if !think {
				label = "asked for with /think; the thinking level is off"
			}
			think = true
		case t == "/bash" || strings.HasPrefix(t, "/bash "):
			cmd := strings.TrimSpace(strings.TrimPrefix(t, "/bash"))
			if cmd == "" {
				problems = append(problems, "/bash needs a command")
				continue
			}
			args, _ := json.Marshal(struct {
				Command string `json:"command"`
			}{cmd})
			calls = append(calls, ToolCall{Name: "bash", Args: string(args)})
		case t == "/tool" || strings.HasPrefix(t, "/tool "):
			rest := strings.TrimSpace(strings.TrimPrefix(t, "/tool"))
			name, args, _ := strings.Cut(rest, " ")
			args = strings.TrimSpace(args)
			if name == "" {
				problems = append(problems, "/tool needs a tool name")
				continue
			}
			if args == "" {
				args = "{}"
			}
			if !json.Valid([]byte(args)) || args[0] != '{' {
				problems = append(problems, fmt.Sprintf("the arguments of /tool %s are not a JSON object: %s", name, args))
				continue
			}
			calls = append(calls, ToolCall{Name: name, Args: args})
		default:
			kept = append(kept, line)
		}
	}
	said := strings.TrimSpace(strings.Join(kept, "\n"))
	if n := countImages(user); n > 0 {
		said = strings.TrimSpace(fmt.Sprintf("%s [%d image(s) attached]", said, n))
	}

	var r Response
	switch {
	case len(calls) > 0:
		names := make([]string, len(calls))
		for i, tc := range calls {
			names[i] = tc.Name
		}
		r.Text = "Calling " + strings.Join(names, ", ") + "."
		r.ToolCalls = calls
	case said == "":
		r.Text = "You said nothing."
	default:
		r.Text = "You said: " + said
	}
	if len(problems) > 0 {
		r.Text = strings.Join(problems, "\n") + "\n" + r.Text
	}
	if think {
		r.Thinking = fmt.Sprintf("Thinking (%s): the user wrote %d word(s); ", label, len(strings.Fields(said)))
		if len(calls) > 0 {
			r.Thinking += "I will call the tools they asked for."
		} else {
			r.Thinking += "I will echo them back."
		}
	}
	return r
}

func countImages(m *llm.Message) int {
	n := 0
	for _, c := range m.Content {
		if c.Type == llm.ContentImage {
			n++
		}
	}
	return n
}

func firstRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := 0; k < n; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + "..."
}

// op is one wire chunk of the plan.
type op struct {
	kind       opKind
	start, end bool // open the block before the delta, close it after
	delta      string
	id, name   string         // tool call
	usage      llm.Usage      // finish, fail
	stop       llm.StopReason // finish
	err        *llm.Error     // fail
}

type opKind int

const (
	opThinking opKind = iota
	opText
	opToolCall
	opFinish
	opFail
)

// plan turns a response into the chunks that stream it.
func plan(r Response, n int, c *llm.Context) []op {
	var ops []op
	block := func(kind opKind, pieces []string) {
		for i, p := range pieces {
			ops = append(ops, op{kind: kind, start: i == 0, end: i == len(pieces)-1, delta: p})
		}
	}
	if r.Thinking != "" {
		block(opThinking, words(r.Thinking))
	}
	if r.Text != "" {
		block(opText, words(r.Text))
	}
	for i, tc := range r.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("faux_%d_%d", n, i+1)
		}
		pieces := thirds(tc.Args)
		if len(pieces) == 0 {
			pieces = []string{""}
		}
		for k, p := range pieces {
			ops = append(ops, op{kind: opToolCall, start: k == 0, end: k == len(pieces)-1, delta: p, id: id, name: tc.Name})
		}
	}

	usage := r.Usage
	if usage == (llm.Usage{}) {
		usage = estimate(r, c)
	}
	errv := r.Err
	switch {
	case errv == nil && r.Stop == llm.StopError:
		errv = &llm.Error{Kind: llm.ErrServer, Message: "scripted error"}
	case errv == nil && r.Stop == llm.StopAborted:
		errv = &llm.Error{Kind: llm.ErrAborted, Message: "Request was aborted"}
	}
	if errv != nil {
		e := *errv // the caller's value is not ours to change
		if e.Message == "" {
			e.Message = "scripted error"
		}
		return append(ops, op{kind: opFail, usage: usage, err: &e})
	}
	stop := r.Stop
	if stop == "" {
		stop = llm.StopStop // the builder turns it into toolUse when there are calls
	}
	return append(ops, op{kind: opFinish, usage: usage, stop: stop})
}

// words splits s into word-sized pieces, each word with the whitespace
// after it, so joining them gives s back.
func words(s string) []string {
	var out []string
	start := 0
	word, inSpace := false, false // the current piece has a word; we are after it
	for i, r := range s {
		space := r == ' ' || r == '\n' || r == '\t' || r == '\r'
		switch {
		case !space && inSpace:
			out = append(out, s[start:i])
			start, inSpace = i, false
		case space && word:
			inSpace = true
		case !space:
			word = true
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// thirds splits s into up to three pieces at rune boundaries, the way tool
// arguments arrive in fragments.
func thirds(s string) []string {
	if s == "" {
		return nil
	}
	size := (len(s) + 2) / 3
	var out []string
	for len(s) > 0 {
		n := min(size, len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// estimate counts a token per four characters of what was sent and what
// was generated.
func estimate(r Response, c *llm.Context) llm.Usage {
	in := len(c.SystemPrompt)
	for i := range c.Messages {
		for _, b := range c.Messages[i].Content {
			in += len(b.Text) + len(b.Thinking) + len(b.Arguments) + len(b.Name)
		}
	}
	for _, t := range c.Tools {
		in += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	out := len(r.Thinking) + len(r.Text)
	for _, tc := range r.ToolCalls {
		out += len(tc.Name) + len(tc.Args)
	}
	return llm.Usage{Input: int64((in + 3) / 4), Output: int64((out + 3) / 4)}
}

// decoder plays a plan into the stream's builder, one op per Next.
type decoder struct {
	ctx        context.Context
	ops        []op
	next       int
	block      int // content index of the open block
	responseID string
	firstDelay time.Duration
	chunkDelay time.Duration
}

func (d *decoder) Open(ctx context.Context) error {
	d.ctx = ctx
	return ctx.Err()
}

func (d *decoder) Next(b *llm.Builder) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	if d.next >= len(d.ops) {
		return io.EOF
	}
	delay := d.chunkDelay
	if d.next == 0 {
		delay = d.firstDelay
		b.SetResponseID(d.responseID)
	}
	if err := sleep(d.ctx, delay); err != nil {
		return err
	}
	o := d.ops[d.next]
	d.next++
	switch o.kind {
	case opThinking:
		b.Chunk()
		if o.start {
			d.block = b.ThinkingStart()
		}
		b.ThinkingDelta(d.block, o.delta)
		if o.end {
			b.End(d.block)
		}
	case opText:
		b.Chunk()
		if o.start {
			d.block = b.TextStart()
		}
		b.TextDelta(d.block, o.delta)
		if o.end {
			b.End(d.block)
		}
	case opToolCall:
		b.Chunk()
		if o.start {
			d.block = b.ToolCallStart(o.id, o.name)
		}
		if o.delta != "" {
			b.ToolCallDelta(d.block, o.delta)
		}
		if o.end {
			b.End(d.block)
		}
	case opFinish:
		b.Chunk()
		b.SetUsage(o.usage)
		b.Finish(o.stop)
	case opFail:
		b.SetUsage(o.usage)
		return o.err
	}
	return nil
}

func (d *decoder) Close() error { return nil }

// sleep waits for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// copyContext deep-copies c so that a recorded request does not change
// when the engine reuses its slices.
func copyContext(c *llm.Context) llm.Context {
	out := llm.Context{SystemPrompt: c.SystemPrompt}
	if c.Messages != nil {
		out.Messages = make([]llm.Message, len(c.Messages))
		for i := range c.Messages {
			out.Messages[i] = *c.Messages[i].Clone()
		}
	}
	if c.Tools != nil {
		out.Tools = make([]llm.Tool, len(c.Tools))
		for i, t := range c.Tools {
			t.Parameters = append(json.RawMessage(nil), t.Parameters...)
			out.Tools[i] = t
		}
	}
	return out
}
