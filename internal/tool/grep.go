package tool

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentd-dev/agentd/internal/llm"
)

const (
	defaultGrepLimit = 100
	// maxGrepContext bounds context lines; past the output byte limit
	// more context could never be shown anyway.
	maxGrepContext = 50000
)

// grepInMemory is the largest file searched as one buffer; bigger files
// are streamed line by line.
const grepInMemory int64 = 64 << 20

type grepTool struct {
	env Env
	// inMemory is the in-memory threshold; tests lower it to exercise
	// streaming on small files.
	inMemory int64
}

// GrepDetails are the details of a grep result, in pi's shape.
type GrepDetails struct {
	Truncation *Truncation `json:"truncation,omitempty"`
	// MatchLimitReached is the limit, when more matches existed.
	MatchLimitReached int `json:"matchLimitReached,omitempty"`
	// LinesTruncated is set when some lines were cut to MaxGrepLineChars.
	LinesTruncated bool `json:"linesTruncated,omitempty"`
}

func (t *grepTool) Spec() llm.Tool { return grepSpec() }

// grepQuery is a validated grep call.
type grepQuery struct {
	pattern    string
	root       string // absolute search path
	isDir      bool
	hidden     func(rel string, isDir bool) bool // what the sandbox hides (nil: nothing)
	glob       string
	ignoreCase bool
	literal    bool
	context    int
	limit      int
	inMemory   int64

	line  *regexp.Regexp // matches one line
	multi *regexp.Regexp // (?m) form for whole-buffer prefiltering; nil when unsafe
	// foldLit is set for a case-insensitive search for ASCII literal text
	// (the common "find this identifier, any case"): Go's regexp is slow
	// at case folding, so candidates are found with bytes.Index on an
	// ASCII-lowered copy and only their lines go through the regexp.
	foldLit string
	globs   *globFilter
}

func (t *grepTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("grep", call.Args)
	q := grepQuery{inMemory: t.inMemory}
	q.pattern, _ = a.str("pattern", true)
	path, _ := a.str("path", false)
	q.glob, _ = a.str("glob", false)
	q.ignoreCase, _ = a.boolean("ignoreCase")
	q.literal, _ = a.boolean("literal")
	c, _ := a.num("context")
	limit, hasLimit := a.num("limit")
	if r, bad := a.failed(); bad {
		return r
	}
	q.context = clampInt(c, 0, maxGrepContext)
	q.limit = defaultGrepLimit
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
	q.root, q.isDir = root, fi.IsDir()
	if !q.isDir && !fi.Mode().IsRegular() {
		return Errorf("%s is not a regular file or directory", root)
	}
	if msg := q.compile(); msg != "" {
		return Errorf("%s", msg)
	}
	if q.glob != "" {
		if q.globs, err = newGlobFilter(q.glob); err != nil {
			return Errorf("%v", err)
		}
	}

	// rg knows nothing of what the sandbox hides.
	if t.env.UseExternal && q.hidden == nil {
		if rg := lookPath("rg", t.env.Environ); rg != "" {
			if res, ok := q.rgSearch(ctx, rg, t.env.Environ); ok {
				return res.result(ctx, &q)
			}
		}
	}
	res := q.search(ctx)
	return res.result(ctx, &q)
}

