// Package config is agentd's one configuration struct: parsed from flags
// and the environment once, at the top, checked, and passed down. No other
// package reads the environment.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"
)

// Config is everything agentd is configured with.
type Config struct {
	// ConfigDir holds models.json and persisted settings
	// ($AGENTD_CONFIG_DIR, default ~/.agentd).
	ConfigDir string
	// DataDir holds sessions and durable server state
	// ($AGENTD_DATA_DIR, default $XDG_DATA_HOME/agentd or ~/.local/share/agentd).
	DataDir string
	// PiModelsPath, when set, also reads pi's models.json
	// ($AGENTD_PI_MODELS; "pi" means ~/.pi/agent/models.json).
	PiModelsPath string
	// PiDir is pi's global directory (~/.pi/agent), where agentd also
	// looks for AGENTS.md, SYSTEM.md and APPEND_SYSTEM.md so a pi user's
	// files work unchanged; empty without HOME.
	PiDir string
	// LogLevel and LogFormat ("text" or "json") configure the stderr log.
	LogLevel  slog.Level
	LogFormat string
	// StreamIdleTimeout fails a model stream that sends nothing for this
	// long ($AGENTD_STREAM_IDLE_TIMEOUT, default 5m; 0 disables).
	StreamIdleTimeout time.Duration
	// KeyCommandTimeout bounds an "!command" apiKey in models.json.
	KeyCommandTimeout time.Duration
	// ApprovalTimeout bounds how long a tool approval or an ask_user
	// question waits for an answer in rpc and serve
	// ($AGENTD_APPROVAL_TIMEOUT, default DefaultApprovalTimeout; 0 waits
	// forever). It is registered only by the commands that host sessions
	// (RegisterApprovalTimeout).
	ApprovalTimeout time.Duration
	// envErrs are environment values that did not parse; Check reports
	// them, so a typo never silently falls back to a default.
	envErrs []error

	// Getenv resolves API keys (ANTHROPIC_API_KEY, OPENAI_API_KEY, names
	// used in models.json). It is the process environment in production
	// and a map in tests.
	Getenv func(string) string `json:"-"`
}

// DefaultApprovalTimeout is how long an approval or a question waits by
// default: long enough for a person who stepped away for a moment to read
// the call and decide, short enough that a forgotten one does not hold a
// run (and, in serve, every later command of its session) forever.
const DefaultApprovalTimeout = 10 * time.Minute

// Defaults returns the configuration before flags, from the environment.
func Defaults(getenv func(string) string) Config {
	home := getenv("HOME")
	c := Config{
		ConfigDir:         getenv("AGENTD_CONFIG_DIR"),
		DataDir:           getenv("AGENTD_DATA_DIR"),
		PiModelsPath:      getenv("AGENTD_PI_MODELS"),
		LogLevel:          slog.LevelInfo,
		LogFormat:         "text",
		StreamIdleTimeout: 5 * time.Minute,
		KeyCommandTimeout: 10 * time.Second,
		ApprovalTimeout:   DefaultApprovalTimeout,
		Getenv:            getenv,
	}
	if c.ConfigDir == "" && home != "" {
		c.ConfigDir = filepath.Join(home, ".agentd")
	}
	if home != "" {
		c.PiDir = filepath.Join(home, ".pi", "agent")
	}
	if c.DataDir == "" {
		if x := getenv("XDG_DATA_HOME"); x != "" {
			c.DataDir = filepath.Join(x, "agentd")
		} else if home != "" {
			c.DataDir = filepath.Join(home, ".local", "share", "agentd")
		}
	}
	if v := getenv("AGENTD_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			c.envErrs = append(c.envErrs, fmt.Errorf("AGENTD_LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	if v := getenv("AGENTD_LOG_FORMAT"); v != "" {
		c.LogFormat = v
	}
	if v := getenv("AGENTD_STREAM_IDLE_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			c.StreamIdleTimeout = d
		} else {
			c.envErrs = append(c.envErrs, fmt.Errorf("AGENTD_STREAM_IDLE_TIMEOUT=%q: want a duration such as 5m or 90s", v))
		}
	}
	if v := getenv("AGENTD_APPROVAL_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			c.ApprovalTimeout = d
		} else {
			c.envErrs = append(c.envErrs, fmt.Errorf("AGENTD_APPROVAL_TIMEOUT=%q: want a duration such as 10m or 90s (0 waits forever)", v))
		}
	}
	return c
}

// Register adds the flags every subcommand shares to fs, bound to c.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfigDir, "config-dir", c.ConfigDir, "directory with models.json and settings (env AGENTD_CONFIG_DIR)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for sessions and server state (env AGENTD_DATA_DIR)")
	fs.StringVar(&c.PiModelsPath, "pi-models", c.PiModelsPath, `also read pi's models.json from this path; "pi" for ~/.pi/agent/models.json (env AGENTD_PI_MODELS)`)
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (env AGENTD_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json (env AGENTD_LOG_FORMAT)")
	fs.DurationVar(&c.StreamIdleTimeout, "stream-idle-timeout", c.StreamIdleTimeout, "fail a model stream silent for this long; 0 disables (env AGENTD_STREAM_IDLE_TIMEOUT)")
}

// RegisterApprovalTimeout adds --approval-timeout to fs, for the commands
// whose sessions ask people, and each of the deprecated names as an alias
// of it (serve's --ui-timeout).
func (c *Config) RegisterApprovalTimeout(fs *flag.FlagSet, deprecated ...string) {
	fs.DurationVar(&c.ApprovalTimeout, "approval-timeout", c.ApprovalTimeout, "how long a tool approval or a question waits for an answer; 0 waits forever (env AGENTD_APPROVAL_TIMEOUT)")
	for _, name := range deprecated {
		fs.DurationVar(&c.ApprovalTimeout, name, c.ApprovalTimeout, "deprecated: the old name of --approval-timeout")
	}
}

// Check validates c and resolves shorthand values. It is called once,
// after flags are parsed.
func (c *Config) Check() error {
	errs := append([]error(nil), c.envErrs...)
	if c.ConfigDir == "" {
		errs = append(errs, errors.New("no config directory: set HOME, AGENTD_CONFIG_DIR or --config-dir"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("no data directory: set HOME, AGENTD_DATA_DIR or --data-dir"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log format %q: want text or json", c.LogFormat))
	}
	if c.StreamIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("stream idle timeout %s: must not be negative", c.StreamIdleTimeout))
	}
	if c.ApprovalTimeout < 0 {
		errs = append(errs, fmt.Errorf("approval timeout %s: must not be negative (0 waits forever)", c.ApprovalTimeout))
	}
	if c.PiModelsPath == "pi" {
		c.PiModelsPath = filepath.Join(c.Getenv("HOME"), ".pi", "agent", "models.json")
	}
	if strings.HasPrefix(c.PiModelsPath, "~/") {
		c.PiModelsPath = filepath.Join(c.Getenv("HOME"), c.PiModelsPath[2:])
	}
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	return errors.Join(errs...)
}

// Logger builds the stderr logger c describes.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
