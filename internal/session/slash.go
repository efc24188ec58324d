package session

import (
	"context"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Slash is what a prompt starting with "/" may mean (package commands
// implements it): a prompt template or skill command, expanded before
// the message is recorded or reaches the model, or a built-in command,
// which runs instead of a prompt.
type Slash interface {
	// Expand returns what text stands for, and whether it was a
	// template or skill command.
	Expand(text string) (string, bool, error)
	// Run runs the built-in command text starts with, if any, and
	// returns its output; ok is false when text names none.
	Run(ctx context.Context, s *Session, text string) (out string, ok bool, err error)
}

// Slash is the session's command catalog, or nil.
func (s *Session) Slash() Slash { return s.cfg.Slash }

// RunCommand runs the built-in command text starts with, if any, and
// returns what it says. ok is false when text is no built-in: the face
// then prompts with it as usual. Every face calls this before it
// prompts, so "/help" means the same on all of them.
func (s *Session) RunCommand(ctx context.Context, text string) (out string, ok bool, err error) {
	if s.cfg.Slash == nil || !strings.HasPrefix(text, "/") {
		return "", false, nil
	}
	return s.cfg.Slash.Run(ctx, s, text)
}

// expand replaces a user message's text with what the template or skill
// command it starts with stands for (pi expands them the same way in
// prompt, steer and follow_up). The caller's message is not changed: a
// copy comes back when something was expanded.
func (s *Session) expand(m *llm.Message) (*llm.Message, error) {
	if s.cfg.Slash == nil || m == nil || m.Role != llm.RoleUser {
		return m, nil
	}
	for i, c := range m.Content {
		if c.Type != llm.ContentText {
			continue
		}
		if !strings.HasPrefix(c.Text, "/") {
			return m, nil
		}
		text, ok, err := s.cfg.Slash.Expand(c.Text)
		if err != nil || !ok {
			return m, err
		}
		cp := *m
		cp.Content = append([]llm.Content(nil), m.Content...)
		cp.Content[i].Text = text
		return &cp, nil
	}
	return m, nil
}
