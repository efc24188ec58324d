package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agentd-dev/agentd/internal/config"
)

// helpText is what `agentd <command> -h` says before the flags: how the
// command is called, what it does, and how people use it.
type helpText struct {
	synopsis []string // each a way to call it, after "agentd "
	about    string   // one paragraph
	examples []string // command lines, each optionally followed by "  # why"
}

// helpOf is each command's help text. A command missing here gets its
// summary only; TestEveryCommandHasHelp keeps that from happening.
func helpOf(name string) helpText {
	switch name {
	case "ask":
		return helpText{
			synopsis: []string{`ask [flags] <prompt words...>`, `ask [flags] -`},
			about: "Send one prompt to a model and stream the answer to stdout; thinking, tool activity and usage go to stderr. " +
				"The prompt is the arguments joined by spaces, or stdin when it is a single -. " +
				"Without --tools it is a plain question; with --tools the model may run those tools in the working directory without asking.",
			examples: []string{
				`agentd ask "what does the regexp ^a+b$ match?"`,
				`git diff | agentd ask --model anthropic/claude-sonnet-4-6 -`,
				`agentd ask --tools read,bash "which tests fail here?"`,
			},
		}
	case "models":
		return helpText{
			synopsis: []string{`models [--json] [--available]`},
			about: "List every model agentd knows (built in, ~/.agentd/models.json, pi's models.json with --pi-models) " +
				"with whether it can be used now and, for each one that cannot, what to set (usually an API key variable).",
			examples: []string{`agentd models`, `agentd models --available --json`},
		}
	case "tools":
		return helpText{
			synopsis: []string{`tools [flags]`},
			about: "List the tools a session started here gets: the built-in ones and those of the MCP servers " +
				"(--mcp-config and the project's trusted .agentd/mcp.json), and every server that failed to start, with why.",
			examples: []string{`agentd tools`, `agentd tools --mcp-config mcp.json --json`},
		}
	case "rpc":
		return helpText{
			synopsis: []string{`rpc [flags]`},
			about: "Speak pi's RPC protocol on stdin and stdout, one JSON command or event per line: a drop-in for `pi --mode rpc`. " +
				"One session, kept in the data directory unless --no-session; logs go to stderr. " +
				"--mode starts a new session in a mode (build, plan or one of modes/*.md; set_mode switches it). " +
				"A prompt starting with / runs a prompt template, a skill or a built-in (get_commands lists them); the model may hand jobs " +
				"to subagents with the task tool (--no-subagents takes it away); get_checkpoints, get_turn_diff and revert_turn show and undo what a turn changed.",
			examples: []string{
				`agentd rpc --model anthropic/claude-sonnet-4-6`,
				`agentd rpc --continue  # the last session of this directory`,
				`agentd rpc --mode plan --no-session  # read-only: no writes, bash confined`,
			},
		}
	case "acp":
		return helpText{
			synopsis: []string{`acp [flags]`},
			about: "Speak the Agent Client Protocol on stdin and stdout, for editors (Zed, JetBrains, Neovim): configure your editor to start this command. " +
				"Tools are confined to the project by default. The editor switches the session's mode (build, plan, modes/*.md), model and thinking level, " +
				"is offered the / commands (prompt templates, skills, built-ins), and sees at the end of a prompt the files it changed. " +
				"With --connect it bridges to a running agentd serve instead, sharing its sessions.",
			examples: []string{`agentd acp`, `agentd acp --connect ws://127.0.0.1:3141/ --token "$AGENTD_TOKEN"`},
		}
	case "serve":
		return helpText{
			synopsis: []string{`serve [flags]`},
			about: "Serve many sessions on one port: the web UI at /, pi-server's protocol over WebSocket, the REST + SSE API at /api/v2 " +
				"and a per-session WebSocket; or pi-server's protocol on stdin/stdout with --stdio. It runs until interrupted (Ctrl+C or SIGTERM), " +
				"then drains running commands. Every face has the same sessions: modes (build, plan, modes/*.md), / commands (prompt templates, skills, built-ins), " +
				"subagents (the task tool) and checkpoints of the files each turn changed, with revert. Add --cluster to share sessions between nodes over NATS JetStream.",
			examples: []string{
				`agentd serve  # http://127.0.0.1:3141/, this machine only`,
				`agentd serve --host 0.0.0.0 --token "$(agentd token)"`,
				`agentd serve --cluster nats://10.0.0.5:4222 --node-id a`,
			},
		}
	case "bench":
		return helpText{
			synopsis: []string{`bench [flags]`},
			about: "Start agentd serve against a mock model, drive N sessions over the pi-server WebSocket (--face session-ws adds per-session WebSocket watchers; " +
				"--face rest drives the REST API with SSE watchers), and report events per second, latencies and the server's memory per session. " +
				"--baseline compares the face's rate with coder/websocket's own; --cluster-nodes times a node's takeover after kill -9.",
			examples: []string{`agentd bench --sessions 1,100`, `agentd bench --face rest --sessions 50 --json`, `agentd bench --sessions 100 --baseline`},
		}
	case "token":
		return helpText{
			synopsis: []string{`token`},
			about:    "Print a new random token, for agentd serve --token (or AGENTD_TOKEN) and the clients that connect to it.",
			examples: []string{`export AGENTD_TOKEN=$(agentd token)`},
		}
	case "trust":
		return helpText{
			synopsis: []string{`trust [flags] [project-dir]`, `trust --revoke [project-dir]`, `trust --list`},
			about: "Trust the project's .agentd/mcp.json as it is now: its MCP servers start in agentd rpc, acp and tools sessions of the project " +
				"(under the sessions' sandbox). The grant is kept in the config directory and ends when the file changes. The directory defaults to the current one.",
			examples: []string{`agentd trust`, `agentd trust --list`, `agentd trust --revoke ~/src/project`},
		}
	case "version":
		return helpText{
			synopsis: []string{`version`},
			about:    "Print agentd's version (also: agentd --version).",
			examples: []string{`agentd version`},
		}
	case "completion":
		return helpText{
			synopsis: []string{`completion bash|zsh|fish`},
			about: "Print a shell completion script for agentd's commands and each command's flags. " +
				"Load it in your shell's startup file; it is generated from this binary's flags, so regenerate it after an upgrade.",
			examples: []string{
				`source <(agentd completion bash)  # in ~/.bashrc`,
				`agentd completion zsh > "${fpath[1]}/_agentd"`,
				`agentd completion fish > ~/.config/fish/completions/agentd.fish`,
			},
		}
	}
	return helpText{}
}