// compile prepares the regexps, returning a message for the model when
// the pattern is invalid.
func (q *grepQuery) compile() string {
	src := q.pattern
	if q.literal {
		src = regexp.QuoteMeta(src)
	}
	flags := ""
	if q.ignoreCase {
		flags = "(?i)"
	}
	re, err := regexp.Compile(flags + src)
	if err != nil {
		return fmt.Sprintf("Invalid regular expression %q: %s", q.pattern, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	q.line = re
	// Matching a whole file at once and then checking only the lines it
	// hits is far faster than a regexp call per line. It finds every
	// matching line as long as the pattern does not use \A or \z, which
	// mean line start/end per line but file start/end in a buffer.
	if parsed, err := syntax.Parse(flags+src, syntax.Perl); err == nil && !usesTextAnchors(parsed) {
		q.multi, _ = regexp.Compile("(?m)" + flags + src)
		if parsed = parsed.Simplify(); q.ignoreCase && parsed.Op == syntax.OpLiteral && isASCII(string(parsed.Rune)) {
			q.foldLit = strings.ToLower(string(parsed.Rune))
		}
	}
	return ""
}

// foldTraps are the only non-ASCII characters that case-fold to ASCII
// letters (KELVIN SIGN to k, LONG S to s). A file containing one, searched
// for a literal with that letter, is left to the regexp, which folds it
// correctly; an ASCII-lowered copy would miss the match.
var foldTraps = []struct {
	letter byte
	utf8   []byte
}{{'k', []byte("\u212a")}, {'s', []byte("\u017f")}}

var lowerPool = sync.Pool{New: func() any { return new([]byte) }}

func asciiLower(dst, src []byte) []byte {
	dst = append(dst[:0], src...)
	for i, c := range dst {
		if 'A' <= c && c <= 'Z' {
			dst[i] = c + ('a' - 'A')
		}
	}
	return dst
}

func usesTextAnchors(re *syntax.Regexp) bool {
	if re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText {
		return true
	}
	for _, s := range re.Sub {
		if usesTextAnchors(s) {
			return true
		}
	}
	return false
}

// globFilter is grep's glob option with ripgrep's meaning: a glob without
// '/' tests the file name, one with '/' the path below the search root; a
// leading '!' excludes instead (and can prune directories).
type globFilter struct {
	m       *globMatcher
	negate  bool
	hasPath bool
}

func newGlobFilter(glob string) (*globFilter, error) {
	f := &globFilter{}
	if rest, ok := strings.CutPrefix(glob, "!"); ok {
		f.negate, glob = true, rest
	}
	glob = strings.TrimPrefix(glob, "./")
	f.hasPath = strings.Contains(glob, "/")
	glob = strings.TrimPrefix(glob, "/")
	m, err := compileGlob(glob, true, false)
	if err != nil {
		return nil, err
	}
	f.m = m
	return f, nil
}

// allows reports whether the file (or directory) passes the filter.
func (f *globFilter) allows(rel, name string, isDir bool) bool {
	if f == nil {
		return true
	}
	target := name
	if f.hasPath {
		target = rel
	}
	hit := f.m.match(target)
	if f.negate {
		return !hit
	}
	// An inclusion glob selects files; directories are always entered.
	return isDir || hit
}

// grepHit is one match: the block of output lines (context included) it
// contributes, and whether any of them was cut for length.
type grepHit struct {
	block []string
	cut   bool
}

// fileHits is what searching one file produced.
type fileHits struct {
	hits []grepHit
}

// grepResult is a finished search, before formatting.
type grepResult struct {
	hits           []grepHit
	more           bool // matches beyond the limit exist
	linesTruncated bool
	failure        string // set when the search itself failed
}

func (r *grepResult) result(ctx context.Context, q *grepQuery) Result {
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}
	if r.failure != "" {
		return Errorf("%s", r.failure)
	}
	if len(r.hits) == 0 {
		return TextResult("No matches found", nil)
	}
	var h headCollector
	for _, hit := range r.hits {
		for _, l := range hit.block {
			h.add(l)
		}
	}
	text, tr := h.finish()
	var notices []string
	var d GrepDetails
	if r.more {
		notices = append(notices, fmt.Sprintf("%d matches limit reached. Use limit=%d for more, or refine pattern", q.limit, q.limit*2))
		d.MatchLimitReached = q.limit
	}
	if tr.Truncated {
		notices = append(notices, formatSize(MaxBytes)+" limit reached")
		d.Truncation = &tr
	}
	if r.linesTruncated {
		notices = append(notices, fmt.Sprintf("Some lines truncated to %d chars. Use read tool to see full lines", MaxGrepLineChars))
		d.LinesTruncated = true
	}
	if len(notices) == 0 {
		return TextResult(text, nil)
	}
	return TextResult(text+"\n\n["+strings.Join(notices, ". ")+"]", d)
}

// search runs the pure-Go grep: files are found by walkTree and searched
// by a pool of workers, but results are taken strictly in walk order, so
// output is deterministic and the limit cuts at the same place every
// time. The walker runs at most a window ahead of the consumer, which
// bounds memory and the work wasted once the limit is reached.
func (q *grepQuery) search(ctx context.Context) grepResult {
	var res grepResult
	want := q.limit + 1 // one more than shown tells whether there are more
	if !q.isDir {
		fh, err := q.searchFile(ctx, q.root, filepath.Base(q.root), want, new([]byte))
		if err != nil && ctx.Err() == nil {
			return grepResult{failure: fmt.Sprintf("Cannot read %s: %v", q.root, unwrapPathError(err))}
		}
		res.add(fh, q.limit)
		return res
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := max(1, min(runtime.GOMAXPROCS(0), 16))
	window := workers * 4

	type job struct {
		abs, rel string
		out      chan fileHits
	}
	jobs := make(chan *job, window)
	order := make(chan *job, window)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(jobs)
		defer close(order)
		_ = walkTree(ctx, q.root, q.hidden, func(e *walkEntry) (bool, error) {
			if e.isDir() {
				return q.globs.allows(e.rel, e.name, true), nil
			}
			if !e.typ.IsRegular() || !q.globs.allows(e.rel, e.name, false) {
				return false, nil
			}
			j := &job{abs: e.abs, rel: e.rel, out: make(chan fileHits, 1)}
			select {
			case order <- j:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			select {
			case jobs <- j:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			return false, nil
		})
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One read buffer per worker: matches are copied out as
			// strings, so the buffer is free again after each file.
			buf := new([]byte)
			for j := range jobs {
				if ctx.Err() != nil {
					j.out <- fileHits{}
					continue
				}
				// Unreadable files are skipped, as rg does with a warning.
				fh, _ := q.searchFile(ctx, j.abs, j.rel, want, buf)
				j.out <- fh
			}
		}()
	}
	for j := range order {
		var fh fileHits
		select {
		case fh = <-j.out:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		res.add(fh, q.limit)
		if res.more {
			break
		}
	}
	cancel()
	// Drain so the walker, blocked on a full channel, sees the cancel.
	for range order {
	}
	wg.Wait()
	return res
}

func (r *grepResult) add(fh fileHits, limit int) {
	for _, h := range fh.hits {
		if len(r.hits) == limit {
			r.more = true
			return
		}
		r.hits = append(r.hits, h)
		// Only lines that are shown count as cut.
		r.linesTruncated = r.linesTruncated || h.cut
	}
}

// searchFile finds up to max matching lines in one file. Files with a NUL
// byte are binary and skipped, as ripgrep skips them.
func (q *grepQuery) searchFile(ctx context.Context, abs, display string, max int, buf *[]byte) (fileHits, error) {
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fileHits{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileHits{}, err
	}
	if !fi.Mode().IsRegular() {
		return fileHits{}, nil
	}
	if fi.Size() > q.inMemory {
		return q.searchStream(ctx, f, display, max)
	}
	if int64(cap(*buf)) < fi.Size()+1 {
		*buf = make([]byte, 0, fi.Size()+1)
	}
	data := (*buf)[:0]
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return fileHits{}, err
		}
		if len(data) == cap(data) {
			// The file grew while we read it.
			data = append(data, 0)[:len(data)]
		}
	}
	*buf = data[:0]
	if bytes.IndexByte(data, 0) >= 0 {
		return fileHits{}, nil
	}
	return q.searchBuffer(data, display, max), nil
}

func (q *grepQuery) searchBuffer(data []byte, display string, max int) fileHits {
	if q.foldLit != "" {
		usable := true
		for _, t := range foldTraps {
			if strings.IndexByte(q.foldLit, t.letter) >= 0 && bytes.Contains(data, t.utf8) {
				usable = false
			}
		}
		if usable {
			return q.searchFolded(data, display, max)
		}
	}
	var fh fileHits
	lineNo, counted := 1, 0
	for pos := 0; pos < len(data) && len(fh.hits) < max; {
		ls := pos
		if q.multi != nil {
			loc := q.multi.FindIndex(data[pos:])
			if loc == nil {
				break
			}
			ls = pos + bytes.LastIndexByte(data[pos:pos+loc[0]], '\n') + 1
		}
		le := bytes.IndexByte(data[ls:], '\n')
		if le < 0 {
			le = len(data)
		} else {
			le += ls
		}
		lineNo += bytes.Count(data[counted:ls], []byte{'\n'})
		counted = ls
		if q.line.Match(data[ls:le]) {
			var h grepHit
			h.block = q.block(data, ls, le, lineNo, display, &h.cut)
			fh.hits = append(fh.hits, h)
		}
		pos = le + 1
	}
	return fh
}

// searchFolded is searchBuffer for foldLit: candidates come from an
// ASCII-lowered copy (same length, so offsets carry over).
func (q *grepQuery) searchFolded(data []byte, display string, max int) fileHits {
	bp := lowerPool.Get().(*[]byte)
	defer lowerPool.Put(bp)
	*bp = asciiLower(*bp, data)
	lower := *bp
	lit := []byte(q.foldLit)
	var fh fileHits
	lineNo, counted := 1, 0
	for pos := 0; pos < len(data) && len(fh.hits) < max; {
		i := bytes.Index(lower[pos:], lit)
		if i < 0 {
			break
		}
		ls := pos + bytes.LastIndexByte(data[pos:pos+i], '\n') + 1
		le := bytes.IndexByte(data[ls:], '\n')
		if le < 0 {
			le = len(data)
		} else {
			le += ls
		}
		lineNo += bytes.Count(data[counted:ls], []byte{'\n'})
		counted = ls
		if q.line.Match(data[ls:le]) {
			var h grepHit
			h.block = q.block(data, ls, le, lineNo, display, &h.cut)
			fh.hits = append(fh.hits, h)
		}
		pos = le + 1
	}
	return fh
}

// block formats a match at [ls, le) (line lineNo) with its context lines,
// in pi's format: "path:N: text" for the match, "path-N- text" around it.
func (q *grepQuery) block(data []byte, ls, le, lineNo int, display string, cut *bool) []string {
	if q.context == 0 {
		return []string{q.formatLine(display, lineNo, ':', data[ls:le], cut)}
	}
	start, first := ls, lineNo
	for k := 0; k < q.context && start > 0; k++ {
		start = bytes.LastIndexByte(data[:start-1], '\n') + 1
		first--
	}
	out := make([]string, 0, 2*q.context+1)
	n := first
	for p := start; p < len(data) && n <= lineNo+q.context; n++ {
		e := bytes.IndexByte(data[p:], '\n')
		if e < 0 {
			e = len(data)
		} else {
			e += p
		}
		sep := byte('-')
		if n == lineNo {
			sep = ':'
		}
		out = append(out, q.formatLine(display, n, sep, data[p:e], cut))
		p = e + 1
	}
	return out
}

func (q *grepQuery) formatLine(display string, n int, sep byte, line []byte, cut *bool) string {
	return formatGrepLine(display, n, sep, line, cut)
}

func formatGrepLine(display string, n int, sep byte, line []byte, cut *bool) string {
	text := strings.ToValidUTF8(strings.ReplaceAll(string(line), "\r", ""), "\uFFFD")
	text, wasCut := truncateLine(text, MaxGrepLineChars)
	if wasCut {
		*cut = true
	}
	return display + string(sep) + strconv.Itoa(n) + string(sep) + " " + text
}

// searchStream handles files too big to hold: one pass line by line,
// keeping the last few lines for context before a match and open blocks
// waiting for the context after it.
func (q *grepQuery) searchStream(ctx context.Context, f *os.File, display string, max int) (fileHits, error) {
	var fh fileHits
	r := bufio.NewReaderSize(f, 256<<10)
	if head, _ := r.Peek(binarySniff); bytes.IndexByte(head, 0) >= 0 {
		return fh, nil
	}
	type prior struct {
		n    int
		text string
	}
	var before []prior // ring of up to q.context lines
	type open struct {
		hit  int // index in fh.hits
		left int // context lines still wanted
	}
	var pending []open
	var buf []byte
	for n := 1; ; n++ {
		if n&4095 == 0 && ctx.Err() != nil {
			return fh, ctx.Err()
		}
		var nl bool
		var err error
		buf, _, nl, err = nextLine(ctx, r, buf[:0], true, MaxGrepLineChars*4+1)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fh, err
		}
		line := buf
		// Matching sees at most the kept prefix of a giant line; such
		// lines are minified blobs where a prefix match is what rg's
		// output would show anyway.
		for i := 0; i < len(pending); {
			p := &pending[i]
			h := &fh.hits[p.hit]
			h.block = append(h.block, q.formatLine(display, n, '-', line, &h.cut))
			p.left--
			if p.left == 0 {
				pending = append(pending[:i], pending[i+1:]...)
				continue
			}
			i++
		}
		if len(fh.hits) < max && q.line.Match(line) {
			h := grepHit{block: make([]string, 0, 2*q.context+1)}
			for _, b := range before {
				h.block = append(h.block, q.formatLine(display, b.n, '-', []byte(b.text), &h.cut))
			}
			h.block = append(h.block, q.formatLine(display, n, ':', line, &h.cut))
			fh.hits = append(fh.hits, h)
			if q.context > 0 {
				pending = append(pending, open{hit: len(fh.hits) - 1, left: q.context})
			}
		}
		if len(fh.hits) >= max && len(pending) == 0 {
			break
		}
		if q.context > 0 {
			if len(before) == q.context {
				before = append(before[:0], before[1:]...)
			}
			before = append(before, prior{n: n, text: string(line)})
		}
		if !nl {
			break
		}
	}
	return fh, nil
}

// headCollector builds head-truncated output line by line without holding
// more than the byte limit: the same result as joining everything and
// truncating, in bounded memory.
type headCollector struct {
	b        strings.Builder
	lines    int
	bytes    int
	outLines int
	full     bool
	first    bool // the first line alone was over the limit
}

func (h *headCollector) add(line string) {
	lb := len(line)
	if h.lines > 0 {
		lb++
	}
	h.lines++
	h.bytes += lb
	if h.full {
		return
	}
	if h.b.Len()+lb > MaxBytes {
		h.full = true
		h.first = h.outLines == 0
		return
	}
	if h.outLines > 0 {
		h.b.WriteByte('\n')
	}
	h.b.WriteString(line)
	h.outLines++
}

func (h *headCollector) finish() (string, Truncation) {
	tr := Truncation{
		TotalLines:  h.lines,
		TotalBytes:  h.bytes,
		OutputLines: h.outLines,
		OutputBytes: h.b.Len(),
		MaxLines:    unlimitedLines,
		MaxBytes:    MaxBytes,
	}
	if h.full {
		tr.Truncated, tr.TruncatedBy, tr.FirstLineExceedsLimit = true, "bytes", h.first
	}
	return h.b.String(), tr
}
