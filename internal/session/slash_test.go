package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
)

// fakeSlash expands "/t args" to "T(args)", fails "/bad", and runs
// "/b" as a built-in.
type fakeSlash struct{}

func (fakeSlash) Expand(text string) (string, bool, error) {
	switch {
	case strings.HasPrefix(text, "/t "):
		return "T(" + strings.TrimPrefix(text, "/t ") + ")", true, nil
	case text == "/bad":
		return "", false, errors.New("the skill file is gone")
	}
	return text, false, nil
}

func (fakeSlash) Run(_ context.Context, s *session.Session, text string) (string, bool, error) {
	if text == "/b" {
		return "ran b in " + s.Model().ID, true, nil
	}
	return "", false, nil
}

// Templates and skill commands are expanded in every way a user message
// enters a session (prompt, steer, follow_up, Append), never in the
// caller's message; a failed expansion is refused; built-ins run
// through RunCommand.
func TestSlashExpandsEveryWayIn(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.Slash = fakeSlash{} })
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script { return wiremock.Script{Text: []string{"ok"}} })

	m := session.UserMessage("/t one", nil)
	if err := h.s.Prompt(m, session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := lastUserText(ptr(h.srv.LastRequest(t))); got != "T(one)" {
		t.Fatalf("prompt reached the model as %q", got)
	}
	if m.Content[0].Text != "/t one" {
		t.Fatalf("the caller's message was changed: %q", m.Content[0].Text)
	}

	for _, tc := range []struct {
		name string
		add  func(*llm.Message) error
	}{
		{"steer", h.s.Steer},
		{"follow_up", h.s.FollowUp},
		{"append", h.s.Append},
	} {
		if err := tc.add(session.UserMessage("/t "+tc.name, nil)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	h.prompt("go")
	h.wait()
	body := string(h.srv.LastRequest(t).Body)
	for _, want := range []string{"T(steer)", "T(follow_up)", "T(append)"} {
		if !strings.Contains(body, want) {
			t.Errorf("%s is not in the request: %s", want, body)
		}
	}

	if err := h.s.Prompt(session.UserMessage("/bad", nil), session.BehaviorNone); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("a failed expansion: %v", err)
	}
	if out, ok, err := h.s.RunCommand(context.Background(), "/b"); !ok || err != nil || out != "ran b in mock-model" {
		t.Fatalf("RunCommand(/b) = %q, %v, %v", out, ok, err)
	}
	if _, ok, _ := h.s.RunCommand(context.Background(), "/t x"); ok {
		t.Fatal("a template ran as a built-in")
	}
}
