package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/tool"
)

// runTools is `agentd tools`: the tools a session in this directory
// gets, the built-in ones and the MCP servers' of --mcp-config and the
// project's .agentd/mcp.json if trusted (see agentd trust), and each
// server that failed to start with its cause. The servers are started to
// list them, and stopped.
func (m *Main) runTools(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	var f localFlags
	fs.StringVar(&f.tools, "tools", "", "comma-separated built-in tools to enable (default all: "+strings.Join(tool.BuiltinNames, ",")+")")
	fs.BoolVar(&f.noTools, "no-tools", false, "enable no built-in tools")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "MCP servers as tool sources: a JSON file {\"mcpServers\": {name: {command, args, env, cwd} | {url, headers}}}; the project's .agentd/mcp.json is added once trusted (agentd trust)")
	f.bounds.MCP.Register(fs)
	asJSON := fs.Bool("json", false, "print {\"tools\": [{name, description}], \"unavailable\": [{source, error}]}, as pi-server's get_tools answers")
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	if err := f.bounds.MCP.Check(); err != nil {
		return usageError{err}
	}
	// Before anything is read: a mistaken --tools is all a listing says.
	if _, err := pickTools(f); err != nil {
		return usageError{err}
	}
	// Nothing runs: the sandbox cannot matter, and full access never
	// refuses to start.
	f.bounds.Sandbox.Mode = string(sandbox.FullAccess)
	h, err := m.openLocal(ctx, cfg, f)
	if err != nil {
		return err
	}
	defer h.Close()
	sess, err := h.session(ctx, sessionspec.Spec{Cwd: h.cwd, Tools: h.tools})
	if err != nil {
		return err
	}
	type entry struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	out := struct {
		Tools       []entry            `json:"tools"`
		Unavailable []tool.Unavailable `json:"unavailable"`
	}{Tools: []entry{}, Unavailable: sess.UnavailableTools()}
	for _, t := range sess.Agent().Config().Tools {
		sp := t.Spec()
		out.Tools = append(out.Tools, entry{sp.Name, sp.Description})
	}
	if *asJSON {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(m.stdout, "%s\n", b)
	} else {
		tw := tabwriter.NewWriter(m.stdout, 0, 4, 2, ' ', 0)
		for _, t := range out.Tools {
			// The first sentence: the table is for reading, --json has it all.
			desc, _, _ := strings.Cut(t.Description, "\n")
			if i := strings.Index(desc, ". "); i >= 0 {
				desc = desc[:i+1]
			}
			fmt.Fprintf(tw, "%s\t%s\n", t.Name, desc)
		}
		_ = tw.Flush()
		for _, u := range out.Unavailable {
			fmt.Fprintf(m.stdout, "unavailable: %s\n", u.Error)
		}
	}
	// Listed above; the exit status says something is missing.
	failed, untrusted := 0, false
	for _, u := range out.Unavailable {
		if strings.HasPrefix(u.Source, "mcp:") {
			failed++
		} else {
			untrusted = true
		}
	}
	switch {
	case failed > 0:
		return errors.New(plural(failed, "MCP server") + " failed to start (see above)")
	case untrusted:
		return errors.New("the project's MCP servers were not started: it is not trusted (see above)")
	}
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
