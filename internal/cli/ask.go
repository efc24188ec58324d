package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/settings"
	"github.com/agentd-dev/agentd/internal/tool"
)

// preferredDefaults are tried in order when a command is given no
// --model and settings.json names no usable default (defaultModelSpec).
var preferredDefaults = []string{"anthropic/claude-sonnet-4-6", "openai/gpt-5.4", "openai/gpt-5.4-mini"}

func (m *Main) runAsk(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	modelSpec := fs.String("model", "", "model as provider/id[:thinking]; default: settings.json's defaultProvider/defaultModel, else the first available of "+strings.Join(preferredDefaults, ", ")+", else the first available model of models.json, else faux/echo")
	thinking := fs.String("thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	system := fs.String("system", "", "system prompt")
	maxTokens := fs.Int64("max-tokens", 0, "cap on the answer's tokens (default: the model's, at most 32000)")
	quiet := fs.Bool("quiet", false, "do not show thinking, tool activity and usage on stderr")
	noContext := fs.Bool("no-context-files", false, "with --tools: do not put AGENTS.md or CLAUDE.md files into the system prompt")
	tools := fs.String("tools", "", "comma-separated built-in tools the model may run in the working directory, without asking ("+strings.Join(tool.BuiltinNames, ",")+"); default none: a plain question")
	if err := parse(cfg, fs, args); err != nil {
		return err
	}
	var toolNames []string
	if *tools != "" {
		names, err := pickTools(localFlags{tools: *tools})
		switch {
		case err != nil:
			return usageError{err}
		case len(names) == 0:
			return usageError{fmt.Errorf("--tools %q names no tool (known: %s)", *tools, strings.Join(tool.BuiltinNames, ", "))}
		case *system != "":
			return usageError{errors.New("--system and --tools do not go together: a run with tools uses agentd's agent instructions")}
		case *maxTokens != 0:
			return usageError{errors.New("--max-tokens and --tools do not go together: a run with tools uses each model's own limit")}
		}
		toolNames = names
	}
	prompt := strings.Join(fs.Args(), " ")
	if prompt == "-" {
		b, err := io.ReadAll(m.stdin)
		if err != nil {
			return fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		return usageError{errors.New(`no prompt: agentd ask [flags] "your prompt" (or - to read it from stdin)`)}
	}
	ms, err := m.loadModels(ctx, cfg)
	if err != nil {
		return err
	}
	st, err := settings.Open(filepath.Join(cfg.ConfigDir, "settings.json"))
	if err != nil {
		return err
	}
	model, level, err := pickModel(ms, st.Get(), localFlags{model: *modelSpec, thinking: *thinking}, m.logger(cfg))
	if err != nil {
		return err
	}
	if toolNames != nil {
		return m.askWithTools(ctx, cfg, ms, model, level, toolNames, prompt, *quiet, *noContext)
	}
	key, headers, err := ms.Registry.Auth(ctx, model)
	if err != nil {
		return err
	}
	p := ms.Providers[model.API]
	if p == nil {
		return fmt.Errorf("model %s/%s uses api %q, which agentd does not speak", model.Provider, model.ID, model.API)
	}
	log := m.logger(cfg)
	log.Debug("asking", "model", model.Provider+"/"+model.ID, "thinking", level)
	req := &llm.Context{SystemPrompt: *system, Messages: []llm.Message{{
		Role: llm.RoleUser, Content: []llm.Content{llm.Text(prompt)}, Timestamp: time.Now().UnixMilli(),
	}}}
	// ms.Stream, not p.Stream: it gives a 401 the hint every face shows.
	s := ms.Stream(ctx, model, req, &llm.StreamOptions{
		APIKey: key, Headers: headers, Thinking: level, MaxTokens: *maxTokens, IdleTimeout: cfg.StreamIdleTimeout,
	})
	defer s.Close()
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case llm.EventTextDelta:
			_, _ = io.WriteString(m.stdout, ev.Delta)
		case llm.EventThinkingDelta:
			if !*quiet {
				_, _ = io.WriteString(m.stderr, ev.Delta)
			}
		case llm.EventThinkingEnd:
			if !*quiet {
				_, _ = io.WriteString(m.stderr, "\n")
			}
		case llm.EventToolCallEnd:
			fmt.Fprintf(m.stdout, "\n[tool call %s %s]", ev.ToolCall.Name, ev.ToolCall.Arguments)
		}
	}
	fmt.Fprintln(m.stdout)
	msg := s.Result()
	if !*quiet {
		u := msg.Usage
		fmt.Fprintf(m.stderr, "[%s/%s · %s · %d in, %d out, %d cache read, %d cache write · $%.6f]\n",
			model.Provider, model.ID, msg.StopReason, u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Cost.Total)
	}
	if s.Err() != nil {
		return errors.New(msg.ErrorMessage)
	}
	return nil
}

