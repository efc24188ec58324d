package engine

import (
	"context"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Subagents configure the task tool the engine's sessions get (package
// subagent): a session hands a job to a child session of an agent type.
type Subagents struct {
	// Enabled offers the task tool to every session not at MaxDepth
	// whose tools are not chosen, or are chosen and include "task".
	Enabled bool
	// GlobalDirs hold agent types in their agents/ directory (agentd's
	// config directory); a project's are in its .agentd/agents.
	GlobalDirs []string
	// MaxDepth and MaxConcurrent bound the tree of subagents (0: the
	// package's defaults).
	MaxDepth      int
	MaxConcurrent int
}

// ChildHost starts a child session from spec (sessionspec.ChildHost).
type ChildHost = sessionspec.ChildHost

// maxDepth is the deepest a subagent may be.
func (e *Engine) maxDepth() int {
	if e.opt.Subagents.MaxDepth > 0 {
		return e.opt.Subagents.MaxDepth
	}
	return subagent.DefaultMaxDepth
}

// taskTool takes "task" out of the built-in names and makes the session's
// task tool when it gets one.
func (e *Engine) taskTool(spec sessionspec.Spec, names []string) ([]string, *subagent.Tool) {
	asked := spec.Tools == nil || slices.Contains(names, subagent.ToolName)
	names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == subagent.ToolName })
	depth := 0
	if spec.Child != nil {
		depth = spec.Child.Depth
	}
	if !e.opt.Subagents.Enabled || !asked || depth >= e.maxDepth() {
		return names, nil
	}
	catalog := subagent.Load(e.opt.Subagents.GlobalDirs, spec.Cwd)
	for _, w := range catalog.Warnings {
		e.opt.Logger.Warn("agent type skipped or read leniently", "file", w.Path, "reason", w.Message)
	}
	return names, subagent.New(subagent.Options{
		Catalog: catalog,
		Depth:   depth, MaxDepth: e.maxDepth(), MaxConcurrent: e.opt.Subagents.MaxConcurrent,
		Spawn: e.spawner(spec),
	})
}

// spawner starts the children of the session spec makes. Everything that
// confines the parent confines the child: its sandbox is the parent's
// mode or the type's when stricter, its tools are the type's that the
// parent has (the task tool chose them), and it is built by the same
// engine under the same policy.
func (e *Engine) spawner(parent sessionspec.Spec) subagent.Spawner {
	parentMode := e.sandboxPolicy(parent.Sandbox).Mode
	return func(ctx context.Context, r subagent.Request) (subagent.Child, error) {
		mode := ChildMode(parentMode, r.Sandbox)
		model := r.Parent.Model()
		if r.Type.Model != "" {
			provider, id, ok := strings.Cut(r.Type.Model, "/")
			m, found := e.opt.Models.Resolve(provider, id)
			if !ok || !found {
				return nil, fault.Errorf(fault.Invalid, "agent type %s names model %q, which is not available (provider/id)", r.Type.Name, r.Type.Model)
			}
			model = m
		}
		var builtins []string
		for _, n := range r.Tools {
			if slices.Contains(tool.BuiltinNames, n) || n == subagent.ToolName {
				builtins = append(builtins, n)
			}
		}
		if builtins == nil {
			builtins = []string{}
		}
		spec := sessionspec.Spec{
			Cwd: parent.Cwd, SessionsDir: parent.SessionsDir, Tools: builtins, Sandbox: mode,
			Child:    &sessionspec.ChildSpec{Type: r.Type, Depth: r.Depth, ParentFile: r.Parent.File(), Model: model, Thinking: r.Parent.Thinking()},
			Children: parent.Children,
		}
		if parent.Children != nil {
			return parent.Children(ctx, spec)
		}
		s, err := e.Session(spec)
		if err != nil {
			return nil, err
		}
		return localChild{s}, nil
	}
}

// localChild is a child the engine built itself: closed when its task
// ends; its transcript stays.
type localChild struct{ s *session.Session }

func (c localChild) ID() string                { return c.s.ID() }
func (c localChild) Session() *session.Session { return c.s }
func (c localChild) Release()                  { _ = c.s.Close() }

// childSettings are what a child's spec changes of a session: the type's
// prompt after the others, its model and thinking level, a turn bound no
// higher than the engine's, and its parent in the transcript's header.
func (e *Engine) childSettings(c *sessionspec.ChildSpec, prompt string, topts []transcript.Option) (string, *llm.Model, llm.ThinkingLevel, int, []transcript.Option) {
	model, thinking := e.opt.Model, e.opt.Thinking
	if c.Model != nil {
		model = c.Model
	}
	if c.Thinking != "" {
		thinking = c.Thinking
	}
	turns := e.opt.MaxTurns
	if turns == 0 {
		turns = agent.DefaultMaxTurns
	}
	if c.Type != nil && c.Type.MaxTurns > 0 && (turns < 0 || c.Type.MaxTurns < turns) {
		turns = c.Type.MaxTurns
	}
	if c.Type != nil && c.Type.Prompt != "" {
		prompt += "\n" + c.Type.Prompt + "\n"
	}
	if c.ParentFile != "" {
		topts = append(slices.Clone(topts), transcript.WithParentSession(c.ParentFile))
	}
	return prompt, model, thinking, turns, topts
}

// ChildMode is the sandbox mode a child of a session in mode runs in for
// an agent type: the stricter of the two.
func ChildMode(parent, typ sandbox.Mode) sandbox.Mode {
	if typ != "" && typ.Stricter(parent) {
		return typ
	}
	return parent
}
