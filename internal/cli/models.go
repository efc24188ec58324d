package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/agentd-dev/agentd/internal/config"
)

func (m *Main) runModels(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print JSON: one object per model with available and reason")
	onlyAvailable := fs.Bool("available", false, "list only models that can be used now")
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	// With a broken models.json the list shows what could be read, and
	// the command still fails, with the problems, once it is printed.
	ms, confErr := m.loadModels(ctx, cfg)
	if ms == nil {
		return confErr
	}
	entries := ms.Registry.All()
	if *asJSON {
		type row struct {
			Model     any    `json:"model"`
			Available bool   `json:"available"`
			Reason    string `json:"reason,omitempty"`
			Source    string `json:"source"`
		}
		out := make([]row, 0, len(entries))
		for _, e := range entries {
			if *onlyAvailable && !e.Available {
				continue
			}
			out = append(out, row{e.Model, e.Available, e.Reason, e.Source})
		}
		enc := json.NewEncoder(m.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return confErr
	}
	tw := tabwriter.NewWriter(m.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tNAME\tCONTEXT\tMAX OUT\tTHINKING\tIMAGES\tSTATUS")
	unavailable := 0
	for _, e := range entries {
		if !e.Available {
			unavailable++
			if *onlyAvailable {
				continue
			}
		}
		status := "available"
		if !e.Available {
			status = "unavailable: " + e.Reason
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Model.Provider, e.Model.ID, e.Model.Name,
			tokens(e.Model.ContextWindow), tokens(e.Model.MaxTokens), yesNo(e.Model.Reasoning), yesNo(e.Model.SupportsImages()), status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unavailable > 0 && !*onlyAvailable {
		fmt.Fprintf(m.stderr, "\n%d of %d models are unavailable; the reason is in the STATUS column.\n", unavailable, len(entries))
	}
	return confErr
}

func tokens(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000:
		return fmt.Sprintf("%dK", (n+500)/1000)
	}
	return fmt.Sprint(n)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
