package convapi

import (
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// ModeInfo describes a mode a conversation may switch to (agentd): what
// chat.mode may name.
type ModeInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ReadOnly: the mode changes nothing (no write or edit, bash in the
	// read-only sandbox).
	ReadOnly bool `json:"read_only"`
}

func modesOf(sess *session.Session) []ModeInfo {
	all := sess.Modes()
	out := make([]ModeInfo, len(all))
	for i, m := range all {
		out[i] = ModeInfo{Name: m.Name, Description: m.Description, ReadOnly: m.ReadOnly}
	}
	return out
}

// readMode reads chat.mode of a config PATCH: nil when absent or empty.
func readMode(chat object) (*string, error) {
	v, ok, err := chat.str("mode")
	if err != nil || !ok || v == "" {
		return nil, err
	}
	return &v, nil
}

// checkMode refuses a mode the conversation does not have, naming those
// it has, before anything of the PATCH changes.
func checkMode(sess *session.Session, mode *string) error {
	if mode == nil {
		return nil
	}
	if _, err := sess.FindMode(*mode); err != nil {
		return fault.New(fault.Invalid, "chat.mode: "+err.Error())
	}
	return nil
}
