// Package checkpoint records what a workspace looked like before an agent
// changed it, so a turn's changes can be shown as a diff, reverted and the
// revert undone, across restarts.
//
// The store is content-addressed and pure Go, kept outside the workspace
// (under agentd's data dir): a file's bytes are a blob named by their
// SHA-256, a snapshot is a tree object listing every tracked path with
// its mode and blob, and a journal of JSON lines records which snapshot
// came before and after each turn and the reverts. A shadow git
// repository (opencode's and codex's choice) would need git at run time,
// a GIT_DIR and work tree kept apart from the user's own .git, and its
// checkout would follow whatever a model left in the workspace; here the
// walk and the restore are ours: symlinks are recorded as links and never
// followed, every write goes through an os.Root of the workspace, and the
// bounds (per file, per snapshot, file count) are exact.
package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd-dev/agentd/internal/tool"
)

// Limits bound one snapshot. What is beyond them is left out of the
// snapshot and named in its Skipped list (a revert never touches it).
type Limits struct {
	// MaxFileBytes is the largest file recorded (default 4 MiB).
	MaxFileBytes int64
	// MaxFiles is how many paths a snapshot records (default 20000).
	MaxFiles int
	// MaxTotalBytes bounds the bytes of the files one snapshot records
	// (default 256 MiB).
	MaxTotalBytes int64
}

// DefaultLimits are the bounds used where a Limits field is zero.
func DefaultLimits() Limits {
	return Limits{MaxFileBytes: 4 << 20, MaxFiles: 20000, MaxTotalBytes: 256 << 20}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	return l
}

// maxSkippedListed caps the names a tree keeps of what it skipped; past
// it the tree only counts them and is Partial.
const maxSkippedListed = 500

// Entry is one recorded path of a snapshot.
type Entry struct {
	Path string `json:"path"` // relative to the workspace, '/'-separated, clean
	// Mode is 0644 or 0755 for a file; a symlink has Link set instead.
	Mode uint32 `json:"mode,omitempty"`
	Size int64  `json:"size"`
	Hash string `json:"hash,omitempty"` // SHA-256 of the content (hex)
	Link string `json:"link,omitempty"` // a symlink's target, as written
}

// IsLink reports whether e records a symlink.
func (e Entry) IsLink() bool { return e.Hash == "" }

func (e Entry) same(o Entry) bool {
	return e.Path == o.Path && e.Mode == o.Mode && e.Hash == o.Hash && e.Link == o.Link
}

// Skip is a path a snapshot left out, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Tree is one snapshot of a workspace.
type Tree struct {
	Entries []Entry `json:"entries"` // sorted by Path
	Skipped []Skip  `json:"skipped,omitempty"`
	// SkippedMore counts skipped paths beyond those listed.
	SkippedMore int `json:"skippedMore,omitempty"`
	// Partial: the snapshot stopped at a limit, so a path it does not
	// list may have existed; a revert to it deletes nothing.
	Partial bool `json:"partial,omitempty"`
}

func (t *Tree) find(p string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(t.Entries, p, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return Entry{}, false
	}
	return t.Entries[i], true
}

func (t *Tree) skipped(p string) bool {
	for _, s := range t.Skipped {
		if s.Path == p {
			return true
		}
	}
	return false
}

// Store keeps the snapshots of one workspace in one directory. It is safe
// for concurrent use; snapshots and restores are serialised.
type Store struct {
	dir    string // the store's own directory
	ws     string // the workspace, absolute and clean
	limits Limits

	mu    sync.Mutex
	cache map[string]cached // path → what it hashed to, by its stat
}

// cached is what a path's content hashed to when it had this stat.
type cached struct {
	size  int64
	mtime int64
	ctime int64
	ino   uint64
	hash  string
}

