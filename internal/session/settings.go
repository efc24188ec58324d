package session

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// The custom entries (pi's "custom" type: extension state, left out of
// the context by agentd and pi alike) in which a session keeps its
// settings. The latest of each type anywhere in the file is in force, as
// pi reads a session's name: they belong to the session, not to a branch.
const (
	// CustomConfirm holds the confirmation mode: {"all": true|false}.
	CustomConfirm = "agentd.confirm"
	// CustomGrants holds the approvals given in advance, as
	// interaction.Grants: {"next": 3, "allTools": true, "tools": ["bash"]}.
	CustomGrants = "agentd.grants"
	// CustomTools holds the enabled tools: {"tools": ["read", "bash"]},
	// or {"all": true} for every tool the session has.
	CustomTools = "agentd.tools"
	// CustomTruncate marks where TruncateAt moved the conversation
	// ({"index": 3, "entryId": "…"}), so that reopening the file starts
	// there.
	CustomTruncate = "agentd.truncate"
	// CustomToolStarted marks a tool call that was let run, written (and
	// synced) before it starts: {"toolCallId": "…"}. A call the
	// conversation still ends with when the session opens and that has
	// one was interrupted while it ran (kill -9, a crash, a close), and
	// is recorded as interrupted instead of being offered again, so it
	// never runs twice.
	CustomToolStarted = "agentd.tool_started"
)

type confirmData struct {
	All bool `json:"all"`
}

type toolsData struct {
	All   bool     `json:"all,omitempty"`
	Tools []string `json:"tools,omitempty"`
}

// loadSettings restores the settings f records, or the defaults where it
// records none.
func (s *Session) loadSettings(f *transcript.File) {
	confirm := s.cfg.ConfirmAll
	var grants interaction.Grants
	var tools []string
	seen := map[string]bool{}
	entries := f.Entries()
	mode := s.initialMode()
	s.mu.Lock()
	s.mode = mode
	s.mu.Unlock()
	for i := len(entries) - 1; i >= 0 && len(seen) < 4; i-- {
		e := &entries[i]
		if e.Type != transcript.TypeCustom || e.Opaque() || seen[e.CustomType] {
			continue
		}
		var err error
		switch e.CustomType {
		case CustomConfirm:
			var d confirmData
			if err = json.Unmarshal(e.Data, &d); err == nil {
				confirm = d.All
			}
		case CustomGrants:
			err = json.Unmarshal(e.Data, &grants)
		case CustomMode:
			err = s.restoreMode(e.Data)
		case CustomTools:
			var d toolsData
			if err = json.Unmarshal(e.Data, &d); err == nil && !d.All {
				// Kept as recorded, not cut to the tools there are now:
				// a tool source added after loading (a conversation's
				// MCP servers) brings the rest. ToolNames and the agent
				// see only the tools the session has.
				tools = append([]string{}, d.Tools...)
			}
		default:
			continue
		}
		if err != nil {
			s.log.Warn("unreadable setting in the transcript; using the default", "type", e.CustomType, "entry", e.ID, "err", err)
			continue
		}
		seen[e.CustomType] = true
	}
	s.mu.Lock()
	s.confirmAll, s.toolNames = confirm, tools
	s.mu.Unlock()
	s.settingsMu.Lock()
	s.gate.SetGrants(grants)
	s.savedGrants = s.gate.Grants()
	s.settingsMu.Unlock()
	s.applyTools()
}

// knownTools keeps the names of tools the session has, in the session's
// order; a name recorded by another build may be gone.
func (s *Session) knownTools(names []string) []string {
	out := []string{}
	s.mu.Lock()
	all := s.tools
	s.mu.Unlock()
	for _, t := range all {
		if n := t.Spec().Name; slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return out
}

// appendSetting records a setting entry.
func (s *Session) appendSetting(customType string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	if _, err := f.AppendCustom(customType, data); err != nil {
		return fmt.Errorf("recording %s: %w", customType, err)
	}
	return nil
}

// SaveCustom records v as a custom entry of customType: a setting a face
// keeps with the session (its file), read back with Custom when the
// session is opened again. customType should name the face or feature
// ("agentd.mcp"); the latest entry of a type is in force.
func (s *Session) SaveCustom(customType string, v any) error {
	return s.appendSetting(customType, v)
}

// Custom returns the data of the latest custom entry of customType in the
// session's file, anywhere in its tree.
func (s *Session) Custom(customType string) (json.RawMessage, bool) {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	entries := f.Entries()
	for i := len(entries) - 1; i >= 0; i-- {
		if e := &entries[i]; e.Type == transcript.TypeCustom && !e.Opaque() && e.CustomType == customType {
			return e.Data, true
		}
	}
	return nil, false
}

// ConfirmAll reports whether every tool call waits for a person.
func (s *Session) ConfirmAll() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmAll
}

