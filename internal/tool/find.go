package tool

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

const defaultFindLimit = 1000

type findTool struct{ env Env }

// FindDetails are the details of a find result, in pi's shape.
type FindDetails struct {
	Truncation *Truncation `json:"truncation,omitempty"`
	// ResultLimitReached is the limit, when more results existed.
	ResultLimitReached int `json:"resultLimitReached,omitempty"`
}

func (t *findTool) Spec() llm.Tool { return findSpec() }

// findQuery is a validated find call.
type findQuery struct {
	pattern  string
	root     string
	limit    int
	m        *globMatcher
	fullPath bool // match the absolute path instead of the name
	// hidden leaves out what the sandbox hides (nil: nothing).
	hidden func(rel string, isDir bool) bool
}

func (t *findTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("find", call.Args)
	pattern, ok := a.str("pattern", true)
	if ok && pattern == "" {
		a.fail("pattern", "must not be empty")
	}
	path, _ := a.str("path", false)
	limit, hasLimit := a.num("limit")
	if r, bad := a.failed(); bad {
		return r
	}
	q := findQuery{pattern: pattern, limit: defaultFindLimit}
	if hasLimit {
		q.limit = clampInt(limit, 1, math.MaxInt32)
	}
	if path == "" {
		path = "."
	}
	root, err := t.env.resolve(path)
	if err != nil {
		return Errorf("Invalid path %q: %v", path, err)
	}
	if r := t.env.checkReadable(root, path); r != nil {
		return *r
	}
	q.hidden = t.env.hiddenUnder(root)
	fi, err := os.Stat(root)
	if err != nil {
		return Errorf("Path not found: %s", root)
	}
	if !fi.IsDir() {
		return Errorf("Not a directory: %s", root)
	}
	q.root = root
	if err := q.compile(); err != nil {
		return Errorf("%v", err)
	}

	var found []string
	var more bool
	external := false
	// fd knows nothing of what the sandbox hides.
	if t.env.UseExternal && q.hidden == nil {
		if fd := lookPath("fd", t.env.Environ); fd != "" {
			found, more, external = q.fdSearch(ctx, fd, t.env.Environ)
		}
	}
	if !external {
		found, more = q.search(ctx)
	}
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}
	if len(found) == 0 {
		return TextResult("No files found matching pattern", nil)
	}
	var h headCollector
	for _, f := range found {
		h.add(f)
	}
	text, tr := h.finish()
	var notices []string
	var d FindDetails
	if more {
		notices = append(notices, fmt.Sprintf("%d results limit reached. Use limit=%d for more, or refine pattern", q.limit, q.limit*2))
		d.ResultLimitReached = q.limit
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

// compile follows fd's reading of a glob, which is what pi runs: a
// pattern without '/' matches file names; one with '/' matches the whole
// path, anywhere below (an implicit leading "**/"). Like fd, matching is
// case-insensitive unless the pattern has an upper-case letter.
func (q *findQuery) compile() error {
	pat := q.pattern
	if strings.Contains(pat, "/") {
		q.fullPath = true
		if !strings.HasPrefix(pat, "/") && !strings.HasPrefix(pat, "**/") && pat != "**" {
			pat = "**/" + pat
		}
	}
	m, err := compileGlob(pat, true, !hasUpper(q.pattern))
	if err != nil {
		return err
	}
	q.m = m
	return nil
}

func (q *findQuery) matches(e *walkEntry) bool {
	if q.fullPath {
		return q.m.match(e.abs)
	}
	return q.m.match(e.name)
}

// search walks the tree and returns up to limit matches, relative to the
// root with directories marked by a trailing '/', and whether there were
// more.
func (q *findQuery) search(ctx context.Context) ([]string, bool) {
	var found []string
	more := false
	_ = walkTree(ctx, q.root, q.hidden, func(e *walkEntry) (bool, error) {
		if q.matches(e) {
			if len(found) == q.limit {
				more = true
				return false, errStopWalk
			}
			if e.isDir() {
				found = append(found, e.rel+"/")
			} else {
				found = append(found, e.rel)
			}
		}
		return true, nil
	})
	return found, more
}
