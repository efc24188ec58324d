package engine

import (
	"bufio"
	"encoding/json"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"os"
	"slices"

	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// CustomChild is the custom entry in which a subagent's transcript
// records what the engine made it with: its type's prompt, turn bound
// and the sandbox mode it ran in. A child opened again (a client loads
// it, agentd serve restarts, agentd rpc --session) is built the same
// way, not as a fresh session of the engine's defaults.
const CustomChild = "agentd.child"

// childSetup is the CustomChild entry.
type childSetup struct {
	Agent    string       `json:"agent"`
	Prompt   string       `json:"prompt,omitempty"`
	MaxTurns int          `json:"maxTurns,omitempty"`
	Sandbox  sandbox.Mode `json:"sandbox"`
	Depth    int          `json:"depth"`
}

// maxHeaderLine bounds the header line read to see whether a file is a
// subagent's.
const maxHeaderLine = 64 << 10

// reopenedChild is the child spec a transcript records, when path is a
// subagent's (its header names a parent and it has a CustomChild
// entry); ok is false for any other file. Only a child's file is read
// whole here: any other stops at its header.
func reopenedChild(path string) (c *sessionspec.ChildSpec, mode sandbox.Mode, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", false
	}
	line, err := bufio.NewReaderSize(f, 4096).ReadSlice('\n')
	f.Close()
	if err != nil && len(line) == 0 || len(line) > maxHeaderLine {
		return nil, "", false
	}
	var h struct {
		Type          string `json:"type"`
		ParentSession string `json:"parentSession"`
	}
	if json.Unmarshal(line, &h) != nil || h.Type != "session" || h.ParentSession == "" {
		return nil, "", false
	}
	tf, err := transcript.Open(path)
	if err != nil {
		return nil, "", false
	}
	entries := tf.Entries()
	for i := len(entries) - 1; i >= 0; i-- {
		e := &entries[i]
		if e.Type != transcript.TypeCustom || e.Opaque() || e.CustomType != CustomChild {
			continue
		}
		var s childSetup
		if json.Unmarshal(e.Data, &s) != nil {
			return nil, "", false
		}
		return &sessionspec.ChildSpec{Type: &subagent.Type{Name: s.Agent, Prompt: s.Prompt, MaxTurns: s.MaxTurns, Sandbox: s.Sandbox}, Depth: s.Depth}, s.Sandbox, true
	}
	return nil, "", false
}

// childSetupOf is what a new child's transcript records (CustomChild).
func childSetupOf(c *sessionspec.ChildSpec, mode sandbox.Mode) childSetup {
	s := childSetup{Sandbox: mode, Depth: c.Depth}
	if c.Type != nil {
		s.Agent, s.Prompt, s.MaxTurns = c.Type.Name, c.Type.Prompt, c.Type.MaxTurns
	}
	return s
}

// asReopenedChild completes the spec of a session opened from a file
// that is a subagent's: its type's prompt and turn bound, and a sandbox
// no looser than the one it ran in.
func (e *Engine) asReopenedChild(spec sessionspec.Spec) sessionspec.Spec {
	if spec.Child != nil || spec.Open == "" {
		return spec
	}
	c, mode, ok := reopenedChild(spec.Open)
	if !ok {
		return spec
	}
	spec.Child = c
	if mode != "" && slices.Contains(sandbox.Modes, mode) {
		spec.Sandbox = ChildMode(e.sandboxPolicy(spec.Sandbox).Mode, mode)
	}
	return spec
}
