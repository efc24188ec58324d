package transcript

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"
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
