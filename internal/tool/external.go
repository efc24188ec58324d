package tool

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The external accelerators run ripgrep and fd the way pi does, when the
// session opts in and they are installed. Whenever one cannot run or
// fails (a pattern Rust's regex rejects, an old version without a flag),
// the caller falls back to the built-in search, so enabling them can only
// change speed and, for ties, the order of results.

// rgEvent is the part of ripgrep's --json output used here.
type rgEvent struct {
	Type string `json:"type"`
	Data struct {
		Path       rgText `json:"path"`
		Lines      rgText `json:"lines"`
		LineNumber int    `json:"line_number"`
	} `json:"data"`
}

// rgText is ripgrep's encoding of possibly non-UTF-8 data.
type rgText struct {
	Text  *string `json:"text"`
	Bytes string  `json:"bytes"`
}

func (t rgText) String() string {
	if t.Text != nil {
		return *t.Text
	}
	b, _ := base64.StdEncoding.DecodeString(t.Bytes)
	return string(b)
}

// rgSearch runs ripgrep. ok is false when the built-in search should run
// instead.
func (q *grepQuery) rgSearch(ctx context.Context, rg string, environ []string) (grepResult, bool) {
	args := []string{"--json", "--line-number", "--color=never", "--hidden", "--no-config",
		"--no-require-git", "--glob", "!.git"}
	if q.ignoreCase {
		args = append(args, "--ignore-case")
	}
	if q.literal {
		args = append(args, "--fixed-strings")
	}
	if q.glob != "" {
		args = append(args, "--glob", q.glob)
	}
	if q.context > 0 {
		args = append(args, "--context", strconv.Itoa(q.context))
	}
	args = append(args, "--", q.pattern, q.root)
	cmd := exec.Command(rg, args...)
	cmd.Env = environ
	cmd.Dir = q.root
	if !q.isDir {
		cmd.Dir = filepath.Dir(q.root)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return grepResult{}, false
	}
	if err := cmd.Start(); err != nil {
		return grepResult{}, false
	}
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()

	type pending struct {
		path  string
		line  int
		text  string
		match bool
	}
	// Collect the events of each file, then build pi-style blocks: one
	// per match, with its context (rg prints shared context only once).
	var res grepResult
	var cur []pending
	curPath := ""
	killed := false
	flush := func() {
		if len(cur) == 0 {
			return
		}
		lines := make(map[int]string, len(cur))
		for _, p := range cur {
			lines[p.line] = p.text
		}
		display := q.displayPath(curPath)
		for _, p := range cur {
			if !p.match {
				continue
			}
			if len(res.hits) == q.limit {
				res.more = true
				break
			}
			var h grepHit
			for n := p.line - q.context; n <= p.line+q.context; n++ {
				text, ok := lines[n]
				if !ok {
					continue
				}
				sep := byte('-')
				if n == p.line {
					sep = ':'
				}
				text = strings.TrimSuffix(strings.TrimSuffix(text, "\n"), "\r")
				h.block = append(h.block, formatGrepLine(display, n, sep, []byte(text), &h.cut))
			}
			res.hits = append(res.hits, h)
			res.linesTruncated = res.linesTruncated || h.cut
		}
		cur = cur[:0]
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev rgEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "begin":
			flush()
			curPath = ev.Data.Path.String()
		case "match", "context":
			cur = append(cur, pending{path: curPath, line: ev.Data.LineNumber, text: ev.Data.Lines.String(), match: ev.Type == "match"})
		case "end":
			flush()
		}
		if res.more {
			killed = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			break
		}
	}
	flush()
	if killed {
		// Drain so rg is not blocked writing while we wait for it.
		for sc.Scan() {
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil || killed {
		return res, true
	}
	if ee, isExit := err.(*exec.ExitError); err != nil && (!isExit || ee.ExitCode() != 1) && len(res.hits) == 0 {
		return grepResult{}, false
	}
	return res, true
}

// displayPath is how a matched file is named in grep output: relative to
// the searched directory, or the bare name when one file was searched.
func (q *grepQuery) displayPath(p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(q.root, p)
	}
	if q.isDir {
		if rel, err := filepath.Rel(q.root, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.ToSlash(rel)
		}
	}
	return filepath.Base(p)
}

// fdSearch runs fd. ok is false when the built-in search should run
// instead.
func (q *findQuery) fdSearch(ctx context.Context, fd string, environ []string) (found []string, more, ok bool) {
	pat := q.pattern
	args := []string{"--glob", "--color=never", "--hidden", "--no-require-git", "--exclude", ".git",
		"--max-results", strconv.Itoa(q.limit + 1)}
	if q.fullPath {
		args = append(args, "--full-path")
		if !strings.HasPrefix(pat, "/") && !strings.HasPrefix(pat, "**/") && pat != "**" {
			pat = "**/" + pat
		}
	}
	args = append(args, "--", pat, q.root)
	cmd := exec.CommandContext(ctx, fd, args...)
	cmd.Env = environ
	cmd.Dir = q.root
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, false, true
	}
	if err != nil {
		return nil, false, false
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" {
			continue
		}
		dir := strings.HasSuffix(line, "/")
		abs := strings.TrimSuffix(line, "/")
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(q.root, abs)
		}
		rel, err := filepath.Rel(q.root, abs)
		if err != nil || rel == "." {
			continue
		}
		if !dir {
			// Older fd versions do not mark directories.
			if fi, err := os.Lstat(abs); err == nil && fi.IsDir() {
				dir = true
			}
		}
		rel = filepath.ToSlash(rel)
		if dir {
			rel += "/"
		}
		found = append(found, rel)
	}
	// fd searches in parallel; sorting makes the answer repeatable.
	sort.Strings(found)
	if len(found) > q.limit {
		found, more = found[:q.limit], true
	}
	return found, more, true
}