// sharedFlagNames is the flags config.Config.Register gives every command
// that runs a model, taken from Register itself so the list cannot drift.
func sharedFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var c config.Config
	c.Register(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// printHelp writes c's help: synopsis, description, examples, then its
// flags, under headings. fs has all of c's flags registered.
func printHelp(w io.Writer, c command, fs *flag.FlagSet) {
	h := helpOf(c.name)
	for i, s := range h.synopsis {
		lead := "Usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(w, "%sagentd %s\n", lead, s)
	}
	if len(h.synopsis) == 0 {
		fmt.Fprintf(w, "Usage: agentd %s [flags]\n", c.name)
	}
	fmt.Fprintln(w)
	about := h.about
	if about == "" {
		about = c.summary
	}
	fmt.Fprintln(w, wrap(about, 76, ""))
	if len(h.examples) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Examples:")
		for _, e := range h.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	for _, g := range flagGroups(c, fs) {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s:\n", g.title)
		printFlags(w, g.flags)
	}
}

type flagGroup struct {
	title string
	flags []*flag.Flag
}

// flagGroups sorts fs's flags under headings: serve's by
// config.ServeFlagGroups (a flag it does not name goes under its last
// group), every other command's into its own and the shared ones.
func flagGroups(c command, fs *flag.FlagSet) []flagGroup {
	var groups []flagGroup
	index := map[string]int{}
	if c.name == "serve" {
		for i, g := range config.ServeFlagGroups() {
			groups = append(groups, flagGroup{title: g.Title})
			for _, n := range g.Names {
				index[n] = i
			}
		}
	} else {
		groups = []flagGroup{{title: "Flags"}, {title: "Shared flags"}}
		for n := range sharedFlagNames() {
			index[n] = 1
		}
	}
	last := len(groups) - 1
	if c.name != "serve" {
		last = 0
	}
	fs.VisitAll(func(f *flag.Flag) {
		i, ok := index[f.Name]
		if !ok {
			i = last
		}
		groups[i].flags = append(groups[i].flags, f)
	})
	out := groups[:0]
	for _, g := range groups {
		if len(g.flags) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// printFlags prints flags as the flag package's PrintDefaults does (the
// format people and scripts know), through a set holding only them. Each
// keeps the default it was registered with, whatever was parsed since.
func printFlags(w io.Writer, flags []*flag.Flag) {
	sub := flag.NewFlagSet("", flag.ContinueOnError)
	sub.SetOutput(w)
	for _, f := range flags {
		sub.Var(f.Value, f.Name, f.Usage)
		sub.Lookup(f.Name).DefValue = f.DefValue
	}
	sub.PrintDefaults()
}

// wrap breaks s into lines of at most width runes (words longer stay
// whole), each after indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n")
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		if n == 0 {
			b.WriteString(indent)
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// hint is the one line printed after a usage error, instead of the whole
// flag list.
func hint(c command) string {
	return fmt.Sprintf("Run 'agentd %s -h' for its usage and flags.", c.name)
}

// isHelp reports whether err asks for the help (-h, --help).
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }
