package pipeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Record operations.
const (
	OpBegin  = "begin"  // an identified command was admitted
	OpFinish = "finish" // its terminal outcome
)

// Record is one journal line. A command is identified by its ID and its
// idempotency key (Scope, Key); at least one is set.
type Record struct {
	Op          string    `json:"op"`
	Command     string    `json:"command"`
	ID          string    `json:"id,omitempty"`
	Scope       string    `json:"scope,omitempty"`
	Key         string    `json:"key,omitempty"`
	Fingerprint string    `json:"fp"`
	Response    *Response `json:"response,omitempty"`
	At          time.Time `json:"at"`
	KeyExpires  time.Time `json:"keyExpires,omitzero"`
	Expires     time.Time `json:"expires"`
}

func (r *Record) ident() string { return r.ID + "\x00" + r.Scope + "\x00" + r.Key }

// Journal persists outcomes of identified commands.
type Journal interface {
	// Append stores a record; it is durable when Append returns.
	Append(Record) error
	// Load returns the finished outcomes known when the journal was
	// opened: begun-but-unfinished commands come back as failed
	// (CodeInterrupted), expired ones are gone.
	Load() ([]Record, error)
}

// compact keeps the latest record per command and drops expired ones.
func compact(recs []Record, now time.Time) []Record {
	idx := map[string]int{}
	var out []Record
	for _, r := range recs {
		k := r.ident()
		if i, ok := idx[k]; ok {
			out[i] = r // the log is chronological: the latest record wins
			continue
		}
		idx[k] = len(out)
		out = append(out, r)
	}
	return slices.DeleteFunc(out, func(r Record) bool { return !r.Expires.After(now) })
}

// fold reduces a record log to one finish record per command; commands
// begun but never finished become failed (interrupted) outcomes.
func fold(recs []Record, now time.Time) []Record {
	out := compact(recs, now)
	for i, r := range out {
		if r.Op == OpBegin {
			out[i].Op = OpFinish
			out[i].Response = &Response{ID: r.ID, Command: r.Command, Err: &Error{Code: CodeInterrupted, Message: msgInterrupted}}
		}
	}
	return slices.DeleteFunc(out, func(r Record) bool { return r.Response == nil })
}

// MemJournal keeps records in memory; it survives a Pipeline, not a
// process. It compacts itself as it grows.
type MemJournal struct {
	mu      sync.Mutex
	recs    []Record
	compact int // length after the last compaction
}

// NewMemJournal returns an empty in-memory journal.
func NewMemJournal() *MemJournal { return &MemJournal{} }

// Append implements Journal.
func (j *MemJournal) Append(r Record) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.recs = append(j.recs, r)
	if len(j.recs) > 2*j.compact+1024 {
		j.recs = compact(j.recs, time.Now())
		j.compact = len(j.recs)
	}
	return nil
}

// Load implements Journal.
func (j *MemJournal) Load() ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.recs = fold(j.recs, time.Now())
	return append([]Record(nil), j.recs...), nil
}

// FileJournal is an append-only JSONL file; every Append is durable
// (fsync'd) before it returns. Appends that arrive while a sync is under
// way are written and synced together (group commit), so many clients
// share one fsync instead of queueing for one each.
// Opening it compacts the file: one line per live outcome, interrupted
// commands rewritten as failed, expired entries dropped.
type FileJournal struct {
	mu      sync.Mutex
	cond    *sync.Cond
	f       *os.File
	loaded  []Record
	pending []byte // lines not yet written
	gen     uint64 // batches started; the batch an Append joins is gen+1
	synced  uint64 // batches durable
	err     error  // the error of the last batch, for its waiters
	syncing bool
}

// OpenFileJournal opens (creating if needed) and compacts the journal at path.
func OpenFileJournal(path string) (*FileJournal, error) {
	raw, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var recs []Record
	for line := range bytes.SplitSeq(raw, []byte{'\n'}) {
		var r Record
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &r) != nil {
			continue // a line torn by a crash
		}
		recs = append(recs, r)
	}
	live := fold(recs, time.Now())

	tmp := path + ".tmp"
	tf, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(tf)
	for _, r := range live {
		b, err := json.Marshal(r)
		if err != nil {
			tf.Close()
			return nil, err
		}
		w.Write(append(b, '\n'))
	}
	if err := errors.Join(w.Flush(), tf.Sync(), tf.Close()); err != nil {
		return nil, fmt.Errorf("compact journal: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	j := &FileJournal{f: f, loaded: live}
	j.cond = sync.NewCond(&j.mu)
	return j, nil
}

// Append implements Journal.
func (j *FileJournal) Append(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return os.ErrClosed
	}
	j.pending = append(append(j.pending, b...), '\n')
	mine := j.gen + 1
	for {
		if j.synced >= mine {
			return j.err
		}
		if !j.syncing {
			// Lead this batch: everything pending goes in one write and
			// one fsync, without the lock held.
			j.syncing = true
			j.gen++
			batch, f := j.pending, j.f
			j.pending = nil
			j.mu.Unlock()
			_, werr := f.Write(batch)
			serr := f.Sync()
			j.mu.Lock()
			j.syncing = false
			j.synced = j.gen
			j.err = errors.Join(werr, serr)
			j.cond.Broadcast()
			continue
		}
		j.cond.Wait()
	}
}

// Load implements Journal.
func (j *FileJournal) Load() ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Record(nil), j.loaded...), nil
}

// Close closes the file.
func (j *FileJournal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
