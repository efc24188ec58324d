// Package cli is agentd's command line: it parses arguments into one
// config.Config, wires the parts together and runs a subcommand. main()
// only handles signals and the exit code, so end-to-end tests run exactly
// what users run.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/anthropic"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/openairesponses"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

// Version, when set at build time with
// -ldflags "-X github.com/agentd-dev/agentd/internal/cli.Version=v1.2.3", is
// agentd's version; empty leaves it to the build information (see
// version).
var Version string

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Main is one run of the agentd command.
type Main struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// terminal: a person reads stderr (it is a TTY), so serve also says
	// in plain words where to go; logs alone stay machine-readable.
	terminal bool

	httpClient *http.Client
}

// StderrIsTerminal tells m whether stderr is a terminal a person reads
// (the caller checks; tests say either). It returns m.
func (m *Main) StderrIsTerminal(yes bool) *Main {
	m.terminal = yes
	return m
}

// New returns a Main reading and writing the given streams; getenv is the
// environment (os.Getenv in production).
func New(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *Main {
	return &Main{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
}

// Close releases what Run acquired.
func (m *Main) Close() error {
	if m.httpClient != nil {
		m.httpClient.CloseIdleConnections()
	}
	return nil
}

type command struct {
	name, summary string
	run           func(m *Main, ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error
	// own: the command takes none of the shared flags (config.Register),
	// as it reads no configuration.
	own bool
	// shared, when set, is the only shared flags the command takes: the
	// others would be accepted and ignored.
	shared []string
}

func commands() []command {
	return []command{
		{"ask", "send one prompt to a model and stream the answer", (*Main).runAsk, false, nil},
		{"models", "list the models agentd can use, and why not for the others", (*Main).runModels, false, nil},
		{"tools", "list the tools a session here gets (built-in and MCP servers'), and servers that failed to start", (*Main).runTools, false, nil},
		{"rpc", "speak pi's RPC protocol on stdin/stdout (a drop-in for pi --mode rpc)", (*Main).runRPC, false, nil},
		{"acp", "speak the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim)", (*Main).runACP, false, nil},
		{"serve", "serve many sessions: pi-server protocol, REST + SSE API, per-session WebSocket and web UI on one port (or pi-server on --stdio)", (*Main).runServe, false, nil},
		// bench starts servers of its own, with their own data: it only logs.
		{name: "bench", summary: "measure agentd serve: N sessions over WebSocket against a mock model", run: (*Main).runBench, shared: []string{"log-level", "log-format"}},
		{"token", "print a random token for agentd serve --token", (*Main).runToken, true, nil},
		// trust keeps its grants in the config directory, and reads nothing else.
		{name: "trust", summary: "trust a project's .agentd/mcp.json (as it is now) to start its MCP servers", run: (*Main).runTrust, shared: []string{"config-dir"}},
		{"version", "print the version", (*Main).runVersion, true, nil},
		{"completion", "print a shell completion script: bash, zsh or fish", (*Main).runCompletion, true, nil},
	}
}

// usageError is a mistake on the command line: reported with exit code 2.
type usageError struct{ error }

// Run runs the command line args (without the program name) and returns
// the process exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == tool.SuperviseCommand {
		// Hidden: agentd itself starts this around every bash run.
		return tool.Supervise(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == sandbox.Command {
		// Hidden: agentd starts this between fork and a confined
		// command's exec, to apply the sandbox (see package sandbox).
		return sandbox.Main(args[1:], m.stderr)
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-v") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) > 1 && args[0] == "help" {
		// `agentd help serve` is `agentd serve -h`; an unknown name falls
		// through to the unknown-command message below.
		args = []string{args[1], "-h"}
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		m.usage(m.stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == args[0] {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(m.stderr, "agentd: unknown command %q\nRun 'agentd help' for the commands.\n", args[0])
		return ExitUsage
	}
	cfg := config.Defaults(m.getenv)
	fs := newFlagSet(*cmd, &cfg)
	err := cmd.run(m, ctx, &cfg, fs, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case isHelp(err):
		printHelp(m.stderr, *cmd, fs)
		return ExitOK
	case errors.As(err, &ue):
		// The mistake and where to read more, not every flag: serve's
		// list buried the one line that mattered.
		fmt.Fprintf(m.stderr, "agentd %s: %v\n%s\n", cmd.name, ue.error, hint(*cmd))
		return ExitUsage
	default:
		fmt.Fprintf(m.stderr, "agentd %s: %v\n", cmd.name, err)
		return ExitError
	}
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprintln(w, "agentd hosts LLM coding-agent sessions.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: agentd <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "agentd help <command>" (or "agentd <command> -h") for what a command does and its flags.`)
}

// newFlagSet is the flag set cmd's run registers its flags in: the
// shared ones unless cmd.own, bound to cfg. It prints nothing itself:
// Run prints the help or the error with a hint.
func newFlagSet(cmd command, cfg *config.Config) *flag.FlagSet {
	fs := flag.NewFlagSet("agentd "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	switch {
	case cmd.own:
	case cmd.shared == nil:
		cfg.Register(fs)
	default:
		all := flag.NewFlagSet("", flag.ContinueOnError)
		cfg.Register(all)
		for _, name := range cmd.shared {
			f := all.Lookup(name)
			fs.Var(f.Value, f.Name, f.Usage)
			fs.Lookup(name).DefValue = f.DefValue
		}
	}
	return fs
}

// parseOwn is parseFlagsOnly for a command that reads no configuration
// (command.own): nothing to check.
func parseOwn(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

// parse parses flags and checks the configuration.
func parse(cfg *config.Config, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if err := cfg.Check(); err != nil {
		return usageError{err}
	}
	return nil
}

// parseFlagsOnly is parse for a command that takes no arguments but
// flags.
func parseFlagsOnly(cfg *config.Config, fs *flag.FlagSet, args []string) error {
	if err := parse(cfg, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

// supervisor is the argv of the process supervisor of bash runs (see
// tool.Env.Supervisor): this very binary. /proc/self/exe is resolved by
// the starting child, so it names the running agentd even after an
// upgrade replaced or deleted its file, and the supervisor always speaks
// this agentd's protocol. Systems other than Linux ignore it.
func supervisor() []string { return []string{"/proc/self/exe", tool.SuperviseCommand} }

// removeStaleSpill deletes the bash output files of agentd processes
// that ended without cleaning up (kill -9, a crash, a reboot).
func removeStaleSpill(log *slog.Logger) {
	removed, err := tool.RemoveStaleSpill(os.TempDir())
	if err != nil {
		log.Warn("removing stale bash output files", "err", err)
	}
	if len(removed) > 0 {
		log.Info("removed bash output files of agentd processes no longer running", "count", len(removed))
	}
}

// logger is the stderr logger for cfg; nothing but protocol output ever
// goes to stdout.
func (m *Main) logger(cfg *config.Config) *slog.Logger { return cfg.Logger(m.stderr) }

// client is the HTTP client shared by all providers: no overall timeout
// (streams are long; the idle timeout and the context bound them), but
// bounded connection setup.
func (m *Main) client() *http.Client {
	if m.httpClient == nil {
		t := &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   15 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		m.httpClient = &http.Client{Transport: t}
	}
	return m.httpClient
}

// loadModels loads the registry and the providers for each wire API.
// A problem in a models.json the user wrote comes back as a
// *modelConfigError, together with the models that could be read: every
// command that runs a model stops on it (only `agentd models` lists what
// it could read first), because running on what was left, often only
// faux/echo, answered "You said: hi" with exit 0 and nobody noticed.
func (m *Main) loadModels(ctx context.Context, cfg *config.Config) (*engine.Models, error) {
	reg, err := registry.Load(ctx, registry.Options{
		ConfigDir:      cfg.ConfigDir,
		PiModelsPath:   cfg.PiModelsPath,
		Env:            cfg.Getenv,
		CommandTimeout: cfg.KeyCommandTimeout,
		Extra:          []llm.Model{*faux.Model()},
	})
	if reg == nil {
		return nil, err
	}
	if err != nil {
		err = &modelConfigError{err: err}
	}
	hc := m.client()
	fx := faux.New(faux.Options{})
	return &engine.Models{Registry: reg, Fallback: fx, Providers: map[llm.API]llm.Provider{
		llm.APIAnthropicMessages: anthropic.New(hc),
		llm.APIOpenAICompletions: openaichat.New(hc),
		llm.APIOpenAIResponses:   openairesponses.New(hc),
		llm.APIFaux:              fx,
	}}, err
}

// modelConfigError is every problem registry.Load found in the
// models.json files, each naming its file and what is wrong there.
type modelConfigError struct{ err error }

func (e *modelConfigError) Error() string {
	return "cannot use the model configuration; fix it (or move the file away) and run again:\n  " +
		strings.ReplaceAll(e.err.Error(), "\n", "\n  ")
}

func (e *modelConfigError) Unwrap() error { return e.err }

func (m *Main) runVersion(_ context.Context, _ *config.Config, fs *flag.FlagSet, args []string) error {
	if err := parseOwn(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(m.stdout, "agentd %s\n", version())
	return nil
}
