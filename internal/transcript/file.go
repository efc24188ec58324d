package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/atomicfile"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Errors returned by File. Match them with errors.Is.
var (
	ErrNotFound    = errors.New("transcript: entry not found")
	ErrClosed      = errors.New("transcript: file closed")
	ErrNoHeader    = errors.New("transcript: not a session file (no session header)")
	ErrCorrupt     = errors.New("transcript: corrupt session file")
	ErrNotUser     = errors.New("transcript: entry is not a user message")
	ErrExists      = errors.New("transcript: session file already exists")
	ErrInvalidJSON = errors.New("transcript: invalid JSON")
	// ErrSyncFailed is sticky: after an fsync fails the File refuses
	// appends, since the kernel may have dropped the unsynced data and a
	// later fsync would report success anyway. The entry whose sync
	// failed may or may not be in the file; reopen it to continue.
	ErrSyncFailed = errors.New("transcript: fsync failed; reopen the session to continue")
)

// SyncPolicy says which appends are fsync'd before Append returns.
type SyncPolicy int

const (
	// SyncMessages fsyncs entries that carry conversation: message,
	// custom_message, compaction and branch_summary. Settings entries
	// (model and thinking changes, labels, names, extension state) ride on
	// the next such fsync, so a crash can lose the last few of them but
	// never a message that Append reported written. The write that
	// creates the file is synced, with its directory, under this policy
	// and SyncAlways. The default.
	SyncMessages SyncPolicy = iota
	// SyncAlways fsyncs every entry.
	SyncAlways
	// SyncNever leaves flushing to the kernel; a crash of the machine (not
	// of agentd) can lose recent entries. For tests and throwaway sessions.
	SyncNever
)

// Option configures Create, CreateAt and Open.
type Option func(*options)

type options struct {
	sync          SyncPolicy
	strict        bool
	now           func() time.Time
	parentSession string
	mirror        func(lines []byte) error
}

// WithSync sets the fsync policy (default SyncMessages).
func WithSync(p SyncPolicy) Option { return func(o *options) { o.sync = p } }

// WithStrict makes Open fail on a garbled line in the middle of a file
// instead of skipping it with a warning as pi does. A torn last line is
// dropped in both modes: it is what a crash mid-append leaves.
func WithStrict() Option { return func(o *options) { o.strict = true } }

// WithClock sets where timestamps come from (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithParentSession records, in a new session's header, the path of the
// session it continues (pi's newSession({parentSession})).
func WithParentSession(path string) Option {
	return func(o *options) { o.parentSession = path }
}

