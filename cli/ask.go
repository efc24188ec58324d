package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/config"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/llm/faux"
)

// preferredDefaults are tried in order when ask is given no --model; the
// offline echo model is the last resort, so agentd always answers.
var preferredDefaults = []string{"anthropic/claude-sonnet-4-6", "openai/gpt-5.4", "openai/gpt-5.4-mini"}

func (m *Main) runAsk(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	modelSpec := fs.String("model", "", "model as provider/id[:thinking]; default: the first available of "+strings.Join(preferredDefaults, ", ")+", else faux/echo")
	thinking := fs.String("thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	system := fs.String("system", "", "system prompt")
	maxTokens := fs.Int64("max-tokens", 0, "cap on the answer's tokens (default: the model's, at most 32000)")
	quiet := fs.Bool("quiet", false, "do not show thinking and usage on stderr")
	if err := parse(cfg, fs, args); err != nil {
		return err
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
	if ms == nil {
		return err
	}
	if err != nil {
		fmt.Fprintf(m.stderr, "agentd ask: %v\n", err)
	}
	spec := *modelSpec
	if spec == "" {
		spec = faux.Model().Provider + "/" + faux.Model().ID
		for _, p := range preferredDefaults {
			prov, id, _ := strings.Cut(p, "/")
			if e, ok := ms.Registry.Find(prov, id); ok && e.Available {
				spec = p
				break
			}
		}
	}
	model, level, err := ms.Registry.Resolve(spec)
	if err != nil {
		return err
	}
	if *thinking != "" {
		if level, err = llm.ParseThinkingLevel(*thinking); err != nil {
			return usageError{err}
		}
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
	s := p.Stream(ctx, model, req, &llm.StreamOptions{
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
	if err := s.Err(); err != nil {
		return errors.New(msg.ErrorMessage)
	}
	return nil
}
