package acp

import (
	"context"
	"slices"
	"time"

	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/session"
)

// availableCommand is one entry of ACP's available_commands_update.
type availableCommand struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Input       *commandInput `json:"input,omitempty"`
}

// commandInput is ACP's unstructured command input: a hint of what to
// type after the name.
type commandInput struct {
	Hint string `json:"hint"`
}

type commandsUpdate struct {
	SessionUpdate     string             `json:"sessionUpdate"`
	AvailableCommands []availableCommand `json:"availableCommands"`
}

// sessionMeta is the _meta agentd adds to session/new's and
// session/load's answers: which files the session's system prompt was
// built from (AGENTS.md, SYSTEM.md, ...).
type sessionMeta struct {
	Agentd struct {
		ContextFiles []instructions.File `json:"contextFiles"`
	} `json:"agentd"`
}

// listing is the session's commands: a local session's catalog, or what
// agentd serve answers to get_commands for a bridged one.
func (ss *acpSession) listing(ctx context.Context) []commands.Command {
	switch s := ss.s.(type) {
	case *session.Session:
		return commands.Of(s).List()
	case *remoteSession:
		var out struct {
			Commands []commands.Command `json:"commands"`
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.r.call(ctx, map[string]any{"type": "get_commands", "sessionId": s.id}, &out); err != nil {
			ss.a.log.Warn("get_commands", "session", s.id, "err", err)
			return nil
		}
		return out.Commands
	}
	return nil
}

// sendCommands tells the editor which commands the session has, and
// keeps the built-ins' names for prompt to recognise.
func (ss *acpSession) sendCommands() {
	list := ss.listing(ss.ctx)
	var builtins []string
	avail := make([]availableCommand, 0, len(list))
	for _, c := range list {
		ac := availableCommand{Name: c.Name, Description: c.Description}
		if c.ArgumentHint != "" {
			ac.Input = &commandInput{Hint: c.ArgumentHint}
		} else if c.Source != commands.SourceBuiltin {
			ac.Input = &commandInput{Hint: "arguments"}
		}
		avail = append(avail, ac)
		if c.Source == commands.SourceBuiltin {
			builtins = append(builtins, c.Name)
		}
	}
	ss.mu.Lock()
	ss.builtins = builtins
	ss.mu.Unlock()
	ss.update(commandsUpdate{SessionUpdate: "available_commands_update", AvailableCommands: avail})
}

// runBuiltin runs a prompt that is a built-in command: its output is the
// turn's agent message. ok is false for any other prompt.
func (ss *acpSession) runBuiltin(ctx context.Context, text string) (bool, error) {
	name, _, ok := commands.Split(text)
	if !ok {
		return false, nil
	}
	var out string
	switch s := ss.s.(type) {
	case *session.Session:
		var err error
		if out, ok, err = s.RunCommand(ctx, text); !ok || err != nil {
			return ok, err
		}
	case *remoteSession:
		ss.mu.Lock()
		known := slices.Contains(ss.builtins, name)
		ss.mu.Unlock()
		if !known {
			return false, nil
		}
		var res struct {
			Output string `json:"output"`
		}
		if err := s.r.call(ctx, map[string]any{"type": "prompt", "sessionId": s.id, "message": text}, &res); err != nil {
			return true, err
		}
		out = res.Output
	default:
		return false, nil
	}
	if out != "" {
		ss.update(chunkUpdate{SessionUpdate: "agent_message_chunk", Content: contentBlock{Type: "text", Text: out}})
	}
	return true, nil
}

// meta is the _meta of session/new's and session/load's answers.
func (ss *acpSession) meta(ctx context.Context) *sessionMeta {
	m := &sessionMeta{}
	switch s := ss.s.(type) {
	case *session.Session:
		m.Agentd.ContextFiles = s.Instructions()
	case *remoteSession:
		var st struct {
			ContextFiles []instructions.File `json:"contextFiles"`
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.r.call(ctx, map[string]any{"type": "get_state", "sessionId": s.id}, &st); err == nil {
			m.Agentd.ContextFiles = st.ContextFiles
		}
	}
	if m.Agentd.ContextFiles == nil {
		m.Agentd.ContextFiles = []instructions.File{}
	}
	return m
}