// Open opens (creating) the store in dir for the workspace ws. dir must
// not be inside ws unless it is skipped by the walk anyway; Open makes
// sure of that by pruning it.
func Open(dir, ws string, limits Limits) (*Store, error) {
	ws, err := filepath.Abs(ws)
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	// Nothing is created until something is stored: listing the
	// checkpoints of a session that never changed a file leaves no trace.
	return &Store{dir: dir, ws: filepath.Clean(ws), limits: limits.withDefaults(), cache: map[string]cached{}}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Workspace is the directory the store snapshots.
func (s *Store) Workspace() string { return s.ws }

func (s *Store) objectPath(hash string) string {
	return filepath.Join(s.dir, "objects", hash[:2], hash[2:])
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// putObject stores data under its hash (nothing to do when it is there).
func (s *Store) putObject(data []byte) (string, error) {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	p := s.objectPath(h)
	if _, err := os.Stat(p); err == nil {
		return h, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return h, nil
}

// object reads an object and checks it is what its name says.
func (s *Store) object(hash string) ([]byte, error) {
	if !validHash(hash) {
		return nil, fmt.Errorf("checkpoint store: bad object name %q", hash)
	}
	data, err := os.ReadFile(s.objectPath(hash))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint store: object %s is missing", hash[:12])
		}
		return nil, err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hash {
		return nil, fmt.Errorf("checkpoint store: object %s is corrupt", hash[:12])
	}
	return data, nil
}

// Tree loads a snapshot by its id and checks every path in it is one a
// restore may write (relative, clean, no "..", not in a .git directory).
func (s *Store) Tree(id string) (*Tree, error) {
	data, err := s.object(id)
	if err != nil {
		return nil, err
	}
	var t Tree
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("checkpoint store: snapshot %s: %w", id[:12], err)
	}
	for i, e := range t.Entries {
		if err := checkPath(e.Path); err != nil {
			return nil, fmt.Errorf("checkpoint store: snapshot %s: %w", id[:12], err)
		}
		if i > 0 && t.Entries[i-1].Path >= e.Path {
			return nil, fmt.Errorf("checkpoint store: snapshot %s is not sorted", id[:12])
		}
		if e.Hash != "" && !validHash(e.Hash) {
			return nil, fmt.Errorf("checkpoint store: snapshot %s names a bad object for %s", id[:12], e.Path)
		}
	}
	return &t, nil
}

// checkPath accepts only what a walk of the workspace can produce.
func checkPath(p string) error {
	if p == "" || strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "." {
		return fmt.Errorf("path %q is not a clean relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == ".git" {
			return fmt.Errorf("path %q leaves the workspace or enters .git", p)
		}
	}
	return nil
}

// Snapshot records the workspace as it is now and returns the snapshot's
// id. Files whose size, times and inode match the last snapshot are not
// read again.
func (s *Store) Snapshot(ctx context.Context) (string, *Tree, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(ctx)
}

func (s *Store) snapshotLocked(ctx context.Context) (string, *Tree, error) {
	root, err := os.OpenRoot(s.ws)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: opening the workspace: %w", err)
	}
	defer root.Close()
	skip := s.skipFunc()
	t := &Tree{Entries: []Entry{}}
	var total int64
	started := time.Now()
	next := map[string]cached{}
	addSkip := func(p, reason string, limit bool) {
		if limit {
			t.Partial = true
		}
		if len(t.Skipped) < maxSkippedListed {
			t.Skipped = append(t.Skipped, Skip{Path: p, Reason: reason})
			return
		}
		t.SkippedMore++
		t.Partial = true
	}
	err = tool.WalkWorkspace(ctx, s.ws, skip, func(rel string, typ fs.FileMode) error {
		if typ.IsDir() {
			return nil
		}
		if typ&fs.ModeSymlink == 0 && !typ.IsRegular() {
			return nil // sockets, fifos, devices: nothing a revert should make
		}
		if len(t.Entries) >= s.limits.MaxFiles {
			addSkip(rel, fmt.Sprintf("more than %d files", s.limits.MaxFiles), true)
			return nil
		}
		if typ&fs.ModeSymlink != 0 {
			target, err := root.Readlink(rel)
			if err != nil {
				return nil // gone since the listing
			}
			t.Entries = append(t.Entries, Entry{Path: rel, Size: int64(len(target)), Link: target})
			return nil
		}
		e, c, reason, err := s.readFile(root, rel, total, started)
		if err != nil {
			return err
		}
		if reason != "" {
			addSkip(rel, reason, strings.HasPrefix(reason, "snapshot"))
			return nil
		}
		if e.Path == "" {
			return nil
		}
		total += e.Size
		t.Entries = append(t.Entries, e)
		if c.hash != "" {
			next[rel] = c
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	slices.SortFunc(t.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	data, err := json.Marshal(t)
	if err != nil {
		return "", nil, err
	}
	id, err := s.putObject(data)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: saving the snapshot: %w", err)
	}
	s.cache = next
	return id, t, nil
}

// skipFunc prunes the store, and the directory of stores it is in (other
// sessions' stores), when they live inside the workspace.
func (s *Store) skipFunc() func(string, bool) bool {
	var prune []string
	for _, d := range []string{s.dir, filepath.Dir(s.dir)} {
		rel, err := filepath.Rel(s.ws, d)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		prune = append(prune, filepath.ToSlash(rel))
	}
	if len(prune) == 0 {
		return nil
	}
	return func(p string, _ bool) bool {
		for _, r := range prune {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
}

// readFile records one regular file: opened without following a link
// (a file swapped for a symlink since the listing is left out) and
// without blocking on a fifo swapped in. reason says why it was skipped.
func (s *Store) readFile(root *os.Root, rel string, total int64, started time.Time) (Entry, cached, string, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return Entry{}, cached{}, "unreadable", nil
		}
		return Entry{}, cached{}, "", nil // gone or replaced since the listing
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return Entry{}, cached{}, "", nil
	}
	size := fi.Size()
	if size > s.limits.MaxFileBytes {
		return Entry{}, cached{}, fmt.Sprintf("larger than %d bytes", s.limits.MaxFileBytes), nil
	}
	if total+size > s.limits.MaxTotalBytes {
		return Entry{}, cached{}, fmt.Sprintf("snapshot over %d bytes", s.limits.MaxTotalBytes), nil
	}
	mode := uint32(0o644)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	c := statOf(fi)
	if old, ok := s.cache[rel]; ok && old.size == c.size && old.mtime == c.mtime && old.ctime == c.ctime && old.ino == c.ino {
		// A file changed in the same clock tick as its last hash may
		// look unchanged; those are read again (git's "racy" rule).
		if started.UnixNano()-c.mtime > int64(2*time.Second) {
			if _, err := os.Stat(s.objectPath(old.hash)); err == nil {
				return Entry{Path: rel, Mode: mode, Size: size, Hash: old.hash}, old, "", nil
			}
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, s.limits.MaxFileBytes+1))
	if err != nil {
		return Entry{}, cached{}, "unreadable", nil
	}
	if int64(len(data)) > s.limits.MaxFileBytes {
		return Entry{}, cached{}, fmt.Sprintf("larger than %d bytes", s.limits.MaxFileBytes), nil
	}
	h, err := s.putObject(data)
	if err != nil {
		return Entry{}, cached{}, "", fmt.Errorf("saving %s: %w", rel, err)
	}
	c.hash = h
	c.size = int64(len(data))
	return Entry{Path: rel, Mode: mode, Size: int64(len(data)), Hash: h}, c, "", nil
}

func statOf(fi fs.FileInfo) cached {
	c := cached{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.ino = st.Ino
		c.ctime = st.Ctim.Nano()
	}
	return c
}
