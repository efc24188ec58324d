package config

import (
	"errors"
	"flag"
	"time"
)

// Engine bounds what one run of a session may do, for every command that
// hosts sessions (rpc, serve). Zero takes the engine's default; a
// negative value means no limit.
type Engine struct {
	// MaxTurns ends a run after this many model requests (default 200).
	MaxTurns int
	// MaxToolFailures ends a run when the same tool call, with the same
	// arguments, fails this many times in a row (default 3).
	MaxToolFailures int
	// MaxQueuedMessages and MaxQueuedMessageBytes bound the steering and
	// follow-up messages waiting for a running agent (default 64 and
	// 16 MiB).
	MaxQueuedMessages     int
	MaxQueuedMessageBytes int
	// EventLogBytes bounds each session's log of recent events, kept for
	// clients that resume (default 16 MiB).
	EventLogBytes int
	// BashTimeout bounds a command a client runs with the protocol's bash
	// command (default 10 minutes; negative: none).
	BashTimeout time.Duration
	// Sandbox confines the tools of every session.
	Sandbox Sandbox
	// Limits bound what each bash command may spend.
	Limits ToolLimits
	// MCP bounds the MCP servers sessions use.
	MCP MCPTimeouts
	// NoContextFiles leaves AGENTS.md and CLAUDE.md out of every
	// session's system prompt (pi's --no-context-files); SYSTEM.md and
	// APPEND_SYSTEM.md still apply.
	NoContextFiles bool
	// NoSubagents takes the task tool (subagents) away from every
	// session.
	NoSubagents bool
	// NoSkills and NoPromptTemplates turn off finding skills and prompt
	// templates (pi's --no-skills and --no-prompt-templates).
	NoSkills          bool
	NoPromptTemplates bool
}

// Register adds the engine's flags to fs.
func (e *Engine) Register(fs *flag.FlagSet) {
	fs.IntVar(&e.MaxTurns, "max-turns", e.MaxTurns, "end a run after this many model requests (0: the default, 200; negative: no limit)")
	fs.IntVar(&e.MaxToolFailures, "max-tool-failures", e.MaxToolFailures, "end a run when the same tool call fails this many times in a row (0: the default, 3; negative: never)")
	fs.IntVar(&e.MaxQueuedMessages, "max-queued-messages", e.MaxQueuedMessages, "steering and follow-up messages that may wait for a running agent (0: the default, 64)")
	fs.IntVar(&e.MaxQueuedMessageBytes, "max-queued-message-bytes", e.MaxQueuedMessageBytes, "bytes of steering and follow-up messages that may wait (0: the default, 16 MiB)")
	fs.IntVar(&e.EventLogBytes, "event-log-bytes", e.EventLogBytes, "bytes of recent events kept per session for clients that resume (0: the default, 16 MiB)")
	fs.DurationVar(&e.BashTimeout, "bash-timeout", e.BashTimeout, "limit for a command a client runs with the bash command (0: the default, 10m; negative: none)")
	fs.BoolVar(&e.NoContextFiles, "no-context-files", e.NoContextFiles, "do not put AGENTS.md or CLAUDE.md files into the system prompt")
	fs.BoolVar(&e.NoContextFiles, "nc", e.NoContextFiles, "short for --no-context-files")
	fs.BoolVar(&e.NoSubagents, "no-subagents", e.NoSubagents, "offer no task tool: the model cannot hand jobs to subagent sessions")
	fs.BoolVar(&e.NoSkills, "no-skills", e.NoSkills, "do not load skills (SKILL.md) from the skills directories")
	fs.BoolVar(&e.NoPromptTemplates, "no-prompt-templates", e.NoPromptTemplates, "do not load prompt templates from the prompts directories")
	e.Sandbox.Register(fs)
	e.Limits.Register(fs)
	e.MCP.Register(fs)
}

// Check validates e.
func (e *Engine) Check() error {
	if e.MaxQueuedMessages < 0 || e.MaxQueuedMessageBytes < 0 || e.EventLogBytes < 0 {
		return errors.New("--max-queued-messages, --max-queued-message-bytes and --event-log-bytes must not be negative (0 takes the default)")
	}
	if err := e.Limits.Check(); err != nil {
		return err
	}
	if err := e.MCP.Check(); err != nil {
		return err
	}
	return e.Sandbox.Check()
}
