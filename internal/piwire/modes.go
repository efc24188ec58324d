package piwire

import (
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/session"
)

// ModeInfo describes one mode a session may switch to (agentd's
// get_modes and set_mode answers, on both pi faces).
type ModeInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	ReadOnly    bool   `json:"readOnly"`
	// Source is "builtin" or the mode's file.
	Source string `json:"source"`
}

// Modes is the answer of get_modes and set_mode: the session's mode and
// the modes there are.
type Modes struct {
	Mode  string     `json:"mode"`
	Modes []ModeInfo `json:"modes"`
}

// ModesOf reads a session's modes.
func ModesOf(s *session.Session) Modes {
	all := s.Modes()
	out := Modes{Mode: s.Mode().Name, Modes: make([]ModeInfo, len(all))}
	for i, m := range all {
		out.Modes[i] = ModeInfo{Name: m.Name, Description: m.Description, ReadOnly: m.ReadOnly, Source: m.Source}
	}
	return out
}

// stateMode is a session's mode as get_state reports it: left out in the
// default mode, so the answer keeps pi's shape for sessions that never
// switched.
func stateMode(s *session.Session) string {
	if m := s.Mode().Name; m != modes.Default {
		return m
	}
	return ""
}

// appendModeChanged encodes agentd's mode_changed event,
// {"type":"mode_changed","mode":"plan"}, for a config_changed of the
// mode (set_mode on any face), so every client of the session learns
// it; nil for the other settings, which pi's events do not carry.
func appendModeChanged(b []byte, ev session.Event) []byte {
	if ev.Config == nil || ev.Config.Changed != "mode" {
		return nil
	}
	return append(b, Marshal(struct {
		Type string `json:"type"`
		Mode string `json:"mode"`
	}{"mode_changed", ev.Config.Mode})...)
}