// WithMirror has every write of the session also go to mirror, before the
// file: a cluster keeps the session in a replicated log so another node
// can take it over. mirror receives the bytes of one write as they go to
// the file: one or more whole lines, each ending in '\n'; it must not keep
// them after it returns. A write that starts with the header line is the
// whole file and replaces everything mirrored before: the first write of a
// new file, the rewrite of a migrated one, the whole file of a fork or
// clone (which keep the mirror: in agentd they continue the same session),
// and the first append to a file Open read with a mirror, which is
// rewritten whole through the mirror since the mirror may not hold it
// (a session switched to another file). Every other write is one entry.
//
// If mirror fails the append fails and the file is not touched, as for a
// disk error; if the disk write fails after mirror succeeded, the mirror
// holds an entry the file lacks (a reader of the mirror sees it as a
// sibling of the next entry). mirror runs with the session's write lock
// held, so the writes of one session reach it one at a time and in order.
func WithMirror(mirror func(lines []byte) error) Option {
	return func(o *options) { o.mirror = mirror }
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// File is one session: its header and entry tree in memory, and the JSONL
// file they live in. All methods are safe for concurrent use.
//
// Appends are serialised and each is one write(2) of one complete line to
// an O_APPEND descriptor, so the file is always a prefix of whole lines
// plus, after a crash, at most one torn line, which Open drops. Readers are
// never blocked behind an fsync: the tree is only locked to insert an entry
// after its line is on disk.
type File struct {
	// wmu serialises everything that changes the session (appends,
	// SetLeaf, Close) and owns the descriptor and the fields after
	// "file state". Held across write and fsync.
	wmu sync.Mutex
	// mu guards the tree. Writers hold wmu too, so code holding wmu may
	// read the tree without mu.
	mu sync.RWMutex

	path   string
	opts   options
	header Header

	entries  []*Entry // file order; an *Entry never changes once added
	byID     map[string]*Entry
	children map[string][]*Entry // by ParentID; "" holds the roots
	labels   map[string]labelInfo
	labelSeq []string // label targets in the order pi's Map would iterate
	leaf     string
	warnings []string

	// memory: the session is never written anywhere (pi's --no-session);
	// Path is "".
	memory bool

	// file state
	fd           *os.File
	headerOnDisk bool  // the file exists and starts with the header
	size         int64 // bytes of whole lines; anything past it is garbage
	truncate     bool  // drop the bytes past size before the next write
	needNewline  bool  // the last line has no '\n' (written by someone else)
	rewrite      bool  // migrated in memory; the file must be rewritten first
	dirty        bool  // written since the last fsync
	closed       bool
	err          error // sticky: set when an fsync fails
	buf          []byte
}

type labelInfo struct{ label, timestamp string }

func newFile(path string, h Header, o options) *File {
	return &File{
		path:     path,
		opts:     o,
		header:   h,
		byID:     make(map[string]*Entry),
		children: make(map[string][]*Entry),
		labels:   make(map[string]labelInfo),
	}
}

// Create starts a new session for cwd in pi's layout under the sessions
// root: SessionDir(root, cwd)/<timestamp>_<uuid>.jsonl. The directory is
// created now; the file is created by the first append, which writes the
// header and that entry in one write. A session nobody wrote to leaves no
// file behind.
func Create(root, cwd string, opts ...Option) (*File, error) {
	o := buildOptions(opts)
	now := o.now()
	h := Header{Version: CurrentVersion, ID: newSessionID(now), Timestamp: formatISO(now), Cwd: cwd, ParentSession: o.parentSession}
	dir := SessionDir(root, cwd)
	if err := mkdirDurable(dir); err != nil {
		return nil, err
	}
	return newFile(filepath.Join(dir, fileName(h.Timestamp, h.ID)), h, o), nil
}

// NewMemory starts a session that lives in memory only, as pi's
// --no-session: every append builds the tree and nothing touches the
// disk. Path is "". Forks and clones of it stay in memory too.
func NewMemory(cwd string, opts ...Option) *File {
	o := buildOptions(opts)
	now := o.now()
	h := Header{Version: CurrentVersion, ID: newSessionID(now), Timestamp: formatISO(now), Cwd: cwd, ParentSession: o.parentSession}
	f := newFile("", h, o)
	f.memory = true
	return f
}

// CreateAt starts a new session that will live at path (pi's
// --session <path> for a path that does not exist yet). It fails with
// ErrExists if the file is already there.
func CreateAt(path, cwd string, opts ...Option) (*File, error) {
	o := buildOptions(opts)
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(abs); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, abs)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := mkdirDurable(filepath.Dir(abs)); err != nil {
		return nil, err
	}
	now := o.now()
	h := Header{Version: CurrentVersion, ID: newSessionID(now), Timestamp: formatISO(now), Cwd: cwd, ParentSession: o.parentSession}
	return newFile(abs, h, o), nil
}

// Open loads a session file. It does not write to it: repairs (dropping a
// torn last line) and the rewrite of a migrated v1/v2 file happen on the
// first append, so reading a session for listing or export never changes
// it. Lines pi would skip are skipped and reported by Warnings.
func Open(path string, opts ...Option) (*File, error) {
	o := buildOptions(opts)
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	data, _, err := readRegular(abs, 0)
	if err != nil {
		return nil, err
	}
	f := newFile(abs, Header{}, o)
	if err := f.load(data); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	if o.mirror != nil {
		// The mirror may hold another file for this session (or none):
		// the first append sends this one whole. See WithMirror.
		f.rewrite = true
	}
	return f, nil
}

