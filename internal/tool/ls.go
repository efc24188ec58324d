package tool

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

const defaultLsLimit = 500

type lsTool struct{ env Env }

// LsDetails are the details of an ls result, in pi's shape.
type LsDetails struct {
	Truncation *Truncation `json:"truncation,omitempty"`
	// EntryLimitReached is the limit, when more entries existed.
	EntryLimitReached int `json:"entryLimitReached,omitempty"`
}

func (t *lsTool) Spec() llm.Tool { return lsSpec() }

func (t *lsTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("ls", call.Args)
	path, _ := a.str("path", false)
	limit, hasLimit := a.num("limit")
	if r, bad := a.failed(); bad {
		return r
	}
	max := defaultLsLimit
	if hasLimit {
		max = clampInt(limit, 1, math.MaxInt32)
	}
	if path == "" {
		path = "."
	}
	dir, err := t.env.resolve(path)
	if err != nil {
		return Errorf("Invalid path %q: %v", path, err)
	}
	if r := t.env.checkReadable(dir, path); r != nil {
		return *r
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return Errorf("Path not found: %s", dir)
	}
	if !fi.IsDir() {
		return Errorf("Not a directory: %s", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return Errorf("Cannot read directory: %v", unwrapPathError(err))
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return Errorf("Cannot read directory: %v", unwrapPathError(err))
	}
	// Case-insensitive order, as pi sorts; ties (names differing only in
	// case) fall back to byte order so the listing is stable.
	sort.Slice(names, func(i, j int) bool {
		li, lj := strings.ToLower(names[i]), strings.ToLower(names[j])
		if li != lj {
			return li < lj
		}
		return names[i] < names[j]
	})

	var h headCollector
	shown, more := 0, false
	for i, name := range names {
		if i&255 == 0 && ctx.Err() != nil {
			return Errorf("Operation aborted")
		}
		if shown == max {
			more = true
			break
		}
		// Stat follows symlinks, so a link to a directory lists as one;
		// entries that cannot be stat'ed (broken links) are left out.
		efi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if efi.IsDir() {
			name += "/"
		}
		h.add(name)
		shown++
	}
	if shown == 0 {
		return TextResult("(empty directory)", nil)
	}
	text, tr := h.finish()
	var notices []string
	var d LsDetails
	if more {
		notices = append(notices, fmt.Sprintf("%d entries limit reached. Use limit=%d for more", max, max*2))
		d.EntryLimitReached = max
	}
	if tr.Truncated {
		notices = append(notices, formatSize(MaxBytes)+" limit reached")
		d.Truncation = &tr
	}
	if len(notices) == 0 {
		return TextResult(text, nil)
	}
	return TextResult(text+"\n\n["+strings.Join(notices, ". ")+"]", d)
}
