package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/settings"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/trust"
)

// localFlags are the flags of the commands that host sessions on this
// machine for one client (rpc, acp) or one listing (tools), where they
// mean the same. Each command registers those it takes, with its own
// words and defaults.
type localFlags struct {
	provider, model, thinking string
	noSession                 bool
	sessionDir                string
	tools                     string
	mode                      string
	noTools                   bool
	policy                    string
	mcpConfig                 string
	bounds                    config.Engine
}

// localHost is what a command hosting sessions on this machine needs
// before its own part: the working directory, the saved settings and the
// models, where session files go, the built-in tools, and the choices
// (model, thinking level, permission policy, sandbox and bounds) its
// engine is built with. Close closes the session opened with session.
type localHost struct {
	m   *Main
	cfg *config.Config
	log *slog.Logger

	cwd      string
	settings *settings.Store
	models   *engine.Models
	// sessionsDir is where the data directory keeps session files;
	// saveDir is where new sessions are written, "" with --no-session.
	sessionsDir, saveDir string
	// tools are the built-in tools to enable: empty, not nil, for none.
	tools     []string
	mcpConfig string
	choices   engineChoices

	sess *session.Session
}

// openLocal reads what f and the configuration name, in the order their
// mistakes are reported: settings and models, the model, the tools, the
// policy. Nothing is started yet: the engine and the session come after
// the command's own checks.
func (m *Main) openLocal(ctx context.Context, cfg *config.Config, f localFlags) (*localHost, error) {
	log := m.logger(cfg)
	cwd, st, ms, err := m.environment(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	model, level, err := pickModel(ms, st.Get(), f, log)
	if err != nil {
		return nil, err
	}
	tools, err := pickTools(f)
	if err != nil {
		return nil, usageError{err}
	}
	if tools == nil {
		tools = []string{}
	}
	policy, err := loadPolicy(f.policy)
	if err != nil {
		return nil, err
	}
	h := &localHost{m: m, cfg: cfg, log: log, cwd: cwd, settings: st, models: ms,
		sessionsDir: f.sessionDir, tools: tools, mcpConfig: f.mcpConfig,
		choices: engineChoices{model: model, thinking: level, policy: policy,
			interactionTimeout: cfg.ApprovalTimeout, bounds: f.bounds, log: log}}
	if h.sessionsDir == "" {
		h.sessionsDir = filepath.Join(cfg.DataDir, "sessions")
	}
	// Other sessions' transcripts, wherever they are kept.
	h.choices.hide = []string{h.sessionsDir}
	if !f.noSession {
		h.saveDir = h.sessionsDir
	}
	return h, nil
}

// engine builds the engine of the host's sessions, under the sandbox
// its bounds ask for (or refuses to, see sandboxPolicy).
func (h *localHost) engine() (*engine.Engine, error) {
	return h.m.engine(h.cfg, h.models, h.settings.Get(), h.choices)
}

// session opens the host's one session, with the MCP servers of
// --mcp-config and of the project in the working directory as tool
// sources; Close closes it.
func (h *localHost) session(ctx context.Context, spec sessionspec.Spec) (*session.Session, error) {
	eng, err := h.engine()
	if err != nil {
		return nil, err
	}
	set, notice, err := h.startMCP(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := eng.Session(spec)
	if err != nil {
		if set != nil {
			set.Close()
		}
		return nil, err
	}
	if set != nil {
		// The session stops the servers when it closes.
		sess.AddToolSource(set, set.Close)
	}
	if notice != nil {
		sess.AddToolSource(notice, nil)
	}
	h.sess = sess
	return sess, nil
}

// startMCP starts the MCP servers of --mcp-config and, if a person
// trusted it, of the project in the working directory; nil when there
// are none. A server that fails to start is logged, and named by the
// Set; an untrusted project file is logged and returned as a notice
// (a tool source with no tools that says why, and how to trust it).
func (h *localHost) startMCP(ctx context.Context) (*mcp.Set, mcp.Notice, error) {
	servers, err := loadMCPConfig(h.mcpConfig)
	if err != nil {
		return nil, nil, err
	}
	var notice mcp.Notice
	project, err := mcp.LoadProject(h.cwd, h.m.trustStore(h.cfg))
	var untrusted *mcp.UntrustedError
	switch {
	case errors.As(err, &untrusted):
		h.log.Warn("project MCP servers not started", "err", err)
		notice = mcp.UntrustedNotice(untrusted)
	case err != nil:
		h.log.Warn("project MCP configuration", "err", err)
	}
	all := mcp.Merge(servers, project)
	if len(all) == 0 {
		return nil, notice, nil
	}
	set := h.mcpManager().Open(ctx, all, h.cwd)
	if err := set.Err(); err != nil {
		h.log.Warn("MCP servers", "err", err)
	}
	return set, notice, nil
}

// mcpManager starts the host's MCP servers under the sandbox of its
// sessions.
func (h *localHost) mcpManager() *mcp.Manager {
	return mcpManager(h.log, h.sandbox(), h.choices.bounds.MCP)
}

// sandbox is the policy the host's tools run under (quietly: engine
// says it in the log).
func (h *localHost) sandbox() sandbox.Policy {
	p, err := sandboxPolicy(h.choices.bounds.Sandbox, sandbox.Probe(), slog.New(slog.DiscardHandler))
	if err != nil {
		// engine refuses to start on the same error; nothing runs.
		return sandbox.Policy{Mode: sandbox.ReadOnly}
	}
	return p
}

// trustStore is where the person's grants of project files are kept:
// in agentd's configuration directory, outside every workspace.
func (m *Main) trustStore(cfg *config.Config) *trust.Store {
	return trust.Open(filepath.Join(cfg.ConfigDir, trust.FileName))
}

// Close closes the session opened with session, if any: it ends the
// session's run and commands and stops its MCP servers, waiting for them.
func (h *localHost) Close() {
	if h.sess != nil {
		_ = h.sess.Close()
	}
}

// environment is what every session-hosting command starts from: the
// working directory, the saved settings and the models. A problem in
// models.json or settings.json stops the command (see loadModels).
func (m *Main) environment(ctx context.Context, cfg *config.Config, log *slog.Logger) (string, *settings.Store, *engine.Models, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", nil, nil, fmt.Errorf("working directory: %w", err)
	}
	removeStaleSpill(log)
	st, err := settings.Open(filepath.Join(cfg.ConfigDir, "settings.json"))
	if err != nil {
		return "", nil, nil, err
	}
	ms, err := m.loadModels(ctx, cfg)
	if err != nil {
		return "", nil, nil, err
	}
	return cwd, st, ms, nil
}

// loadPolicy reads the --policy file; "" is the default (allow all).
func loadPolicy(path string) (interaction.Policy, error) {
	if path == "" {
		return interaction.Policy{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return interaction.Policy{}, usageError{fmt.Errorf("--policy: %w", err)}
	}
	p, err := interaction.ParsePolicy(data)
	if err != nil {
		return interaction.Policy{}, usageError{fmt.Errorf("--policy %s: %w", path, err)}
	}
	return p, nil
}

// loadMCPConfig reads a --mcp-config file; "" is none.
func loadMCPConfig(path string) ([]mcp.ServerConfig, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--mcp-config: %w", err)}
	}
	servers, err := mcp.ParseConfig(data)
	if err != nil {
		return nil, usageError{fmt.Errorf("--mcp-config %s: %w", path, err)}
	}
	return servers, nil
}

// mcpManager starts MCP servers under policy, with only the base of
// agentd's environment (see mcp.BaseEnv), logging to log, within the
// timeouts t.
func mcpManager(log *slog.Logger, policy sandbox.Policy, t config.MCPTimeouts) *mcp.Manager {
	start, call := t.Durations()
	return mcp.New(mcp.Options{Environ: os.Environ(), Sandbox: policy, SandboxExe: "/proc/self/exe", TempDir: os.TempDir(),
		Version: version(), Logger: log, StartTimeout: start, CallTimeout: call})
}

// pickModel chooses the model of every command that runs one (ask, rpc,
// acp, serve, tools): --model (with --provider), else DefaultModelSpec.
// A saved default that cannot be used is logged, not skipped silently.
func pickModel(ms *engine.Models, s settings.Settings, f localFlags, log *slog.Logger) (*llm.Model, llm.ThinkingLevel, error) {
	var level llm.ThinkingLevel
	if f.thinking != "" {
		l, err := llm.ParseThinkingLevel(f.thinking)
		if err != nil {
			return nil, "", usageError{err}
		}
		level = l
	} else if s.DefaultThinkingLevel != "" {
		if l, err := llm.ParseThinkingLevel(s.DefaultThinkingLevel); err == nil {
			level = l
		}
	}
	spec := f.model
	if spec != "" && f.provider != "" && !strings.HasPrefix(spec, f.provider+"/") {
		spec = f.provider + "/" + spec
	}
	if spec == "" {
		var skipped string
		spec, skipped = defaultModelSpec(ms.Registry, s)
		if skipped != "" && log != nil {
			log.Warn("the default model in settings.json cannot be used; using another", "settings", s.DefaultProvider+"/"+s.DefaultModel, "reason", skipped, "model", spec)
		}
	}
	m, specLevel, err := ms.Registry.Resolve(spec)
	if err != nil {
		return nil, "", err
	}
	if specLevel != "" && f.thinking == "" {
		level = specLevel
	}
	if level == "" {
		level = llm.ThinkingOff
	}
	return m, m.ClampThinking(level), nil
}

// defaultModelSpec is the one rule for the model a command uses when
// none is asked for, in pi's order: the saved default (settings.json
// defaultProvider/defaultModel), else the first available of
// preferredDefaults, else the first available model defined in a
// models.json, else the first available built-in model, else the offline
// echo model. skipped says why a saved default was passed over.
func defaultModelSpec(reg *registry.Registry, s settings.Settings) (spec, skipped string) {
	if s.DefaultProvider != "" && s.DefaultModel != "" {
		e, ok := reg.Find(s.DefaultProvider, s.DefaultModel)
		switch {
		case !ok:
			skipped = "no such model"
		case !e.Available:
			skipped = e.Reason
		default:
			return s.DefaultProvider + "/" + s.DefaultModel, ""
		}
	}
	for _, p := range preferredDefaults {
		prov, id, _ := strings.Cut(p, "/")
		if e, ok := reg.Find(prov, id); ok && e.Available {
			return p, skipped
		}
	}
	all := reg.All()
	for _, configured := range []bool{true, false} {
		for _, e := range all {
			if !e.Available || e.Source == registry.SourceExtra || (e.Source != registry.SourceBuiltin) != configured {
				continue
			}
			return e.Model.Provider + "/" + e.Model.ID, skipped
		}
	}
	return faux.ProviderName + "/" + faux.ModelID, skipped
}

// pickTools is the built-in tools --tools and --no-tools enable; nil
// for none.
func pickTools(f localFlags) ([]string, error) {
	if f.noTools {
		return nil, nil
	}
	// The task tool (subagents) too, unless --no-subagents takes it away.
	known := append(slices.Clone(tool.BuiltinNames), subagent.ToolName)
	if f.tools == "" {
		return known, nil
	}
	var out []string
	for _, n := range strings.Split(f.tools, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("--tools: unknown tool %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}