// badLine is a line that did not decode.
type badLine struct {
	line int
	err  error
}

// parallelChunk is the least data worth a goroutine when opening a file.
// A variable so tests can exercise the parallel path with small files.
var parallelChunk = 512 << 10

// parseLines decodes every non-blank line of data. Long files are split
// at line boundaries and decoded on all cores: decoding is most of the
// cost of opening a session, and resuming a long one should not wait on
// one core.
func parseLines(data []byte) ([]record, []badLine) {
	n := min(runtime.GOMAXPROCS(0), len(data)/parallelChunk)
	if n <= 1 {
		return parseChunk(data, 0, 0)
	}
	starts := []int{0}
	for i := 1; i < n; i++ {
		at := max(i*len(data)/n, starts[len(starts)-1])
		nl := bytes.IndexByte(data[at:], '\n')
		if nl < 0 {
			break
		}
		starts = append(starts, at+nl+1)
	}
	starts = append(starts, len(data))
	type result struct {
		recs []record
		bad  []badLine
	}
	results := make([]result, len(starts)-1)
	// Line numbers of a chunk depend on the chunks before it.
	firstLine := make([]int, len(results))
	for i := 1; i < len(results); i++ {
		firstLine[i] = firstLine[i-1] + bytes.Count(data[starts[i-1]:starts[i]], []byte{'\n'})
	}
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, b := parseChunk(data[starts[i]:starts[i+1]], int64(starts[i]), firstLine[i])
			results[i] = result{r, b}
		}()
	}
	wg.Wait()
	var recs []record
	var bad []badLine
	for _, r := range results {
		recs = append(recs, r.recs...)
		bad = append(bad, r.bad...)
	}
	return recs, bad
}

// parseChunk decodes the lines of data, which starts at byte base of the
// file, after line number lineBase.
func parseChunk(data []byte, base int64, lineBase int) ([]record, []badLine) {
	var recs []record
	var bad []badLine
	in := new(interner)
	lineNo := lineBase
	for off := 0; off < len(data); {
		lineNo++
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			end += off
			next = end + 1
		} else {
			end = len(data)
		}
		line := data[off:end]
		off = next
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		p, err := parseLineWith(line, in, true)
		if err != nil {
			bad = append(bad, badLine{lineNo, err})
			continue
		}
		recs = append(recs, record{parsed: p, line: lineNo, end: base + int64(next)})
	}
	return recs, bad
}

// record is a line that decoded.
type record struct {
	parsed
	line int   // 1-based
	end  int64 // offset just past the line and its '\n'
}

