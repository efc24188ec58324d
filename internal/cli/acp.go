package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/agentd-dev/agentd/internal/acp"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// runACP is `agentd acp`: an Agent Client Protocol agent on stdin and
// stdout for an editor, on the same engine and sessions directory as
// `agentd rpc`.
func (m *Main) runACP(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	var f localFlags
	var maxLineBytes int
	fs.StringVar(&f.provider, "provider", "", "model provider (with --model as a bare id)")
	fs.StringVar(&f.model, "model", "", "model as provider/id[:thinking], or an id with --provider")
	fs.StringVar(&f.thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	fs.BoolVar(&f.noSession, "no-session", false, "keep sessions in memory only (no session/load or session/list)")
	fs.StringVar(&f.sessionDir, "session-dir", "", "directory for session files (default <data-dir>/sessions)")
	fs.StringVar(&f.tools, "tools", "", "comma-separated built-in tools to enable (default all)")
	fs.BoolVar(&f.noTools, "no-tools", false, "enable no built-in tools")
	fs.IntVar(&maxLineBytes, "max-line-bytes", 10<<20, "largest message accepted on stdin")
	fs.StringVar(&f.policy, "policy", cfg.Getenv("AGENTD_POLICY"), "permission policy file (JSON rules: allow / ask / deny by tool and argument); \"ask\" becomes session/request_permission (env AGENTD_POLICY)")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "MCP servers for every session: a JSON file {\"mcpServers\": {name: {command, args, env, cwd} | {url, headers}}}; the editor's mcpServers are added, and a project's .agentd/mcp.json once trusted (agentd trust, or the editor's answer when asked)")
	var connect, token string
	fs.StringVar(&connect, "connect", "", "bridge to a running agentd serve at this pi-server WebSocket URL (ws://host:port/): its sessions, tools and policy are used, so an editor and a browser watch and drive the same session")
	fs.StringVar(&token, "token", cfg.Getenv("AGENTD_TOKEN"), "with --connect, the server's token (env AGENTD_TOKEN)")
	cfg.RegisterApprovalTimeout(fs)
	// An editor's agent writes in the project it was opened on: the
	// model's bash is confined to it (an approval widens that), and where
	// the kernel cannot confine, the editor's user still gets an agent,
	// with a warning in its log.
	f.bounds.Sandbox.Mode = string(sandbox.WorkspaceWrite)
	f.bounds.Sandbox.Fallback = config.SandboxUnconfined
	f.bounds.Register(fs)
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	if err := f.bounds.Check(); err != nil {
		return usageError{err}
	}
	if maxLineBytes < 1024 {
		return usageError{fmt.Errorf("--max-line-bytes %d: must be at least 1024", maxLineBytes)}
	}
	if connect != "" {
		// These shape sessions run here; bridged, the server's own apply,
		// and a policy that silently did nothing would be worse than none.
		var here []string
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "policy", "mcp-config", "tools", "no-tools", "session-dir", "no-session":
				here = append(here, "--"+fl.Name)
			}
		})
		if len(here) > 0 {
			return usageError{fmt.Errorf("%s: with --connect the sessions are agentd serve's, with its own settings; give them to agentd serve (--policy, --mcp-config ...)", strings.Join(here, ", "))}
		}
		return m.acpConnect(ctx, cfg, connect, token, maxLineBytes)
	}
	h, err := m.openLocal(ctx, cfg, f)
	if err != nil {
		return err
	}
	defer h.Close()
	eng, err := h.engine()
	if err != nil {
		return err
	}
	// The face starts the servers for each session, with the project's
	// and the editor's.
	servers, err := loadMCPConfig(f.mcpConfig)
	if err != nil {
		return err
	}
	a := acp.New(acp.Options{
		Sessions:    acpSessions{eng: eng, dir: h.saveDir, tools: h.tools},
		SessionsDir: h.saveDir, Version: version(), MaxLineBytes: maxLineBytes, Logger: h.log,
		MCP: h.mcpManager(), MCPServers: servers, Trust: m.trustStore(cfg),
		Sandbox: sessionPolicy(h.sandbox()), Models: eng.Models().Available,
	})
	return a.Run(ctx, m.stdin, m.stdout)
}

// acpConnect is `agentd acp --connect`: the ACP face on the sessions of
// a running agentd serve.
func (m *Main) acpConnect(ctx context.Context, cfg *config.Config, url, token string, maxLine int) error {
	if !strings.HasPrefix(url, "ws://") && !strings.HasPrefix(url, "wss://") {
		return usageError{fmt.Errorf("--connect %q: want the WebSocket URL of agentd serve, such as ws://127.0.0.1:3141/", url)}
	}
	log := m.logger(cfg)
	r, err := acp.DialRemote(ctx, url, token, log)
	if err != nil {
		return err
	}
	defer r.Close()
	log.Info("agentd acp bridged to agentd serve", "url", url)
	a := acp.New(acp.Options{Remote: r, Version: version(), MaxLineBytes: maxLine, Logger: log})
	return a.Run(ctx, m.stdin, m.stdout)
}

// acpSessions builds the ACP face's sessions on the engine.
type acpSessions struct {
	eng   *engine.Engine
	dir   string
	tools []string
}

func (s acpSessions) Open(_ context.Context, spec acp.Spec) (*session.Session, error) {
	return s.eng.Session(sessionspec.Spec{Cwd: spec.Cwd, SessionsDir: s.dir, Open: spec.File, Tools: s.tools, Extra: spec.Tools})
}

// sessionPolicy is the sandbox of a session in cwd as the engine builds
// it from the server's: its directory and the temp dir writable besides
// the configured ones, each resolved to its real path.
func sessionPolicy(base sandbox.Policy) func(cwd string) sandbox.Policy {
	return func(cwd string) sandbox.Policy {
		p := base
		if !p.Confined() {
			return p
		}
		var w []string
		for _, d := range append([]string{cwd, os.TempDir()}, base.Writable...) {
			if r, err := sandbox.RealPath(d); err == nil {
				d = r
			}
			w = append(w, d)
		}
		p.Writable = w
		return p
	}
}
