package cli

import (
	"context"
	"flag"
	"fmt"
	"github.com/agentd-dev/agentd/sandbox"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/config"
	"github.com/agentd-dev/agentd/engine"
	"github.com/agentd-dev/agentd/health"
	"github.com/agentd-dev/agentd/interaction"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/llm/faux"
	"github.com/agentd-dev/agentd/pirpc"
	"github.com/agentd-dev/agentd/settings"
	"github.com/agentd-dev/agentd/tool"
	"github.com/agentd-dev/agentd/transcript"
)

// rpcFlags are pi's RPC-mode flags, where they mean the same.
type rpcFlags struct {
	provider, model, thinking string
	noSession                 bool
	sessionDir, sessionPath   string
	cont                      bool
	tools                     string
	noTools                   bool
	streamFormat              string
	maxLineBytes              int
	policy                    string
	mcpConfig                 string
	bounds                    config.Engine
}

func (m *Main) runRPC(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	var f rpcFlags
	fs.StringVar(&f.provider, "provider", "", "model provider (with --model as a bare id)")
	fs.StringVar(&f.model, "model", "", "model as provider/id[:thinking], or an id with --provider")
	fs.StringVar(&f.thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	fs.BoolVar(&f.noSession, "no-session", false, "keep the session in memory only")
	fs.StringVar(&f.sessionDir, "session-dir", "", "directory for session files (default <data-dir>/sessions)")
	fs.StringVar(&f.sessionPath, "session", "", "open this session file")
	fs.BoolVar(&f.cont, "continue", false, "continue the most recent session of this directory")
	fs.BoolVar(&f.cont, "c", false, "shorthand for --continue")
	fs.StringVar(&f.tools, "tools", "", "comma-separated built-in tools to enable (default all: "+strings.Join(tool.BuiltinNames, ",")+")")
	fs.BoolVar(&f.noTools, "no-tools", false, "enable no built-in tools")
	fs.StringVar(&f.streamFormat, "stream-format", "full", "message_update payload: full (pi's, the whole partial message) or delta (only the new text)")
	fs.IntVar(&f.maxLineBytes, "max-line-bytes", 10<<20, "largest command line accepted on stdin")
	fs.StringVar(&f.policy, "policy", cfg.Getenv("AGENTD_POLICY"), "permission policy file (JSON rules: allow / ask / deny by tool and argument); default allows everything, as pi (env AGENTD_POLICY)")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "MCP servers as tool sources: a JSON file {\"mcpServers\": {name: {command, args, env, cwd} | {url, headers}}}; the project's .agentd/mcp.json is added")
	cfg.RegisterApprovalTimeout(fs)
	// pi's RPC clients expect tools with their own rights: no sandbox
	// unless asked for.
	f.bounds.Sandbox.Mode = string(sandbox.FullAccess)
	f.bounds.Register(fs)
	if err := parse(cfg, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	if err := f.bounds.Check(); err != nil {
		return usageError{err}
	}
	if f.streamFormat != "full" && f.streamFormat != "delta" {
		return usageError{fmt.Errorf("--stream-format %q: want full or delta", f.streamFormat)}
	}
	if f.maxLineBytes < 1024 {
		return usageError{fmt.Errorf("--max-line-bytes %d: must be at least 1024", f.maxLineBytes)}
	}
	log := m.logger(cfg)
	cwd, st, ms, err := m.environment(ctx, cfg, log)
	if err != nil {
		return err
	}
	model, level, err := pickModel(ms, st.Get(), f)
	if err != nil {
		return err
	}
	tools, err := pickTools(f)
	if err != nil {
		return usageError{err}
	}
	policy, err := loadPolicy(f.policy)
	if err != nil {
		return err
	}
	sessionsDir := f.sessionDir
	if sessionsDir == "" {
		sessionsDir = filepath.Join(cfg.DataDir, "sessions")
	}
	open := f.sessionPath
	if f.cont && open == "" {
		open = latestSession(sessionsDir, cwd)
	}
	if open != "" {
		if _, err := os.Stat(open); err != nil {
			return fmt.Errorf("session file %s: %w", open, err)
		}
	}
	sessDir := sessionsDir
	if f.noSession {
		sessDir = ""
	}
	eng, err := m.engine(cfg, ms, st.Get(), engineChoices{model: model, thinking: level, policy: policy,
		interactionTimeout: cfg.ApprovalTimeout, bounds: f.bounds, log: log})
	if err != nil {
		return err
	}
	if tools == nil {
		tools = []string{}
	}
	sess, err := m.mcpSession(ctx, eng, engine.Spec{Cwd: cwd, SessionsDir: sessDir, Open: open, Tools: tools}, f.mcpConfig, cwd, log)
	if err != nil {
		return err
	}
	defer sess.Close()
	srv := pirpc.New(pirpc.Options{Session: sess, Models: ms, Settings: st, MaxLineBytes: f.maxLineBytes,
		Delta: f.streamFormat == "delta", Cwd: cwd, ExportsDir: filepath.Join(cfg.DataDir, "exports"), Logger: log})
	return srv.Run(ctx, m.stdin, m.stdout)
}

// environment is what every session-hosting command starts from: the
// working directory, the saved settings and the models. Problems in
// models.json are logged and the rest is used.
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
		log.Warn("model configuration", "err", err)
		if ms == nil {
			return "", nil, nil, err
		}
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

// pickModel chooses the session's model: the flags, else the saved
// default, else the first available of the preferred models, else the
// offline echo model.
func pickModel(ms *engine.Models, s settings.Settings, f rpcFlags) (*llm.Model, llm.ThinkingLevel, error) {
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
	if spec == "" && s.DefaultProvider != "" && s.DefaultModel != "" {
		if e, ok := ms.Registry.Find(s.DefaultProvider, s.DefaultModel); ok && e.Available {
			spec = s.DefaultProvider + "/" + s.DefaultModel
		}
	}
	if spec == "" {
		for _, p := range preferredDefaults {
			prov, id, _ := strings.Cut(p, "/")
			if e, ok := ms.Registry.Find(prov, id); ok && e.Available {
				spec = p
				break
			}
		}
	}
	if spec == "" {
		spec = faux.ProviderName + "/" + faux.ModelID
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

func pickTools(f rpcFlags) ([]string, error) {
	if f.noTools {
		return nil, nil
	}
	if f.tools == "" {
		return tool.BuiltinNames, nil
	}
	var out []string
	for _, n := range strings.Split(f.tools, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		known := false
		for _, b := range tool.BuiltinNames {
			known = known || b == n
		}
		if !known {
			return nil, fmt.Errorf("--tools: unknown tool %q (known: %s)", n, strings.Join(tool.BuiltinNames, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// latestSession is the most recently active session file for cwd, or "".
func latestSession(root, cwd string) string {
	infos, err := transcript.List(transcript.SessionDir(root, cwd))
	if err != nil || len(infos) == 0 {
		return ""
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Modified.After(infos[j].Modified) })
	return infos[0].Path
}

// engineChoices are what a command decided for its sessions.
type engineChoices struct {
	bounds             config.Engine
	model              *llm.Model
	thinking           llm.ThinkingLevel
	policy             interaction.Policy
	interactionTimeout time.Duration
	eventLogSize       int
	breakers           *health.Breakers
	log                *slog.Logger
}

// engine assembles the engine every session-hosting command uses.
func (m *Main) engine(cfg *config.Config, ms *engine.Models, saved settings.Settings, c engineChoices) (*engine.Engine, error) {
	log := c.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	policy, err := sandboxPolicy(c.bounds.Sandbox, sandbox.Probe(), log)
	if err != nil {
		return nil, err
	}
	environ := os.Environ()
	if policy.Confined() {
		// Keys and the server token stay out of confined tools' reach.
		environ = sandbox.Scrub(environ)
	}
	return engine.New(engine.Options{
		Sandbox: policy, SandboxExe: "/proc/self/exe",
		Models: ms, Breakers: c.breakers, Model: c.model, Thinking: c.thinking, Saved: saved,
		Policy: c.policy, InteractionTimeout: c.interactionTimeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
		Home: cfg.Getenv("HOME"), TempDir: os.TempDir(), Environ: environ, Supervisor: supervisor(),
		EventLogSize: c.eventLogSize, EventLogBytes: c.bounds.EventLogBytes,
		MaxTurns: c.bounds.MaxTurns, MaxToolFailures: c.bounds.MaxToolFailures,
		MaxQueued: c.bounds.MaxQueuedMessages, MaxQueuedBytes: c.bounds.MaxQueuedMessageBytes, BashTimeout: c.bounds.BashTimeout,
		Logger: c.log,
	})
}

// sandboxPolicy is the policy the tools run under, checked against what
// the kernel can enforce: where it cannot, agentd refuses to start, or,
// if the configuration says so, runs the tools unconfined and says so
// loudly. It never pretends to confine.
func sandboxPolicy(sc config.Sandbox, support sandbox.Support, log *slog.Logger) (sandbox.Policy, error) {
	p := sc.Policy()
	if err := support.Enforces(p); err != nil {
		if sc.Fallback != config.SandboxUnconfined {
			return p, fmt.Errorf("cannot confine tools in %s mode: %w (use --sandbox full-access to run without a sandbox, or --sandbox-fallback unconfined to do so whenever the kernel cannot confine)", p.Mode, err)
		}
		log.Warn("TOOLS ARE NOT SANDBOXED: the kernel cannot enforce the configured mode; running with full access (--sandbox-fallback unconfined)",
			"mode", p.Mode, "reason", err.Error())
		return sandbox.Policy{Mode: sandbox.FullAccess, Network: true}, nil
	}
	if p.Confined() {
		log.Info("tools sandboxed", "mode", p.Mode, "network", p.Network, "kernel", support.String())
	} else {
		log.Info("tools run with full access (no sandbox)")
	}
	return p, nil
}