// load builds the tree from a file's bytes.
func (f *File) load(data []byte) error {
	recs, bad := parseLines(data)
	if len(recs) == 0 || recs[0].header == nil {
		if len(recs) > 0 || len(bad) > 0 {
			return fmt.Errorf("%w: first line is not a session header", ErrNoHeader)
		}
		return fmt.Errorf("%w: empty file", ErrNoHeader)
	}
	last := recs[len(recs)-1]
	f.size = int64(len(data))
	for _, b := range bad {
		if b.line > last.line {
			// A torn append: everything after the last good line goes.
			f.size, f.truncate = last.end, true
			f.warnf("line %d: torn last line dropped (%v)", b.line, b.err)
			continue
		}
		if f.opts.strict {
			return fmt.Errorf("%w: line %d: %v", ErrCorrupt, b.line, b.err)
		}
		f.warnf("line %d: skipped: %v", b.line, b.err)
	}
	f.needNewline = f.size > 0 && data[f.size-1] != '\n'
	f.headerOnDisk = true

	f.header = *recs[0].header
	version := f.header.Version
	if version > CurrentVersion {
		f.warnf("session version %d is newer than %d; entries agentd does not know are kept as they are", version, CurrentVersion)
	}
	if version < CurrentVersion {
		f.migrate(recs, version)
	}
	for i := 1; i < len(recs); i++ {
		r := &recs[i]
		if r.header != nil {
			// pi can write a second header (it re-flushes everything if
			// it opens a file without an assistant message); like pi we
			// use the first.
			f.warnf("line %d: extra session header ignored", r.line)
			continue
		}
		e := r.entry
		if r.bodyErr != nil {
			f.warnf("line %d: %s entry %s kept as is: %v", r.line, e.Type, e.ID, r.bodyErr)
		}
		if e.ID == "" {
			if f.opts.strict {
				return fmt.Errorf("%w: line %d: entry without an id", ErrCorrupt, r.line)
			}
			f.warnf("line %d: entry without an id skipped", r.line)
			continue
		}
		if prev, ok := f.byID[e.ID]; ok {
			if sameEntry(prev, e) {
				continue // the duplicate pi's re-flush writes
			}
			f.warnf("line %d: duplicate entry id %s; the later entry wins", r.line, e.ID)
		}
		f.insert(e)
	}
	if err := f.checkTree(); err != nil {
		return err
	}
	return nil
}

// migrate brings a v1 or v2 file to v3 in memory, as pi does on load, and
// marks the file for rewriting before the next append: the ids v1
// migration invents must be on disk before new entries refer to them.
func (f *File) migrate(recs []record, version int) {
	if version < 2 {
		// v1 was a flat list: give every entry an id and chain them. A
		// compaction pointed at its first kept entry by index into the
		// file's lines (header included).
		taken := make(map[string]bool)
		prev := ""
		for i := range recs {
			e := recs[i].entry
			if e == nil {
				continue
			}
			e.ID = newEntryID(func(id string) bool { return taken[id] })
			taken[e.ID] = true
			e.ParentID = prev
			prev = e.ID
			if e.raw != nil {
				e.raw = spliceEnvelope(e.raw, e.ID, e.ParentID)
			}
		}
		for i := range recs {
			if idx := recs[i].firstKeptIndex; idx >= 0 && recs[i].entry != nil {
				if idx < len(recs) && recs[idx].entry != nil {
					recs[i].entry.FirstKeptEntryID = recs[idx].entry.ID
				}
			}
		}
	}
	// v2 → v3 renamed the message role hookMessage to custom, which
	// llm.Message's decoder already does.
	f.header.Version = CurrentVersion
	f.rewrite = true
	f.warnf("migrated from session version %d; the file is rewritten as version %d on the next append", version, CurrentVersion)
}

