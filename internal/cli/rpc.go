package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/pirpc"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// runRPC is `agentd rpc`: pi's RPC protocol on stdin and stdout, with
// pi's flags where they mean the same.
func (m *Main) runRPC(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	var f localFlags
	var sessionPath, streamFormat string
	var cont bool
	var maxLineBytes int
	fs.StringVar(&f.provider, "provider", "", "model provider (with --model as a bare id)")
	fs.StringVar(&f.model, "model", "", "model as provider/id[:thinking], or an id with --provider")
	fs.StringVar(&f.thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	fs.BoolVar(&f.noSession, "no-session", false, "keep the session in memory only")
	fs.StringVar(&f.sessionDir, "session-dir", "", "directory for session files (default <data-dir>/sessions)")
	fs.StringVar(&sessionPath, "session", "", "open this session file")
	fs.BoolVar(&cont, "continue", false, "continue the most recent session of this directory")
	fs.BoolVar(&cont, "c", false, "shorthand for --continue")
	fs.StringVar(&f.tools, "tools", "", "comma-separated built-in tools to enable (default all: "+strings.Join(tool.BuiltinNames, ",")+")")
	fs.BoolVar(&f.noTools, "no-tools", false, "enable no built-in tools")
	fs.StringVar(&f.mode, "mode", "", "mode of a new session: build (default), plan (read-only: no writes, bash in the read-only sandbox) or one of modes/*.md; a session file keeps its own")
	fs.StringVar(&streamFormat, "stream-format", "full", "message_update payload: full (pi's, the whole partial message) or delta (only the new text)")
	fs.IntVar(&maxLineBytes, "max-line-bytes", 10<<20, "largest command line accepted on stdin")
	fs.StringVar(&f.policy, "policy", cfg.Getenv("AGENTD_POLICY"), "permission policy file (JSON rules: allow / ask / deny by tool and argument); default allows everything, as pi (env AGENTD_POLICY)")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "MCP servers as tool sources: a JSON file {\"mcpServers\": {name: {command, args, env, cwd} | {url, headers}}}; the project's .agentd/mcp.json is added once trusted (agentd trust)")
	cfg.RegisterApprovalTimeout(fs)
	// pi's RPC clients expect tools with their own rights: no sandbox
	// unless asked for.
	f.bounds.Sandbox.Mode = string(sandbox.FullAccess)
	f.bounds.Register(fs)
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	if err := f.bounds.Check(); err != nil {
		return usageError{err}
	}
	if streamFormat != "full" && streamFormat != "delta" {
		return usageError{fmt.Errorf("--stream-format %q: want full or delta", streamFormat)}
	}
	if maxLineBytes < 1024 {
		return usageError{fmt.Errorf("--max-line-bytes %d: must be at least 1024", maxLineBytes)}
	}
	h, err := m.openLocal(ctx, cfg, f)
	if err != nil {
		return err
	}
	defer h.Close()
	open := sessionPath
	if cont && open == "" {
		open = latestSession(h.sessionsDir, h.cwd)
	}
	if open != "" {
		if _, err := os.Stat(open); err != nil {
			return fmt.Errorf("session file %s: %w", open, err)
		}
	}
	sess, err := h.session(ctx, sessionspec.Spec{Cwd: h.cwd, SessionsDir: h.saveDir, Open: open, Tools: h.tools, Mode: f.mode})
	if err != nil {
		return err
	}
	srv := pirpc.New(pirpc.Options{Session: sess, Models: h.models, Settings: h.settings, MaxLineBytes: maxLineBytes,
		Delta: streamFormat == "delta", Cwd: h.cwd, ExportsDir: filepath.Join(cfg.DataDir, "exports"), Logger: h.log})
	return srv.Run(ctx, m.stdin, m.stdout)
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
