package commands

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
)

// Builtin is a command agentd runs itself when a prompt starts with
// "/Name": it does not reach the model.
type Builtin struct {
	Name        string
	Description string
	// ArgumentHint says what arguments it takes ("[instructions]").
	ArgumentHint string
	// Run does the command and returns what to tell the person (every
	// face shows it as the command's output). An error is theirs to
	// see: a fault.Error says what was wrong.
	Run func(ctx context.Context, c Call) (string, error)
}

// Call is one run of a built-in.
type Call struct {
	Session *session.Session
	// Args is the text after the command's name.
	Args    string
	Catalog *Catalog
	// detail receives what Detail is given.
	detail *any
}

// Detail hands the face a structured result besides the text Run
// returns (/undo's revert), for a face whose protocol answers with one
// (REST's gptme /undo). Faces that show only text ignore it.
func (c Call) Detail(v any) {
	if c.detail != nil {
		*c.detail = v
	}
}

// Registry holds the built-in commands. The engine makes one; another
// package adds its own command with Add (name, description, run), and
// every face lists and runs it from then on.
type Registry struct {
	mu   sync.RWMutex
	list []Builtin
}

// NewRegistry returns a registry holding bs.
func NewRegistry(bs ...Builtin) *Registry {
	r := &Registry{}
	for _, b := range bs {
		if err := r.Add(b); err != nil {
			panic(err)
		}
	}
	return r
}

// Add registers b. A name already taken, empty or with spaces, or a
// missing Run is an error.
func (r *Registry) Add(b Builtin) error {
	if b.Name == "" || strings.ContainsAny(b.Name, " \t\n/") || strings.HasPrefix(b.Name, skillPrefix) {
		return fmt.Errorf("commands: invalid built-in name %q", b.Name)
	}
	if b.Run == nil {
		return fmt.Errorf("commands: built-in /%s has no Run", b.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.list, func(x Builtin) bool { return x.Name == b.Name }) {
		return fmt.Errorf("commands: built-in /%s is already registered", b.Name)
	}
	r.list = append(r.list, b)
	return nil
}

// Get finds a built-in by name.
func (r *Registry) Get(name string) (Builtin, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, b := range r.list {
		if b.Name == name {
			return b, true
		}
	}
	return Builtin{}, false
}

// All are the built-ins in the order they were added.
func (r *Registry) All() []Builtin {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.list)
}

// Defaults are agentd's own built-ins: /help, /compact, /model, /fork,
// /undo and /redo. models lists the models /model may switch to.
func Defaults(models func() []*llm.Model) []Builtin {
	return append([]Builtin{
		{Name: "help", Description: "List the commands a prompt can start with", Run: runHelp},
		{Name: "compact", Description: "Summarize the conversation so far to free context", ArgumentHint: "[instructions]", Run: runCompact},
		{Name: "model", Description: "Show the model, or switch to another", ArgumentHint: "[provider/model]",
			Run: func(ctx context.Context, c Call) (string, error) { return runModel(c, models) }},
		{Name: "fork", Description: "Continue in a new session: a copy of this one, or from before the Nth user message", ArgumentHint: "[N | entry id]", Run: runFork},
	}, undoBuiltins()...)
}

func runHelp(_ context.Context, c Call) (string, error) {
	var b strings.Builder
	b.WriteString("Commands:\n")
	for _, cmd := range c.Catalog.List() {
		line := "/" + cmd.Name
		if cmd.ArgumentHint != "" {
			line += " " + cmd.ArgumentHint
		}
		if cmd.Description != "" {
			line += ": " + cmd.Description
		}
		switch cmd.Source {
		case SourcePrompt:
			line += " (template, " + cmd.Location + ")"
		case SourceSkill:
			line += " (skill, " + cmd.Location + ")"
		}
		b.WriteString("  " + line + "\n")
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

func runCompact(ctx context.Context, c Call) (string, error) {
	res, err := c.Session.Compact(ctx, strings.TrimSpace(c.Args))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Compacted the conversation (%d tokens before).", res.TokensBefore), nil
}

func runModel(c Call, models func() []*llm.Model) (string, error) {
	cur := c.Session.Model()
	want := strings.TrimSpace(c.Args)
	var avail []*llm.Model
	if models != nil {
		avail = models()
	}
	if want == "" {
		var b strings.Builder
		if cur != nil {
			fmt.Fprintf(&b, "Model: %s/%s\n", cur.Provider, cur.ID)
		}
		b.WriteString("Available:")
		for _, m := range avail {
			b.WriteString("\n  " + m.Provider + "/" + m.ID)
		}
		return b.String(), nil
	}
	var found []*llm.Model
	for _, m := range avail {
		if want == m.Provider+"/"+m.ID {
			found = []*llm.Model{m}
			break
		}
		if want == m.ID {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return "", fault.Errorf(fault.Invalid, "/model: no available model %q (/model lists them)", want)
	case 1:
	default:
		return "", fault.Errorf(fault.Invalid, "/model: %q is offered by more than one provider; name it as provider/model", want)
	}
	if err := c.Session.SetModel(found[0]); err != nil {
		return "", err
	}
	return "Model: " + found[0].Provider + "/" + found[0].ID, nil
}

func runFork(_ context.Context, c Call) (string, error) {
	arg := strings.TrimSpace(c.Args)
	if arg == "" {
		if err := c.Session.Clone(); err != nil {
			return "", err
		}
		return "Continuing in a copy of the conversation: " + c.Session.File(), nil
	}
	id := arg
	if n, err := strconv.Atoi(arg); err == nil {
		msgs := c.Session.ForkMessages()
		if n < 1 || n > len(msgs) {
			return "", fault.Errorf(fault.Invalid, "/fork %d: this conversation has %d user messages", n, len(msgs))
		}
		id = msgs[n-1].EntryID
	}
	text, err := c.Session.Fork(id)
	if err != nil {
		return "", err
	}
	return "Continuing in a new session from before: " + text, nil
}