// SetConfirmAll sets the confirmation mode. When on, every tool call
// waits for a person's approval, even one the policy allows, unless a
// grant covers it (interaction.Grants, a step's auto-confirm); a deny rule
// still denies. It applies to the calls checked from now on, is recorded
// in the transcript (CustomConfirm) and emits config_changed. Setting
// the mode in force does nothing.
func (s *Session) SetConfirmAll(on bool) error {
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	s.mu.Lock()
	same := s.confirmAll == on
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.appendSetting(CustomConfirm, confirmData{All: on}); err != nil {
		return err
	}
	s.mu.Lock()
	s.confirmAll = on
	s.mu.Unlock()
	s.configChanged("confirm")
	return nil
}

// Grants are the approvals the session has given in advance.
func (s *Session) Grants() interaction.Grants { return s.gate.Grants() }

// SetGrants replaces the approvals given in advance: a count of calls to
// confirm without asking, tools always allowed, or all tools. Approvals
// pending that the new grants cover are released. Recorded in the
// transcript (CustomGrants) and announced with config_changed, as every
// change of the grants is (an answer's always or approve_next, a count
// spent).
func (s *Session) SetGrants(g interaction.Grants) error {
	if g.Next < 0 {
		return fault.Errorf(fault.Invalid, "the count of calls to confirm must be 0 or more, got %d", g.Next)
	}
	s.gate.Grant(g)
	return s.saveGrants()
}

// saveGrants records the gate's grants if they changed since they were
// last recorded.
func (s *Session) saveGrants() error {
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	g := s.gate.Grants()
	if g.Next == s.savedGrants.Next && g.AllTools == s.savedGrants.AllTools && slices.Equal(g.Tools, s.savedGrants.Tools) {
		return nil
	}
	if err := s.appendSetting(CustomGrants, g); err != nil {
		s.log.Error("recording the grants", "err", err)
		return err
	}
	s.savedGrants = g
	s.configChanged("grants")
	return nil
}

// AvailableTools names every tool the session has, the ones a client may
// enable with SetTools, in the order the model is shown them.
func (s *Session) AvailableTools() []string {
	s.mu.Lock()
	all := s.tools
	s.mu.Unlock()
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = t.Spec().Name
	}
	return out
}

// ToolNames names the tools the model may call now.
func (s *Session) ToolNames() []string {
	s.mu.Lock()
	names := s.toolNames
	s.mu.Unlock()
	if names == nil {
		return s.AvailableTools()
	}
	return s.knownTools(names)
}

// SetTools enables the named tools of the session and disables the
// others; nil enables every tool again (an empty list none). The next
// run uses them (a run in progress keeps its tools). An unknown name is a
// fault.Invalid error naming it and the tools there are. Recorded in the
// transcript (CustomTools) and announced with config_changed.
func (s *Session) SetTools(names []string) error {
	var enabled []string
	if names != nil {
		avail := s.AvailableTools()
		for _, n := range names {
			if !slices.Contains(avail, n) {
				return fault.Errorf(fault.Invalid, "unknown tool %q; this session's tools are %s", n, strings.Join(avail, ", "))
			}
		}
		enabled = s.knownTools(names)
	}
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	d := toolsData{All: enabled == nil, Tools: enabled}
	if err := s.appendSetting(CustomTools, d); err != nil {
		return err
	}
	s.mu.Lock()
	s.toolNames = enabled
	s.mu.Unlock()
	s.applyTools()
	s.configChanged("tools")
	return nil
}

// applyTools gives the agent the enabled tools.
func (s *Session) applyTools() {
	s.mu.Lock()
	names := s.toolNames
	all := s.tools
	s.mu.Unlock()
	tools := all
	if names != nil {
		tools = make([]tool.Tool, 0, len(names))
		for _, t := range all {
			if slices.Contains(names, t.Spec().Name) {
				tools = append(tools, t)
			}
		}
	}
	s.mu.Lock()
	m := s.mode
	s.mu.Unlock()
	tools = s.modeTools(m, tools)
	s.agent.Update(func(c *agent.Config) { c.Tools = tools })
	s.applyMode(m)
}

// configChanged announces a change of the confirmation mode, the grants,
// the tools or the mode.
func (s *Session) configChanged(what string) {
	s.emit(Event{Type: EventConfigChanged, Config: &ConfigChange{Changed: what, ConfirmAll: s.ConfirmAll(), Grants: s.gate.Grants(), Tools: s.ToolNames(), Mode: s.Mode().Name}})
}
