// Package engine assembles agentd's engine for every face: the models
// (registry and a provider per wire API, behind circuit breakers), the
// built-in tools, the permission policy, the system prompt and the saved
// settings become one session.Config, built in one place, whether the face
// hosts one session (pi's RPC mode) or many (agentd serve).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/settings"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/tool"
)

// Models is the model catalog and a provider for each wire API.
type Models struct {
	Registry  *registry.Registry
	Providers map[llm.API]llm.Provider
	// Fallback serves models whose API has no provider (the offline
	// model's); nil leaves such requests to fail.
	Fallback llm.Provider
}

// Stream sends a request to the provider of the model's API.
func (ms *Models) Stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	p := ms.Providers[m.API]
	if p == nil {
		p = ms.Fallback
	}
	if p == nil {
		return llm.NewStream(ctx, m, noProvider{m}, 0)
	}
	s := p.Stream(ctx, m, c, o)
	if ms.Registry != nil {
		// Here, once for every face: the failed message's errorMessage
		// then names the key a 401 refused, wherever it is shown.
		s.SetAuthHint(llm.AuthHint(m.Provider, ms.Registry.KeyHint(m.Provider)))
	}
	return s
}

type noProvider struct{ m *llm.Model }

func (n noProvider) Open(context.Context) error {
	return &llm.Error{Kind: llm.ErrBadRequest, Message: fmt.Sprintf("model %s/%s uses api %q, which agentd does not speak", n.m.Provider, n.m.ID, n.m.API)}
}
func (noProvider) Next(*llm.Builder) error { return nil }
func (noProvider) Close() error            { return nil }

// Resolve finds a usable model by provider and id.
func (ms *Models) Resolve(provider, id string) (*llm.Model, bool) {
	e, ok := ms.Registry.Find(provider, id)
	if !ok || !e.Available {
		return nil, false
	}
	return e.Model, true
}

// Available lists the models that can be used now.
func (ms *Models) Available() []*llm.Model { return ms.Registry.Available() }

// All lists every model, with why each unavailable one cannot be used.
func (ms *Models) All() []registry.Entry { return ms.Registry.All() }

// Options configure an Engine. Models and Model are required.
type Options struct {
	Models *Models
	// Breakers guard every model stream (a provider that keeps failing is
	// refused for a while instead of being hammered); nil makes a set
	// of this engine's own.
	Breakers *health.Breakers
	// Model and Thinking are what new sessions start with.
	Model    *llm.Model
	Thinking llm.ThinkingLevel
	// Saved are the choices persisted in settings.json: queue modes,
	// retry and compaction.
	Saved  settings.Settings
	Policy interaction.Policy
	// InteractionTimeout bounds how long an approval or question waits
	// for an answer; 0 waits forever.
	InteractionTimeout time.Duration
	// StreamIdleTimeout fails a model stream that sends nothing this long.
	StreamIdleTimeout time.Duration
	// Instructions say where each session's AGENTS.md, SYSTEM.md and
	// APPEND_SYSTEM.md are found (see package instructions); the zero
	// value reads only the session's own directories.
	Instructions instructions.Config
	// Commands say where each session's skills and prompt templates are
	// found (see package commands); the zero value finds none.
	Commands commands.Config
	// Home, TempDir and Environ are the tools' environment.
	Home    string
	TempDir string
	Environ []string
	// Supervisor is the command that runs each bash command under a
	// supervisor that takes all its processes along when it ends (see
	// tool.Env); nil runs bash directly.
	Supervisor []string
	// Sandbox confines every session's tools (each session's cwd and
	// TempDir are added to its Writable directories); the zero
	// Mode is full-access, no sandbox. SandboxExe is the executable that
	// applies it (agentd itself, handling sandbox.Command).
	Sandbox    sandbox.Policy
	SandboxExe string
	// ReadOnlySandbox is the policy bash runs under in a read-only mode
	// (plan): the engine's, made read-only (network, hidden paths and
	// isolation as the kernel allows). nil where the kernel cannot
	// confine: read-only modes then have no bash.
	ReadOnlySandbox *sandbox.Policy
	// Modes say where mode files are found (see package modes).
	Modes modes.Config
	// BashTimeout bounds a command a client runs with bash (0: the
	// session's default, negative: none).
	BashTimeout time.Duration
	// EventLogSize and EventLogBytes bound each session's log of recent
	// events.
	EventLogSize  int
	EventLogBytes int
	// MaxTurns, MaxToolFailures, MaxQueued and MaxQueuedBytes bound a
	// run (see session.Config); zero takes the defaults.
	MaxTurns        int
	MaxToolFailures int
	MaxQueued       int
	MaxQueuedBytes  int
	// Subagents configure the task tool (see Subagents); the zero value
	// offers none.
	Subagents Subagents
	Logger    *slog.Logger
	// CheckpointDir keeps the checkpoints of sessions that have a
	// transcript on disk (see session.Config); "" turns them off.
	CheckpointDir string
	// Now is the clock of the system prompt's date (time.Now if nil).
	Now func() time.Time
}

