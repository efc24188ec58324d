package cli

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	slash "github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/proclimit"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/settings"
	"github.com/agentd-dev/agentd/internal/tool"
)

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
	// hide are files confined tools may not read besides the data and
	// config directories: the key and token files the command was given.
	hide []string
}

// engine assembles the engine every session-hosting command uses.
func (m *Main) engine(cfg *config.Config, ms *engine.Models, saved settings.Settings, c engineChoices) (*engine.Engine, error) {
	log := c.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sc := c.bounds.Sandbox
	// What confined tools may not read: agentd's own state and
	// configuration (transcripts, journal, keys), and what the command
	// was told holds a key.
	sc.Hide = append(append(slices.Clone(sc.Hide), cfg.DataDir, cfg.ConfigDir), c.hide...)
	support := sandbox.Probe()
	if policyOf(sc).Confined() && support.Err == nil {
		support.Isolation = sandbox.ProbeIsolation("/proc/self/exe")
	}
	policy, err := sandboxPolicy(sc, support, log)
	if err != nil {
		return nil, err
	}
	limits := c.bounds.Limits.Limits()
	sup := append(supervisor(), limits.Args()...)
	base := ""
	if !limits.None() {
		var note string
		base, note = proclimit.PrepareCgroup2()
		if note != "" {
			log.Info("cgroups of bash commands: "+note, "under", base)
		}
		if base != "" {
			sup = append(sup, tool.CgroupBaseFlag+base)
		}
	}
	logLimits(log, limits, proclimit.Probe(limits, true, base))
	environ := os.Environ()
	if policy.Confined() {
		// Keys, tokens and passwords stay out of confined tools' reach.
		environ = sandbox.Scrub(environ, sc.EnvAllow...)
	}
	return engine.New(engine.Options{
		Sandbox: policy, SandboxExe: "/proc/self/exe",
		Models: ms, Breakers: c.breakers, Model: c.model, Thinking: c.thinking, Saved: saved,
		Policy: c.policy, InteractionTimeout: c.interactionTimeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
		Instructions: instructions.Config{
			GlobalDirs: []string{cfg.ConfigDir, cfg.PiDir}, ProjectDirs: []string{".agentd", ".pi"},
			NoContextFiles: c.bounds.NoContextFiles,
		}, Commands: commandsConfig(cfg, c.bounds),
		Home: cfg.Getenv("HOME"), TempDir: os.TempDir(), Environ: environ, Supervisor: sup,
		EventLogSize: c.eventLogSize, EventLogBytes: c.bounds.EventLogBytes,
		MaxTurns: c.bounds.MaxTurns, MaxToolFailures: c.bounds.MaxToolFailures,
		MaxQueued: c.bounds.MaxQueuedMessages, MaxQueuedBytes: c.bounds.MaxQueuedMessageBytes, BashTimeout: c.bounds.BashTimeout,
		Subagents: engine.Subagents{Enabled: !c.bounds.NoSubagents, GlobalDirs: []string{cfg.ConfigDir}},
		Logger:    c.log, ReadOnlySandbox: readOnlySandbox(sc, policy, support, log),
		Modes:         modes.Config{GlobalDirs: []string{cfg.ConfigDir}, ProjectDirs: []string{".agentd"}},
		CheckpointDir: filepath.Join(cfg.DataDir, "checkpoints"),
	})
}

// sandboxPolicy is the policy the tools run under, checked against what
// the kernel can enforce: where it cannot, agentd refuses to start, or,
// if the configuration says so, runs the tools unconfined and says so
// loudly. It never pretends to confine.
func sandboxPolicy(sc config.Sandbox, support sandbox.Support, log *slog.Logger) (sandbox.Policy, error) {
	p := policyOf(sc)
	if err := support.Enforces(p); err != nil {
		if sc.Fallback != config.SandboxUnconfined {
			return p, fmt.Errorf("cannot confine tools in %s mode: %w (use --sandbox full-access to run without a sandbox, or --sandbox-fallback unconfined to do so whenever the kernel cannot confine)", p.Mode, err)
		}
		log.Warn("TOOLS ARE NOT SANDBOXED: the kernel cannot enforce the configured mode; running with full access (--sandbox-fallback unconfined)",
			"mode", p.Mode, "reason", err.Error())
		return sandbox.Policy{Mode: sandbox.FullAccess, Network: true}, nil
	}
	if p.Confined() && support.Isolation != nil {
		if sc.Fallback != config.SandboxUnconfined {
			return p, fmt.Errorf("cannot isolate tools from agentd's processes and files: %w (use --sandbox-fallback unconfined to run them under Landlock alone, where they can read agentd's environment and every file agentd can)", support.Isolation)
		}
		log.Warn("TOOLS ARE NOT ISOLATED: commands cannot get namespaces of their own here; they run under Landlock alone and can read agentd's environment, its data and config directories and other sessions' files (--sandbox-fallback unconfined)",
			"mode", p.Mode, "reason", support.Isolation.Error())
		p.NoIsolation = true
	}
	if p.Confined() {
		log.Info("tools sandboxed", "mode", p.Mode, "network", p.Network, "isolated", !p.NoIsolation, "hidden", p.Hidden, "kernel", support.String())
	} else {
		log.Info("tools run with full access (no sandbox)")
	}
	return p, nil
}

// logLimits says what each bash command may spend and how that is
// enforced here; a limit the system cannot enforce is a warning.
func logLimits(log *slog.Logger, lim proclimit.Limits, e proclimit.Enforcement) {
	if lim.None() {
		log.Warn("bash commands have no limits on processes, memory or CPU time")
		return
	}
	attrs := []any{"limits", lim.String(), "processes", e.Procs, "memory", e.Memory, "cpu", e.CPU}
	if len(e.Missing) > 0 {
		log.Warn("some limits on bash commands cannot be enforced here", append(attrs, "not_limited", strings.Join(e.Missing, "; "))...)
		return
	}
	log.Info("bash commands are limited", attrs...)
}

// commandsConfig says where sessions find skills and prompt templates:
// agentd's config dir and pi's, ~/.agents/skills (the Agent Skills
// standard's shared place), and the project's .agentd, .pi and
// .agents directories.
func commandsConfig(cfg *config.Config, b config.Engine) slash.Config {
	c := slash.Config{GlobalDirs: []string{cfg.ConfigDir, cfg.PiDir}, ProjectDirs: []string{".agentd", ".pi"},
		ProjectSkillDirs: []string{filepath.Join(".agents", "skills")}, NoSkills: b.NoSkills, NoTemplates: b.NoPromptTemplates}
	if home := cfg.Getenv("HOME"); home != "" {
		c.UserSkillDirs = []string{filepath.Join(home, ".agents", "skills")}
	}
	return c
}
