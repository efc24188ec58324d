package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/mcp"
)

// runTrust is `agentd trust [dir]`: the person's explicit grant that the
// project's own files may start processes (its .agentd/mcp.json's MCP
// servers), recorded in the configuration directory for exactly the
// file's content now. A model working in the project can write that
// file, so nothing else makes agentd run it; a changed file needs
// trusting again.
func (m *Main) runTrust(_ context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	revoke := fs.Bool("revoke", false, "remove every grant of the project instead")
	list := fs.Bool("list", false, "list the trusted projects and files")
	if err := parse(cfg, fs, args); err != nil {
		return err
	}
	store := m.trustStore(cfg)
	if *list {
		grants, err := store.List()
		if err != nil {
			return err
		}
		for _, g := range grants {
			fmt.Fprintf(m.stdout, "%s\t%s\tsha256:%s\t%s\n", g.Project, g.File, g.SHA256, g.At.Format("2006-01-02T15:04:05Z"))
		}
		return nil
	}
	if fs.NArg() > 1 {
		return usageError{errors.New("give one project directory")}
	}
	dir := fs.Arg(0)
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if *revoke {
		n, err := store.Revoke(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(m.stdout, "revoked %s of %s\n", plural(n, "grant"), dir)
		return nil
	}
	p, err := mcp.ReadProject(dir)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("%s has no %s: nothing to trust", dir, mcp.ProjectFile)
	}
	if err := store.Grant(dir, mcp.ProjectFile, p.Data); err != nil {
		return err
	}
	fmt.Fprintf(m.stdout, "trusted %s as it is now; its MCP servers:\n", p.Path)
	for _, c := range p.Servers {
		if c.URL != "" {
			fmt.Fprintf(m.stdout, "  %s: %s\n", c.Name, c.URL)
			continue
		}
		fmt.Fprintf(m.stdout, "  %s: %s\n", c.Name, strings.Join(append([]string{c.Command}, c.Args...), " "))
	}
	return nil
}