// Engine builds sessions.
type Engine struct {
	opt    Options
	stream agent.StreamFunc
	locks  *tool.FileLocks
	// builtins are the built-in commands of every session.
	builtins *commands.Registry

	// live are the workspaces of the sessions built and not yet closed,
	// by their Scope: what each confined session's tools must not read
	// of the others (see sandbox.Box.SetPeers).
	liveMu sync.Mutex
	live   map[*tool.Scope]string
}

// peersOf returns the workspaces (and output directories) of the live
// sessions other than the one of own, forgetting closed ones.
func (e *Engine) peersOf(own *tool.Scope) []string {
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	var out []string
	for s, cwd := range e.live {
		switch {
		case s.Closed():
			delete(e.live, s)
		case s != own:
			out = append(out, cwd)
			// Its commands' full output, in the shared temp dir.
			if d := s.SpillDir(); d != "" {
				out = append(out, d)
			}
		}
	}
	return out
}

// addLive records a session's workspace for peersOf.
func (e *Engine) addLive(s *tool.Scope, cwd string) {
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	if e.live == nil {
		e.live = map[*tool.Scope]string{}
	}
	e.live[s] = cwd
}

// New returns an Engine.
func New(opt Options) (*Engine, error) {
	if opt.Models == nil || opt.Models.Registry == nil {
		return nil, errors.New("engine: no models")
	}
	if opt.Model == nil {
		return nil, errors.New("engine: no default model")
	}
	if opt.Breakers == nil {
		opt.Breakers = health.NewBreakers(health.Options{}, health.Options{})
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Thinking == "" {
		opt.Thinking = llm.ThinkingOff
	}
	e := &Engine{
		opt:    opt,
		stream: agent.StreamFunc(opt.Breakers.Guard(health.StreamFunc(opt.Models.Stream))),
		// One set of per-file write locks for every session: two sessions
		// editing the same file never interleave their writes.
		locks: &tool.FileLocks{},
	}
	e.builtins = commands.NewRegistry(commands.Defaults(opt.Models.Available)...)
	return e, nil
}

// Builtins are the built-in commands of every session this engine
// makes; another package adds one with Builtins().Add, and every face
// lists and runs it.
func (e *Engine) Builtins() *commands.Registry { return e.builtins }

// Breakers are the circuit breakers guarding model streams (and bash).
func (e *Engine) Breakers() *health.Breakers { return e.opt.Breakers }

// Models is the engine's model catalog.
func (e *Engine) Models() *Models { return e.opt.Models }

// Model is the default model of new sessions.
func (e *Engine) Model() *llm.Model { return e.opt.Model }

// ToolEnv is the environment the tools of a session in cwd run in. Each
// call has a Scope of its own: the tools and user commands of one session
// share it, and closing the session ends what they started.
func (e *Engine) ToolEnv(cwd string) tool.Env {
	return tool.Env{Cwd: cwd, Home: e.opt.Home, Locks: e.locks, TempDir: e.opt.TempDir, Environ: e.opt.Environ,
		Supervisor: e.opt.Supervisor, Scope: tool.NewScope()}
}

// SandboxIsolated reports whether confined commands run in namespaces
// of their own (see sandbox.Policy.NoIsolation).
func (e *Engine) SandboxIsolated() bool { return !e.opt.Sandbox.NoIsolation }

// SandboxMode is the mode of the engine's sandbox.
func (e *Engine) SandboxMode() sandbox.Mode { return e.sandboxPolicy("").Mode }

// sandboxPolicy is the policy of a session in cwd choosing mode ("" for
// the engine's).
func (e *Engine) sandboxPolicy(mode sandbox.Mode) sandbox.Policy {
	p := e.opt.Sandbox
	if p.Mode == "" {
		p.Mode = sandbox.FullAccess
	}
	if mode != "" && mode.Stricter(p.Mode) {
		p.Mode = mode
	}
	return p
}

// Session builds a session.
func (e *Engine) Session(spec sessionspec.Spec) (*session.Session, error) {
	spec = e.asReopenedChild(spec)
	names := spec.Tools
	if names == nil {
		names = tool.BuiltinNames
	}
	names, task := e.taskTool(spec, names)
	// The server checks a client's choice before it gets here; this is
	// the same rule again for any other caller, since an unknown mode
	// must never reach sandboxPolicy.
	if _, err := sandbox.Choose(e.SandboxMode(), string(spec.Sandbox)); err != nil {
		return nil, fault.Wrap(fault.Invalid, err, err.Error())
	}
	env := e.ToolEnv(spec.Cwd)
	catalog := commands.Load(e.opt.Commands, spec.Cwd, e.builtins)
	for _, w := range catalog.Warnings() {
		e.opt.Logger.Warn("skill or prompt template: "+w.Message, "path", w.Path)
	}
	env.ReadAlso = catalog.ReadGrants()
	// Commands a person runs directly (the protocol's bash) are theirs:
	// only what the model starts is confined.
	userEnv := env
	var asker *escalations
	if p := e.sandboxPolicy(spec.Sandbox); p.Confined() {
		p.Writable = append([]string{spec.Cwd, e.opt.TempDir}, p.Writable...)
		env.Sandbox = sandbox.NewBox(p, e.opt.SandboxExe)
		scope := env.Scope
		env.Sandbox.SetPeers(func() []string { return e.peersOf(scope) })
		asker = &escalations{log: e.opt.Logger}
		env.Sandbox.SetAsker(asker.ask)
	}
	tools := make([]tool.Tool, 0, len(names))
	for _, n := range names {
		t, err := tool.New(n, env)
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	for _, x := range spec.Extra {
		name := x.Spec().Name
		replaced := false
		for i, t := range tools {
			if t.Spec().Name == name {
				tools[i], replaced = x, true
			}
		}
		if !replaced {
			tools = append(tools, x)
		}
	}
	promptNames := names
	if task != nil {
		tools = append(tools, task)
		promptNames = append(slices.Clone(names), subagent.ToolName)
	}
	modeSet, roBash, err := e.modeParts(env, spec.Cwd, spec.Mode)
	if err != nil {
		return nil, err
	}
	retry, comp := Saved(e.opt.Saved)
	now := e.opt.Now()
	footer := promptFooter(spec.Cwd, now)
	// The section tells the model to load a skill with the read tool: a
	// session without it gets none (as pi), /skill:name still works.
	if skills := catalog.PromptSection(); skills != "" && slices.Contains(names, "read") {
		footer = skills + "\n\n" + footer
	}
	prompt := instructions.Build(e.opt.Instructions, spec.Cwd, SystemPrompt(spec.Cwd, promptNames, now), footer)
	model, thinking, maxTurns, topts := e.opt.Model, e.opt.Thinking, e.opt.MaxTurns, spec.TranscriptOptions
	if c := spec.Child; c != nil {
		prompt.Text, model, thinking, maxTurns, topts = e.childSettings(c, prompt.Text, topts)
	}
	sess, err := session.New(session.Config{
		Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open,
		Model: model, Thinking: thinking,
		SystemPrompt: prompt.Text, Instructions: prompt.Files, Slash: catalog,
		Stream: e.stream, Options: e.streamOptions, ResolveModel: e.opt.Models.Resolve,
		Tools: tools, Modes: modeSet, Mode: spec.Mode, ReadOnlyBash: roBash, BashEnv: userEnv, BashTimeout: e.opt.BashTimeout, Retry: retry, Compaction: comp,
		Policy: e.opt.Policy, InteractionTimeout: e.opt.InteractionTimeout,
		SteeringMode: agent.QueueMode(e.opt.Saved.SteeringMode), FollowUpMode: agent.QueueMode(e.opt.Saved.FollowUpMode),
		EventLogSize: e.opt.EventLogSize, EventLogBytes: e.opt.EventLogBytes, FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq,
		MaxTurns: maxTurns, MaxSameToolFailures: e.opt.MaxToolFailures, MaxQueued: e.opt.MaxQueued, MaxQueuedBytes: e.opt.MaxQueuedBytes,
		Logger: e.opt.Logger, TranscriptOptions: topts,
		CheckpointDir: e.checkpointDir(spec),
	})
	if err != nil {
		return nil, err
	}
	if asker != nil {
		asker.bind(sess)
	}
	if task != nil {
		task.Bind(sess)
	}
	if spec.Child != nil {
		if _, ok := sess.Custom(CustomChild); !ok {
			if err := sess.SaveCustom(CustomChild, childSetupOf(spec.Child, e.sandboxPolicy(spec.Sandbox).Mode)); err != nil {
				_ = sess.Close()
				return nil, err
			}
		}
	}
	e.addLive(env.Scope, spec.Cwd)
	return sess, nil
}

// checkpointDir is where a session's checkpoints go: only a session kept
// on disk has them, since they outlive it in the data dir.
func (e *Engine) checkpointDir(spec sessionspec.Spec) string {
	if spec.SessionsDir == "" && spec.Open == "" {
		return ""
	}
	return e.opt.CheckpointDir
}

// streamOptions resolves credentials per request, so rotated keys and
// !command keys are picked up.
func (e *Engine) streamOptions(ctx context.Context, m *llm.Model) (llm.StreamOptions, error) {
	key, headers, err := e.opt.Models.Registry.Auth(ctx, m)
	if err != nil {
		return llm.StreamOptions{}, err
	}
	return llm.StreamOptions{APIKey: key, Headers: headers, IdleTimeout: e.opt.StreamIdleTimeout}, nil
}

// Saved are the retry and compaction settings saved in settings.json,
// over the engine's defaults.
func Saved(s settings.Settings) (session.RetrySettings, compaction.Settings) {
	retry := session.DefaultRetry()
	if s.Retry != nil {
		retry.Enabled = settings.Bool(s.Retry.Enabled, true)
		if s.Retry.MaxRetries != nil && *s.Retry.MaxRetries >= 0 {
			retry.MaxRetries = *s.Retry.MaxRetries
		}
		if s.Retry.BaseDelayMs != nil && *s.Retry.BaseDelayMs > 0 {
			retry.BaseDelay = time.Duration(*s.Retry.BaseDelayMs) * time.Millisecond
		}
	}
	comp := compaction.DefaultSettings()
	if s.Compaction != nil {
		comp.Enabled = settings.Bool(s.Compaction.Enabled, true)
		if s.Compaction.ReserveTokens != nil {
			comp.ReserveTokens = *s.Compaction.ReserveTokens
		}
		if s.Compaction.KeepRecentTokens != nil {
			comp.KeepRecentTokens = *s.Compaction.KeepRecentTokens
		}
	}
	return retry, comp
}

// SystemPrompt is agentd's own instructions for a coding agent working in
// cwd with the named built-in tools: what a SYSTEM.md replaces. The
// working directory and date follow every prompt, SYSTEM.md's too
// (promptFooter).
func SystemPrompt(cwd string, tools []string, now time.Time) string {
	var b strings.Builder
	b.WriteString("You are a coding agent working in a user's project through tools. ")
	b.WriteString("Read before you change, make the smallest change that does the job, and check your work by running it. ")
	b.WriteString("When something is unclear or risky, ask the user (ask_user) instead of guessing; for multi-step work, keep a plan with the todo tool. ")
	b.WriteString("Be brief: say what you did and what the user should know, not how you went about it.\n\n")
	if len(tools) > 0 {
		b.WriteString("Tools: " + strings.Join(tools, ", ") + ", ask_user, todo. ")
		b.WriteString("Paths are relative to the working directory unless absolute. Prefer edit over rewriting a file; prefer read, grep, find and ls over shell equivalents.\n")
	}
	return b.String()
}

// promptFooter ends every system prompt.
func promptFooter(cwd string, now time.Time) string {
	return fmt.Sprintf("Working directory: %s\nToday: %s\n", cwd, now.Format("2006-01-02"))
}