// askWithTools runs prompt as one agent run with the named tools, in an
// in-memory session built the way every face builds its sessions: the
// answer goes to stdout, thinking and tool activity to stderr. Nobody is
// there to answer the model's questions, so they are dismissed at once.
func (m *Main) askWithTools(ctx context.Context, cfg *config.Config, ms *engine.Models, model *llm.Model, level llm.ThinkingLevel, tools []string, prompt string, quiet, noContext bool) error {
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	log := m.logger(cfg)
	if level == "" {
		level = llm.ThinkingOff
	}
	log.Debug("asking with tools", "model", model.Provider+"/"+model.ID, "thinking", level, "tools", tools)
	eng, err := m.engine(cfg, ms, settings.Settings{}, engineChoices{model: model, thinking: model.ClampThinking(level), log: log,
		bounds: config.Engine{NoContextFiles: noContext}})
	if err != nil {
		return err
	}
	sess, err := eng.Session(sessionspec.Spec{Cwd: cwd, Tools: tools})
	if err != nil {
		return err
	}
	defer sess.Close()

	out := newAskOutput(m.stdout, m.stderr)
	defer out.close()
	questions := make(chan struct{}, 1)
	unsubscribe := sess.Subscribe(func(ev session.Event) {
		if ev.Type == session.EventInteractionRequested {
			select {
			case questions <- struct{}{}:
			default: // one wake-up covers every pending question
			}
			return
		}
		if ev.Agent != nil {
			out.event(ev.Agent, quiet)
		}
	})
	defer unsubscribe()

	if err := sess.Prompt(session.UserMessage(prompt, nil), session.BehaviorNone); err != nil {
		return err
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = sess.Wait(ctx)
	}()
wait:
	for {
		select {
		case <-ended:
			break wait
		case <-questions:
			for _, q := range sess.Interactions() {
				if err := sess.Answer(q.ID, interaction.Response{Cancelled: true}); err == nil {
					out.err(fmt.Sprintf("[question dismissed: agentd ask cannot answer %q]\n", q.Title))
				}
			}
		}
	}
	// After an interrupt (ctx ended first) this stops the run, and its
	// last answer ends aborted; after a finished run it does nothing.
	sess.Abort()

	var last *llm.Message
	for _, msg := range sess.Messages() {
		if msg.Role == llm.RoleAssistant {
			last = msg
		}
	}
	if !quiet && last != nil {
		st := sess.Stats()
		u := st.Tokens
		out.err(fmt.Sprintf("[%s/%s · %s · %d tool call(s) · %d in, %d out, %d cache read, %d cache write · $%.6f]\n",
			model.Provider, model.ID, last.StopReason, st.ToolCalls, u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Cost.Total))
	}
	out.close()
	switch {
	case last == nil:
		return errors.New("the run ended without an answer")
	case last.StopReason == llm.StopError:
		// The engine's stream gave a 401 its hint (which key).
		return errors.New(last.ErrorMessage)
	case last.StopReason == llm.StopAborted:
		return errors.New(last.ErrorMessage)
	}
	return nil
}

// askOutput writes an agent run's events for a person: the answer to
// stdout, the rest to stderr. Events are queued by the session's emitting
// goroutine and written by one goroutine of its own, so a slow terminal
// never holds up the session.
type askOutput struct {
	stdout, stderr io.Writer

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []askLine
	closed  bool
	done    chan struct{}
	midText bool // the answer's current line has text: end it before the next message
}

type askLine struct {
	toStderr bool
	text     string
}

func newAskOutput(stdout, stderr io.Writer) *askOutput {
	o := &askOutput{stdout: stdout, stderr: stderr, done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	go o.loop()
	return o
}

func (o *askOutput) put(toStderr bool, text string) {
	o.mu.Lock()
	if !o.closed {
		o.queue = append(o.queue, askLine{toStderr, text})
		o.cond.Signal()
	}
	o.mu.Unlock()
}

func (o *askOutput) err(text string) { o.put(true, text) }

// event renders one agent event.
func (o *askOutput) event(ev *agent.Event, quiet bool) {
	switch ev.Type {
	case agent.EventMessageUpdate:
		if ev.Update == nil {
			return
		}
		switch ev.Update.Type {
		case llm.EventTextDelta:
			o.midText = o.midText || ev.Update.Delta != ""
			o.put(false, ev.Update.Delta)
		case llm.EventThinkingDelta:
			if !quiet {
				o.put(true, ev.Update.Delta)
			}
		case llm.EventThinkingEnd:
			if !quiet {
				o.put(true, "\n")
			}
		}
	case agent.EventMessageEnd:
		if o.midText {
			o.put(false, "\n")
			o.midText = false
		}
	case agent.EventToolExecutionStart:
		if !quiet {
			o.put(true, fmt.Sprintf("[tool %s %s]\n", ev.ToolName, ev.Args))
		}
	case agent.EventToolExecutionEnd:
		if quiet || ev.Result == nil {
			return
		}
		var text strings.Builder
		for _, c := range ev.Result.Content {
			text.WriteString(c.Text)
		}
		summary, _, _ := strings.Cut(strings.TrimSpace(text.String()), "\n")
		if r := []rune(summary); len(r) > 120 {
			summary = string(r[:120]) + "..."
		}
		verdict := "done"
		if ev.IsError {
			verdict = "failed"
		}
		o.put(true, fmt.Sprintf("[tool %s %s: %s]\n", ev.ToolName, verdict, summary))
	}
}

func (o *askOutput) loop() {
	defer close(o.done)
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closed {
			o.cond.Wait()
		}
		q := o.queue
		o.queue = nil
		closed := o.closed
		o.mu.Unlock()
		for _, l := range q {
			w := o.stdout
			if l.toStderr {
				w = o.stderr
			}
			_, _ = io.WriteString(w, l.text)
		}
		if closed && len(q) == 0 {
			return
		}
	}
}

// close writes what is queued and stops the writer; later calls do nothing.
func (o *askOutput) close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Signal()
	o.mu.Unlock()
	<-o.done
}
