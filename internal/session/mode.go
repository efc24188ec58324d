package session

import (
	"context"
	"encoding/json"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/tool"
)

// CustomMode holds the session's mode: {"mode": "plan"}. Like the other
// settings entries, the latest anywhere in the file is in force, so a
// session reopened after a restart (or kill -9: the entry is synced
// before SetMode returns) is in the mode it was left in.
const CustomMode = "agentd.mode"

type modeData struct {
	Mode string `json:"mode"`
}

// initialMode is the mode of a session whose transcript records none.
func (s *Session) initialMode() modes.Mode {
	name := s.cfg.Mode
	if name == "" {
		name = modes.Default
	}
	if m, ok := s.cfg.Modes.Find(name); ok {
		return m
	}
	m, _ := s.cfg.Modes.Find(modes.Default)
	return m
}

// restoreMode sets the mode a settings entry recorded. A mode the
// session no longer has (its file was removed) falls back to the
// initial mode, with a warning.
func (s *Session) restoreMode(data json.RawMessage) error {
	var d modeData
	if err := json.Unmarshal(data, &d); err != nil {
		return err
	}
	m, ok := s.cfg.Modes.Find(d.Mode)
	if !ok {
		m = s.initialMode()
		s.log.Warn("the session's recorded mode is not defined any more; using another", "recorded", d.Mode, "mode", m.Name)
	}
	s.mu.Lock()
	s.mode = m
	s.mu.Unlock()
	return nil
}

// Mode is the session's mode now.
func (s *Session) Mode() modes.Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// Modes are the modes the session may switch to.
func (s *Session) Modes() []modes.Mode { return s.cfg.Modes.All() }

// FindMode returns the session's mode named name, or a fault.Invalid
// error naming the modes there are.
func (s *Session) FindMode(name string) (modes.Mode, error) {
	m, ok := s.cfg.Modes.Find(name)
	if !ok {
		return modes.Mode{}, fault.New(fault.Invalid, s.cfg.Modes.UnknownError(name).Error())
	}
	return m, nil
}

// SetMode switches the session to the mode named name: the tools the
// model is offered, the calls that wait for a person and the system
// prompt's account of the mode change for the next request; a tool call
// the new mode does not allow is refused from now on, also in a run in
// progress. Recorded in the transcript (CustomMode) and announced with
// config_changed ("mode"). An unknown name is a fault.Invalid error
// naming the modes there are; setting the mode in force does nothing.
func (s *Session) SetMode(name string) error {
	m, err := s.FindMode(name)
	if err != nil {
		return err
	}
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	s.mu.Lock()
	same := s.mode.Name == m.Name
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.appendSetting(CustomMode, modeData{Mode: m.Name}); err != nil {
		return err
	}
	s.mu.Lock()
	s.mode = m
	s.mu.Unlock()
	s.applyTools()
	s.configChanged("mode")
	s.log.Info("session mode changed", "session", s.ID(), "mode", m.Name)
	return nil
}

// modeTools are the tools of tools the mode offers. Every bash among
// them is wrapped so that each call runs as the mode in force when it
// starts says: a run keeps the tools it started with, and a switch to a
// read-only mode in the middle of one must still bind its next command.
func (s *Session) modeTools(m modes.Mode, tools []tool.Tool) []tool.Tool {
	out := make([]tool.Tool, 0, len(tools))
	for _, t := range tools {
		name := t.Spec().Name
		if !m.Allows(name) {
			continue
		}
		if name == "bash" {
			if m.ReadOnly && s.cfg.ReadOnlyBash == nil {
				continue
			}
			t = &modeBash{s: s, full: t}
		}
		out = append(out, t)
	}
	return out
}

// modeBash is the session's bash as the model sees it: in a read-only
// mode a call runs in the read-only sandbox (Config.ReadOnlyBash), in
// any other through the session's own bash.
type modeBash struct {
	s    *Session
	full tool.Tool
}

func (b *modeBash) Spec() llm.Tool { return b.full.Spec() }

func (b *modeBash) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	if !b.s.Mode().ReadOnly {
		return b.full.Execute(ctx, call, update)
	}
	if ro := b.s.cfg.ReadOnlyBash; ro != nil {
		return ro.Execute(ctx, call, update)
	}
	return *b.s.modeRefusal("bash")
}

// systemPrompt is the session's system prompt in mode m.
func (s *Session) systemPrompt(m modes.Mode) string {
	p := s.cfg.SystemPrompt
	if p != "" {
		p += "\n"
	}
	return p + m.PromptSection()
}

// applyMode gives the agent the system prompt of the mode in force.
func (s *Session) applyMode(m modes.Mode) {
	prompt := s.systemPrompt(m)
	s.agent.Update(func(c *agent.Config) { c.SystemPrompt = prompt })
}

// modeRefusal is the result of a tool call the mode does not allow, or
// nil when it allows it. The model was not offered the tool; a call of
// it anyway (or one made before a switch) is refused here, so the mode
// binds whatever the model sends.
func (s *Session) modeRefusal(name string) *tool.Result {
	m := s.Mode()
	if m.Allows(name) && !(m.ReadOnly && name == "bash" && s.cfg.ReadOnlyBash == nil) {
		return nil
	}
	msg := "Tool " + name + " is not available in " + m.Name + " mode"
	if m.ReadOnly {
		msg += " (read-only: nothing may be changed; bash runs only in the read-only sandbox)"
	}
	msg += ". Do not try to get around it: say what you would do, and the user can switch modes."
	return &tool.Result{Content: []llm.Content{llm.Text(msg)}, IsError: true}
}
