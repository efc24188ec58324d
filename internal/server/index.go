package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/atomicfile"
)

// seqBlock is how many seqs a session reserves at a time: one durable
// index line per block, and after a crash a session's seq jumps by at
// most this much.
const seqBlock = 1 << 16

// index remembers every session id the server gave out: its file, its
// working directory, whether a client deleted it, and how far its event
// seq may have gone. It is what lets a known id work after a restart
// without load_session, lets list_stored_sessions show the ids clients
// chose, and keeps a session's seq from going backwards.
//
// It is an append-only JSONL file; each line is the whole record of one
// id and the last line for an id wins. Opening it rewrites it compactly,
// so a record costs one small append however many there are. Lines that
// matter after a crash (a new id, a deletion, a seq reservation) are
// fsync'd before the call returns.
type index struct {
	path string // "" keeps the index in memory

	// mu guards the maps and the file. Lock order: a leaf, taken under a
	// session's emitMu (Hosted.onEvent) and without Server.mu held;
	// update's fn runs under it and must take no lock.
	mu     sync.Mutex
	byID   map[string]indexEntry
	byFile map[string]string // file -> the id it was last recorded under
	f      *os.File
}

type indexEntry struct {
	ID   string `json:"sessionId"`
	File string `json:"sessionFile,omitempty"`
	Cwd  string `json:"cwd,omitempty"`
	// Owner is the subject that created the session (Principal).
	Owner   string    `json:"owner,omitempty"`
	Created time.Time `json:"createdAt,omitzero"`
	// Deleted is set when a client deleted the session: its id is free
	// again and it is not reloaded by id; its file stays.
	Deleted bool `json:"deleted,omitempty"`
	// Seq is at or above every seq the session's events may have used:
	// the exact last seq after a clean close, the reserved limit while it
	// runs.
	Seq uint64 `json:"seq,omitempty"`
	// Sandbox is the stricter sandbox mode a client chose for the
	// session's tools; "" is the server's.
	Sandbox string `json:"sandbox,omitempty"`
}

func openIndex(dir string) (*index, error) {
	x := &index{byID: map[string]indexEntry{}, byFile: map[string]string{}}
	if dir == "" {
		return x, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server state directory: %w", err)
	}
	x.path = filepath.Join(dir, "sessions.jsonl")
	data, err := os.ReadFile(x.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("session index: %w", err)
	}
	// A damaged line (a crash mid-write) loses one record; the file is
	// still listed under its own id.
	for _, line := range strings.Split(string(data), "\n") {
		var e indexEntry
		if json.Unmarshal([]byte(line), &e) == nil && e.ID != "" {
			x.record(e)
		}
	}
	var b []byte
	for _, e := range x.sorted() {
		line, _ := json.Marshal(e)
		b = append(append(b, line...), '\n')
	}
	if err := atomicfile.Write(x.path, b, true); err != nil {
		return nil, fmt.Errorf("session index: %w", err)
	}
	if x.f, err = os.OpenFile(x.path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("session index: %w", err)
	}
	return x, nil
}

// record applies e in memory; x.mu is held or x is private.
func (x *index) record(e indexEntry) {
	x.byID[e.ID] = e
	if e.File != "" {
		x.byFile[e.File] = e.ID
	}
}

// put records e, durably when sync is set.
func (x *index) put(e indexEntry, sync bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.record(e)
	if x.f == nil {
		return nil
	}
	line, _ := json.Marshal(x.byID[e.ID])
	if _, err := x.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("session index: %w", err)
	}
	if sync {
		if err := x.f.Sync(); err != nil {
			return fmt.Errorf("session index: %w", err)
		}
	}
	return nil
}

// update changes id's record with fn and stores it.
func (x *index) update(id string, sync bool, fn func(*indexEntry)) error {
	x.mu.Lock()
	e, ok := x.byID[id]
	x.mu.Unlock()
	if !ok {
		e = indexEntry{ID: id}
	}
	fn(&e)
	return x.put(e, sync)
}

func (x *index) get(id string) (indexEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.byID[id]
	return e, ok
}

// idOf is the id file was last recorded under.
func (x *index) idOf(file string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, ok := x.byFile[file]
	return id, ok
}

func (x *index) all() []indexEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.sorted()
}

// sorted lists the records oldest first; x.mu is held or x is private.
func (x *index) sorted() []indexEntry {
	out := make([]indexEntry, 0, len(x.byID))
	for _, e := range x.byID {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (x *index) close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return nil
	}
	err := x.f.Close()
	x.f = nil
	return err
}