// spliceEnvelope adds id and parentId to an opaque v1 line, at the end of
// the object as pi's in-place migration does.
func spliceEnvelope(raw []byte, id, parentID string) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[len(raw)-1] != '}' {
		return raw
	}
	out := append([]byte(nil), raw[:len(raw)-1]...)
	if len(bytes.TrimSpace(out[1:])) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"id":`...)
	out = llm.AppendJSONString(out, id)
	out = append(out, `,"parentId":`...)
	if parentID == "" {
		out = append(out, "null"...)
	} else {
		out = llm.AppendJSONString(out, parentID)
	}
	return append(out, '}')
}

func sameEntry(a, b *Entry) bool {
	x, err1 := a.AppendJSON(nil)
	y, err2 := b.AppendJSON(nil)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// checkTree rejects parent cycles, which no writer produces and which
// would send pi into an endless loop, and notes orphans, which pi treats
// as roots.
func (f *File) checkTree() error {
	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]uint8, len(f.byID))
	var stack []string
	for id := range f.byID {
		for cur := id; cur != ""; {
			if s := state[cur]; s == done {
				break
			} else if s == visiting {
				return fmt.Errorf("%w: entry %s is its own ancestor", ErrCorrupt, cur)
			}
			state[cur] = visiting
			stack = append(stack, cur)
			e := f.byID[cur]
			if e.ParentID != "" && f.byID[e.ParentID] == nil {
				f.warnf("entry %s: parent %s not found; treated as a root", cur, e.ParentID)
				break
			}
			cur = e.ParentID
		}
		for _, s := range stack {
			state[s] = done
		}
		stack = stack[:0]
	}
	return nil
}

func (f *File) warnf(format string, args ...any) {
	f.warnings = append(f.warnings, fmt.Sprintf(format, args...))
}

// insert adds e to the tree and makes it the leaf. Callers hold mu for
// writing (or own f exclusively).
func (f *File) insert(e *Entry) {
	f.entries = append(f.entries, e)
	f.byID[e.ID] = e
	f.children[e.ParentID] = append(f.children[e.ParentID], e)
	f.leaf = e.ID
	if e.Type == TypeLabel && e.raw == nil {
		f.setLabel(e.TargetID, e.Label, e.Timestamp)
	}
}

// setLabel mirrors pi's labelsById Map, including its iteration order
// (first insertion; a cleared label loses its place), which decides the
// order of the label entries a fork re-creates.
func (f *File) setLabel(target, label, ts string) {
	_, had := f.labels[target]
	if label == "" {
		if had {
			delete(f.labels, target)
			for i, t := range f.labelSeq {
				if t == target {
					f.labelSeq = append(f.labelSeq[:i], f.labelSeq[i+1:]...)
					break
				}
			}
		}
		return
	}
	if !had {
		f.labelSeq = append(f.labelSeq, target)
	}
	f.labels[target] = labelInfo{label, ts}
}

// ---- identity -------------------------------------------------------------

// ID is the session id (a UUIDv7).
func (f *File) ID() string { return f.header.ID }

// Path is the absolute path of the session file. For a new session the
// file appears with the first append.
func (f *File) Path() string { return f.path }

// Cwd is the working directory recorded in the header.
func (f *File) Cwd() string { return f.header.Cwd }

// ParentSession is the path of the session this one was forked or cloned
// from, "" if none.
func (f *File) ParentSession() string { return f.header.ParentSession }

// Header returns the session header.
func (f *File) Header() Header { return f.header }

// Warnings lists what Open skipped, dropped or repaired, one line each.
func (f *File) Warnings() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]string(nil), f.warnings...)
}

// Name is the session's display name: that of the latest session_info
// entry in the file, on any branch, as pi reads it. "" if unnamed.
func (f *File) Name() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i := len(f.entries) - 1; i >= 0; i-- {
		if e := f.entries[i]; e.Type == TypeSessionInfo && e.raw == nil {
			return trimSpace(e.Name)
		}
	}
	return ""
}

// ---- tree -----------------------------------------------------------------

// Entries returns every entry in file order (the header excluded).
func (f *File) Entries() []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Entry, len(f.entries))
	for i, e := range f.entries {
		out[i] = *e
	}
	return out
}

// Len is the number of entries.
func (f *File) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.entries)
}

// Entry returns the entry with the given id.
func (f *File) Entry(id string) (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.byID[id]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Leaf is the id of the current position, the parent of the next append;
// "" before the first entry (or after SetLeaf("")).
func (f *File) Leaf() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.leaf
}

// SetLeaf moves the current position to id, so the next append starts a
// new branch there (pi's branch). "" moves before the first entry, so the
// next append is a new root (pi's resetLeaf). The file is not written:
// like pi, the position is implied by the last entry on reopening.
func (f *File) SetLeaf(id string) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if id != "" && f.byID[id] == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	f.mu.Lock()
	f.leaf = id
	f.mu.Unlock()
	return nil
}

// Branch returns the entries from the root to id, inclusive (pi's
// getBranch). Empty if id is "" or unknown.
func (f *File) Branch(id string) []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	path := f.branchLocked(id)
	out := make([]Entry, len(path))
	for i, e := range path {
		out[i] = *e
	}
	return out
}

func (f *File) branchLocked(id string) []*Entry {
	var path []*Entry
	// The bound only matters for a tree whose ancestry changed under a
	// duplicate id; Open rejects real cycles.
	for e := f.byID[id]; e != nil && len(path) <= len(f.entries); e = f.byID[e.ParentID] {
		path = append(path, e)
		if e.ParentID == "" {
			break
		}
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// Children returns the entries whose parent is id, in file order; "" gives
// the roots.
func (f *File) Children(id string) []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	kids := f.children[id]
	out := make([]Entry, 0, len(kids))
	for _, e := range kids {
		if f.byID[e.ID] == e { // skip entries shadowed by a duplicate id
			out = append(out, *e)
		}
	}
	return out
}

// Label returns the label set on an entry, "" if none.
func (f *File) Label(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.labels[id].label
}

// ---- appends ----------------------------------------------------------------

// AppendMessage records a message as a child of the leaf and makes it the
// leaf. The message is copied. Compaction and branch summaries are
// entries of their own (AppendCompaction, BranchWithSummary), as in pi.
func (f *File) AppendMessage(m *llm.Message) (string, error) {
	if m.Role == llm.RoleCompactionSummary || m.Role == llm.RoleBranchSummary {
		return "", fmt.Errorf("transcript: %s messages are recorded with AppendCompaction or BranchWithSummary", m.Role)
	}
	return f.append(&Entry{Type: TypeMessage, Message: m.Clone()})
}

// AppendModelChange records a switch of model.
func (f *File) AppendModelChange(provider, modelID string) (string, error) {
	return f.append(&Entry{Type: TypeModelChange, Provider: provider, ModelID: modelID})
}

// AppendThinkingLevelChange records a change of thinking level.
func (f *File) AppendThinkingLevelChange(level llm.ThinkingLevel) (string, error) {
	return f.append(&Entry{Type: TypeThinkingLevelChange, ThinkingLevel: level})
}

// AppendCompaction records a compaction: from now on the context is the
// summary, then the entries from firstKeptEntryID on. details may be nil.
func (f *File) AppendCompaction(summary, firstKeptEntryID string, tokensBefore int64, details json.RawMessage, fromHook bool) (string, error) {
	return f.append(&Entry{Type: TypeCompaction, Summary: summary, FirstKeptEntryID: firstKeptEntryID,
		TokensBefore: tokensBefore, Details: cloneJSON(details), FromHook: fromHook})
}

// BranchWithSummary moves the leaf to fromID ("" for before the first
// entry) and records there a summary of the branch being left (pi's
// branchWithSummary). details may be nil.
func (f *File) BranchWithSummary(fromID, summary string, details json.RawMessage, fromHook bool) (string, error) {
	from := fromID
	if from == "" {
		from = "root"
	}
	e := &Entry{Type: TypeBranchSummary, FromID: from, Summary: summary, Details: cloneJSON(details), FromHook: fromHook}
	return f.appendAt(e, fromID, true)
}

// AppendCustom records extension state. It is not part of the context.
// data may be nil.
func (f *File) AppendCustom(customType string, data json.RawMessage) (string, error) {
	return f.append(&Entry{Type: TypeCustom, CustomType: customType, Data: cloneJSON(data)})
}

// AppendCustomMessage records an extension message that is part of the
// context (as a custom message). details may be nil.
func (f *File) AppendCustomMessage(customType string, content []llm.Content, display bool, details json.RawMessage) (string, error) {
	return f.append(&Entry{Type: TypeCustomMessage, CustomType: customType,
		Content: append([]llm.Content(nil), content...), Display: display, Details: cloneJSON(details)})
}

// AppendLabel sets (or with "" clears) the label of an existing entry.
func (f *File) AppendLabel(targetID, label string) (string, error) {
	e := &Entry{Type: TypeLabel, TargetID: targetID, Label: label}
	if label == "" {
		e.noLabel = true // pi writes label: undefined, i.e. no field
	}
	return f.append(e)
}

// AppendSessionInfo sets the session's display name ("" clears it). Like
// pi it stores the name trimmed.
func (f *File) AppendSessionInfo(name string) (string, error) {
	return f.append(&Entry{Type: TypeSessionInfo, Name: trimSpace(name)})
}

func cloneJSON(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// checkRaw rejects caller-supplied JSON that is not valid. It is written
// into the line as is, and one bad byte would make the whole line, and
// the message in it, unreadable to agentd and pi alike.
func checkRaw(e *Entry) error {
	bad := func(what string, b []byte) error {
		if len(b) > 0 && !json.Valid(b) {
			return fmt.Errorf("%w: %s %.40q", ErrInvalidJSON, what, b)
		}
		return nil
	}
	if err := bad("details", e.Details); err != nil {
		return err
	}
	if err := bad("data", e.Data); err != nil {
		return err
	}
	if m := e.Message; m != nil {
		if err := bad("message details", m.Details); err != nil {
			return err
		}
		for i := range m.Content {
			if c := &m.Content[i]; c.Type == llm.ContentToolCall {
				if err := bad("arguments of tool call "+c.ID, c.Arguments); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (f *File) append(e *Entry) (string, error) { return f.appendAt(e, "", false) }

// appendAt writes e as a child of the leaf, or of parent if setParent, and
// makes it the leaf.
func (f *File) appendAt(e *Entry, parent string, setParent bool) (string, error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.closed {
		return "", ErrClosed
	}
	if f.err != nil {
		return "", f.err
	}
	if !setParent {
		parent = f.leaf
	} else if parent != "" && f.byID[parent] == nil {
		return "", fmt.Errorf("%w: %s", ErrNotFound, parent)
	}
	if e.Type == TypeLabel && f.byID[e.TargetID] == nil {
		return "", fmt.Errorf("%w: label target %s", ErrNotFound, e.TargetID)
	}
	if err := checkRaw(e); err != nil {
		return "", err
	}
	e.ID = newEntryID(func(id string) bool { return f.byID[id] != nil })
	e.ParentID = parent
	e.Timestamp = formatISO(f.opts.now())
	if err := f.write([]*Entry{e}, f.wantSync(e)); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.insert(e)
	f.mu.Unlock()
	return e.ID, nil
}

func (f *File) wantSync(e *Entry) bool {
	switch f.opts.sync {
	case SyncAlways:
		return true
	case SyncNever:
		return false
	}
	switch e.Type {
	case TypeMessage, TypeCustomMessage, TypeCompaction, TypeBranchSummary:
		return true
	}
	return false
}

// write puts new entries on disk, creating, repairing or rewriting the
// file first as needed. Called with wmu held.
func (f *File) write(newEntries []*Entry, doSync bool) error {
	if f.memory {
		return nil
	}
	if f.rewrite {
		all := append(append([]*Entry(nil), f.entries...), newEntries...)
		b, err := encodeFile(&f.header, all)
		if err != nil {
			return err
		}
		if f.opts.mirror != nil {
			if err := f.opts.mirror(b); err != nil {
				return err
			}
		}
		if err := atomicfile.Write(f.path, b, f.opts.sync != SyncNever); err != nil {
			return err
		}
		size := int64(len(b))
		if f.fd != nil {
			f.fd.Close()
			f.fd = nil
		}
		f.rewrite, f.truncate, f.needNewline, f.headerOnDisk = false, false, false, true
		f.size = size
		return nil
	}
	// Encode before touching the file, so an entry that cannot be
	// encoded leaves no trace.
	creating := !f.headerOnDisk
	b := f.buf[:0]
	if creating {
		b = f.header.AppendJSON(b)
		b = append(b, '\n')
	} else if f.needNewline {
		b = append(b, '\n')
	}
	for _, e := range newEntries {
		var err error
		if b, err = e.AppendJSON(b); err != nil {
			return err
		}
		b = append(b, '\n')
	}
	if cap(b) <= 1<<20 {
		f.buf = b[:0] // reuse, but do not hold on to a huge tool output
	}
	if f.opts.mirror != nil {
		if err := f.opts.mirror(b); err != nil {
			return err
		}
	}
	if f.fd == nil {
		flags := os.O_WRONLY | os.O_APPEND
		if creating {
			flags |= os.O_CREATE | os.O_EXCL
		}
		// The file may have been replaced since it was read; a FIFO
		// there must not hang the session.
		fd, _, err := openRegular(f.path, flags, 0o600)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: %s", ErrExists, f.path)
			}
			return err
		}
		f.fd = fd
	}
	if f.truncate {
		if err := f.fd.Truncate(f.size); err != nil {
			return err
		}
		f.truncate = false
	}
	n, err := f.fd.Write(b)
	if err != nil {
		// Whatever part of the line made it is garbage now; the next
		// append cuts it off before writing.
		if n > 0 {
			f.truncate = true
		}
		return err
	}
	f.size += int64(n)
	f.needNewline, f.headerOnDisk, f.dirty = false, true, true
	if doSync || (creating && f.opts.sync != SyncNever) {
		if err := f.syncLocked(); err != nil {
			return err
		}
	}
	if creating && f.opts.sync != SyncNever {
		// Make the new name durable too, or the synced file can vanish.
		if err := atomicfile.SyncDir(filepath.Dir(f.path)); err != nil {
			f.err = fmt.Errorf("%w: %v", ErrSyncFailed, err)
			return f.err
		}
	}
	return nil
}

func (f *File) syncLocked() error {
	if f.fd == nil || !f.dirty {
		return nil
	}
	if err := f.fd.Sync(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty
		// pages and cleared the error; retrying would report success
		// for data that is gone. Stop here.
		f.err = fmt.Errorf("%w: %v", ErrSyncFailed, err)
		return f.err
	}
	f.dirty = false
	return nil
}

// Sync flushes entries written under a lenient policy to stable storage.
func (f *File) Sync() error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.err != nil {
		return f.err
	}
	return f.syncLocked()
}

// Close syncs pending writes (unless the policy is SyncNever) and closes
// the descriptor. The in-memory session stays readable; appends fail.
func (f *File) Close() error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.fd == nil {
		return nil
	}
	var err error
	if f.opts.sync != SyncNever && f.err == nil {
		err = f.syncLocked()
	}
	if cerr := f.fd.Close(); err == nil {
		err = cerr
	}
	f.fd = nil
	return err
}

// encodeFile is the whole file of a session: its header and entries.
func encodeFile(h *Header, entries []*Entry) ([]byte, error) {
	b := h.AppendJSON(make([]byte, 0, 4096))
	b = append(b, '\n')
	for _, e := range entries {
		var err error
		if b, err = e.AppendJSON(b); err != nil {
			return nil, err
		}
		b = append(b, '\n')
	}
	return b, nil
}

// mkdirDurable creates dir (0700: sessions hold whatever the user and
// their tools said) and syncs the parent of each directory it made.
func mkdirDurable(dir string) error {
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range made {
		_ = atomicfile.SyncDir(filepath.Dir(d)) // best effort: the file's own sync matters more
	}
	return nil
}

// trimSpace trims like JavaScript's String#trim, which also strips the
// Unicode line and paragraph separators and BOM that strings.TrimSpace
// keeps or drops differently.
func trimSpace(s string) string {
	isSpace := func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\v', '\f', '\r', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
			return true
		}
		return r >= 0x2000 && r <= 0x200a
	}
	start, end := 0, len(s)
	for start < end {
		r, n := utf8.DecodeRuneInString(s[start:])
		if !isSpace(r) {
			break
		}
		start += n
	}
	for end > start {
		r, n := utf8.DecodeLastRuneInString(s[start:end])
		if !isSpace(r) {
			break
		}
		end -= n
	}
	return s[start:end]
}
