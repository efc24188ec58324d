package pipeline

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// Record operations.
const (
	OpBegin  = "begin"  // an identified command was admitted
	OpFinish = "finish" // its terminal outcome
)

// Record is one journal line (stored as MarshalRecord encodes it). A
// command is identified by its ID and its idempotency key (Scope, Key);
// at least one is set.
type Record struct {
	Op          string
	Command     string
	ID          string
	Scope       string
	Key         string
	Fingerprint string
	Response    *Response
	At          time.Time
	KeyExpires  time.Time
	Expires     time.Time
	// Recovered marks the failed outcome written in place of a command
	// found in flight when the journal was opened.
	Recovered bool
	// Interrupted is set by Load on the records recovered when this
	// journal was opened, as opposed to at an earlier opening.
	Interrupted bool
}

func (r *Record) ident() string { return r.ID + "\x00" + r.Scope + "\x00" + r.Key }

// Journal persists outcomes of identified commands.
type Journal interface {
	// Append stores a record; it is durable when Append returns.
	Append(Record) error
	// Load returns the finished outcomes known when the journal was
	// opened: begun-but-unfinished commands come back as failed
	// (fault.Interrupted, Recovered and Interrupted set), expired ones are
	// gone.
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
			out[i].Response = &Response{ID: r.ID, Command: r.Command, Err: &fault.Error{Code: fault.Interrupted, Message: msgInterrupted}}
			out[i].Recovered, out[i].Interrupted = true, true
		}
	}
	return slices.DeleteFunc(out, func(r Record) bool { return r.Response == nil })
}

// Recover is what a Journal's Load returns for a log of records in the
// order they were appended: the latest record of each command, expired
// ones dropped, commands begun but not finished turned into failed
// outcomes (fault.Interrupted, Recovered and Interrupted set), and at most
// DefaultMaxOutcomes outcomes, the oldest dropped first. A Journal kept
// outside this package (a cluster's) uses it so that its Load means what
// FileJournal's does.
func Recover(recs []Record, now time.Time) []Record {
	return capRecords(fold(recs, now), DefaultMaxOutcomes)
}

// capRecords drops the oldest outcomes beyond max; commands in flight stay.
func capRecords(recs []Record, max int) []Record {
	n := 0
	for _, r := range recs {
		if r.Op == OpFinish {
			n++
		}
	}
	if n <= max {
		return recs
	}
	return slices.DeleteFunc(recs, func(r Record) bool {
		if r.Op == OpFinish && n > max {
			n--
			return true
		}
		return false
	})
}

// MemJournal keeps records in memory; it survives a Pipeline, not a
// process. It compacts itself as it grows and keeps at most
// DefaultMaxOutcomes outcomes.
type MemJournal struct {
	// mu is a leaf; the pipeline calls the journal without Pipeline.mu.
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
	r.Interrupted = false // as if stored
	j.recs = append(j.recs, r)
	if len(j.recs) > 2*j.compact+1024 {
		j.recs = capRecords(compact(j.recs, time.Now()), DefaultMaxOutcomes)
		j.compact = len(j.recs)
	}
	return nil
}

// Load implements Journal.
func (j *MemJournal) Load() ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := capRecords(fold(j.recs, time.Now()), DefaultMaxOutcomes)
	j.recs = slices.Clone(out)
	for i := range j.recs {
		j.recs[i].Interrupted = false // recovered once
	}
	return out, nil
}

// FileJournalOptions bound a FileJournal; zero values mean the defaults.
type FileJournalOptions struct {
	// MaxBytes bounds the live records. Past it the oldest outcomes lose
	// their data (not their identity and result, so a retry is still
	// recognised), then their place.
	MaxBytes int64
	// MaxRecords bounds the outcomes kept; the oldest go first. Commands
	// in flight are always kept.
	MaxRecords int
	// MaxRecordBytes: an outcome's data above this is dropped when the
	// journal is opened (a journal written before outcomes were bounded).
	MaxRecordBytes int
}

// DefaultJournalMaxBytes bounds a FileJournal's live records by default.
const DefaultJournalMaxBytes = 64 << 20

// compactSlack is how much dead space a journal may carry before it is
// compacted: appends are cheap, rewrites are not.
const compactSlack = 1 << 20

func (o FileJournalOptions) withDefaults() FileJournalOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultJournalMaxBytes
	}
	o.MaxRecords = orDefault(o.MaxRecords, DefaultMaxOutcomes)
	o.MaxRecordBytes = orDefault(o.MaxRecordBytes, DefaultKeepDataBytes)
	return o
}

// planItem is one live record as a rewrite sees it.
type planItem struct {
	n        int64 // its line's length
	data     int   // its response data's length
	finished bool
	expires  time.Time
}

// plan decides what a rewrite keeps of items (oldest first): expired
// records go, then the oldest outcomes beyond MaxRecords; while the rest
// is over MaxBytes the oldest outcomes lose their data, then their place.
// Commands in flight are always kept.
func (o FileJournalOptions) plan(items []planItem, now time.Time) (keep, strip []bool) {
	keep, strip = make([]bool, len(items)), make([]bool, len(items))
	var total int64
	fin := 0
	for i, it := range items {
		if it.expires.After(now) {
			keep[i] = true
			total += it.n
			if it.finished {
				fin++
			}
		}
	}
	for i, it := range items {
		if fin <= o.MaxRecords {
			break
		}
		if keep[i] && it.finished {
			keep[i] = false
			total -= it.n
			fin--
		}
	}
	for i, it := range items {
		if total <= o.MaxBytes {
			break
		}
		if keep[i] && it.finished && it.data > 0 {
			strip[i] = true
			total -= int64(it.data)
		}
	}
	for i, it := range items {
		if total <= o.MaxBytes {
			break
		}
		if keep[i] && it.finished {
			keep[i] = false
			n := it.n
			if strip[i] {
				n -= int64(it.data)
			}
			total -= n
		}
	}
	return keep, strip
}

// FileJournal is an append-only JSONL file; every Append is durable
// (fsync'd) before it returns. Appends that arrive while a sync is under
// way are written and synced together (group commit), so many clients
// share one fsync instead of queueing for one each.
//
// It stays bounded while it runs: when dead lines (superseded or expired
// records) outweigh the live ones, or the live ones pass the options'
// bounds, the next append rewrites it (compaction) with one line per live
// command. Opening it compacts it too, with interrupted commands rewritten
// as failed.
type FileJournal struct {
	path string
	opt  FileJournalOptions

	// mu (and cond, which waits on it) is a leaf: the pipeline appends
	// without holding Pipeline.mu, and nothing is taken under it.
	mu      sync.Mutex
	cond    *sync.Cond
	f       *os.File // nil once closed
	pending []pendingLine
	gen     uint64 // batches started; the batch an Append joins is gen+1
	synced  uint64 // batches durable
	err     error  // the error of the last batch, for its waiters
	busy    bool   // someone owns the file and the fields below
	info    JournalInfo

	// Owned by whoever set busy: a batch's leader, Load, Close.
	idx            map[string]*jrec // the live line of each command
	size           int64            // the file's length
	live           int64            // the length of idx's lines
	finished       int              // idx's outcomes
	nextExpiry     time.Time        // no live record expires before
	floor          int64            // live bytes the last compaction could not go below
	torn           bool             // a failed write may have left part of a line
	retryAt        time.Time        // no compaction before (after one failed)
	compactions    int
	lastCompaction time.Time
	interrupted    map[string]bool // commands recovered at open, by ident
}

type pendingLine struct {
	line []byte
	rec  jrec
	id   string // ident
}

// jrec locates a live record in the file.
type jrec struct {
	off, n   int64
	expires  time.Time
	finished bool
	data     int
}

// OpenFileJournal opens (creating if needed) and compacts the journal at
// path, with the default bounds.
func OpenFileJournal(path string) (*FileJournal, error) {
	return OpenFileJournalWith(path, FileJournalOptions{})
}

// OpenFileJournalWith opens (creating if needed) and compacts the journal
// at path.
func OpenFileJournalWith(path string, opt FileJournalOptions) (*FileJournal, error) {
	opt = opt.withDefaults()
	recs, scanned, malformed, err := readJournal(path, opt.MaxRecordBytes)
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	j := &FileJournal{path: path, opt: opt, idx: map[string]*jrec{}, interrupted: map[string]bool{}}
	j.cond = sync.NewCond(&j.mu)
	now := time.Now()
	live := fold(recs, now)
	items := make([]planItem, len(live))
	lines := make([][]byte, len(live))
	for i := range live {
		b, err := MarshalRecord(&live[i])
		if err != nil {
			return nil, err
		}
		lines[i] = append(b, '\n')
		items[i] = planItem{n: int64(len(lines[i])), data: live[i].dataLen(), finished: true, expires: live[i].Expires}
	}
	keep, strip := opt.plan(items, now)
	tf, tmp, err := createTemp(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(tf)
	var off int64
	for i := range live {
		if !keep[i] {
			continue
		}
		r := &live[i]
		if strip[i] {
			r.Response.Data, r.Response.DataDropped = nil, true
			b, _ := MarshalRecord(r)
			lines[i] = append(b, '\n')
		}
		w.Write(lines[i])
		if r.Interrupted {
			j.interrupted[r.ident()] = true
		}
		j.index(r.ident(), jrec{off: off, n: int64(len(lines[i])), expires: r.Expires, finished: true, data: r.dataLen()})
		off += int64(len(lines[i]))
	}
	if err := w.Flush(); err != nil {
		tf.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("compact journal: %w", err)
	}
	if err := j.install(tf, tmp); err != nil {
		return nil, fmt.Errorf("compact journal: %w", err)
	}
	j.size, j.compactions, j.lastCompaction = off, 1, now
	j.info = JournalInfo{Path: path, Durable: true, EntriesScanned: scanned, MalformedEntries: malformed}
	j.noteInfo()
	return j, nil
}

// readJournal reads every record of the file at path, the latest of each
// command only, in the order commands first appear; data past maxData is
// dropped as it is read, so an old unbounded journal does not have to fit
// in memory.
func readJournal(path string, maxData int) (recs []Record, scanned, malformed int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	pos := map[string]int{}
	br := bufio.NewReaderSize(f, 1<<20)
	for {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			scanned++
			var r Record
			if UnmarshalRecord(line, &r) != nil {
				malformed++ // a line torn by a crash
			} else {
				if r.Response != nil && len(r.Response.Data) > maxData {
					r.Response.Data, r.Response.DataDropped = nil, true
				}
				if i, ok := pos[r.ident()]; ok {
					recs[i] = r // the log is chronological: the latest record wins
				} else {
					pos[r.ident()] = len(recs)
					recs = append(recs, r)
				}
			}
		}
		if rerr == io.EOF {
			return recs, scanned, malformed, nil
		}
		if rerr != nil {
			return nil, 0, 0, rerr
		}
	}
}

func (r *Record) dataLen() int {
	if r.Response == nil {
		return 0
	}
	return len(r.Response.Data)
}

// createTemp creates the file a rewrite of path goes to. It is opened for
// appending, so once renamed over path it is the journal's handle.
func createTemp(path string) (*os.File, string, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	return f, tmp, err
}

// install makes the written temp file the journal: synced, renamed over
// the journal, the directory synced. The handle stays open for appends.
func (j *FileJournal) install(tf *os.File, tmp string) error {
	if err := tf.Sync(); err != nil {
		tf.Close()
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, j.path); err != nil {
		tf.Close()
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(j.path)); err == nil {
		d.Sync()
		d.Close()
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f = tf
	return nil
}

// index notes the live line of command id; the caller owns j.
func (j *FileJournal) index(id string, r jrec) {
	if old := j.idx[id]; old != nil {
		j.live -= old.n
		if old.finished {
			j.finished--
		}
	}
	j.idx[id] = &r
	j.live += r.n
	if r.finished {
		j.finished++
	}
	if j.nextExpiry.IsZero() || r.expires.Before(j.nextExpiry) {
		j.nextExpiry = r.expires
	}
}

// noteInfo copies the owned figures Info reports; j.mu is held or j is
// not shared yet.
func (j *FileJournal) noteInfo() {
	j.info.Bytes, j.info.Records, j.info.Compactions = j.size, len(j.idx), j.compactions
}

// Append implements Journal.
func (j *FileJournal) Append(r Record) error {
	b, err := MarshalRecord(&r)
	if err != nil {
		return err
	}
	pl := pendingLine{line: append(b, '\n'), id: r.ident(),
		rec: jrec{expires: r.Expires, finished: r.Op == OpFinish, data: r.dataLen()}}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return os.ErrClosed
	}
	j.pending = append(j.pending, pl)
	mine := j.gen + 1
	for {
		if j.synced >= mine {
			return j.err
		}
		if !j.busy && j.f != nil {
			// Lead this batch: everything pending goes in one write and
			// one fsync, without the lock held.
			j.busy = true
			j.gen++
			batch := j.pending
			j.pending = nil
			j.mu.Unlock()
			err := j.writeBatch(batch)
			j.mu.Lock()
			j.noteInfo()
			j.busy = false
			j.synced = j.gen
			j.err = err
			j.cond.Broadcast()
			continue
		}
		if j.f == nil {
			return os.ErrClosed
		}
		j.cond.Wait()
	}
}

// writeBatch appends batch durably, indexes it and compacts the file when
// it is due; the caller owns j.
func (j *FileJournal) writeBatch(batch []pendingLine) error {
	var buf []byte
	if j.torn {
		buf = append(buf, '\n') // end the partial line, so the next one reads
	}
	start := j.size + int64(len(buf))
	for _, pl := range batch {
		buf = append(buf, pl.line...)
	}
	_, werr := j.f.Write(buf)
	serr := j.f.Sync()
	if err := errors.Join(werr, serr); err != nil {
		j.torn = true
		if fi, e := j.f.Stat(); e == nil {
			j.size = fi.Size()
		}
		return err
	}
	j.torn = false
	off := start
	for _, pl := range batch {
		pl.rec.off, pl.rec.n = off, int64(len(pl.line))
		j.index(pl.id, pl.rec)
		off += pl.rec.n
	}
	j.size = off
	if now := time.Now(); j.dueForCompaction(now) {
		if err := j.compact(now); err != nil {
			// The appends are durable in the old file; try again later.
			j.retryAt = now.Add(time.Minute)
		}
	}
	return nil
}

// dueForCompaction says whether the file is worth rewriting. Each bound
// has some slack, so a journal at its bounds is rewritten now and then,
// not on every append.
func (j *FileJournal) dueForCompaction(now time.Time) bool {
	if now.Before(j.retryAt) {
		return false
	}
	byteSlack := max(j.opt.MaxBytes/8, 4<<10)
	return j.size > 2*j.live+compactSlack ||
		j.live > max(j.opt.MaxBytes, j.floor)+byteSlack ||
		j.finished > j.opt.MaxRecords+max(j.opt.MaxRecords/8, 1) ||
		// Expired records are inert (nothing loads them), so dropping
		// them can wait for a quiet moment.
		(!j.nextExpiry.IsZero() && !now.Before(j.nextExpiry) && !now.Before(j.lastCompaction.Add(expiryCompactionGap)))
}

// expiryCompactionGap spaces out compactions that only drop expired records.
const expiryCompactionGap = 10 * time.Minute

// compact rewrites the file with the live records the bounds keep; the
// caller owns j.
func (j *FileJournal) compact(now time.Time) error {
	type ent struct {
		id string
		r  *jrec
	}
	ents := make([]ent, 0, len(j.idx))
	for id, r := range j.idx {
		ents = append(ents, ent{id, r})
	}
	slices.SortFunc(ents, func(a, b ent) int { return cmp.Compare(a.r.off, b.r.off) })
	items := make([]planItem, len(ents))
	for i, e := range ents {
		items[i] = planItem{n: e.r.n, data: e.r.data, finished: e.r.finished, expires: e.r.expires}
	}
	keep, strip := j.opt.plan(items, now)
	if j.size == j.live && !slices.Contains(keep, false) && !slices.Contains(strip, true) {
		j.lastCompaction = now
		j.nextExpiry = time.Time{}
		for _, e := range ents {
			if j.nextExpiry.IsZero() || e.r.expires.Before(j.nextExpiry) {
				j.nextExpiry = e.r.expires
			}
		}
		return nil
	}
	src, err := os.Open(j.path)
	if err != nil {
		return err
	}
	defer src.Close()
	tf, tmp, err := createTemp(j.path)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		tf.Close()
		os.Remove(tmp)
		return err
	}
	w := bufio.NewWriter(tf)
	idx := map[string]*jrec{}
	var off int64
	var line []byte
	for i, e := range ents {
		if !keep[i] {
			continue
		}
		line = slices.Grow(line[:0], int(e.r.n))[:e.r.n]
		if _, err := src.ReadAt(line, e.r.off); err != nil {
			return fail(err)
		}
		r := *e.r
		out := line
		if strip[i] {
			var rec Record
			if err := UnmarshalRecord(line, &rec); err != nil {
				return fail(err)
			}
			rec.Response.Data, rec.Response.DataDropped = nil, true
			b, _ := MarshalRecord(&rec)
			out, r.data = append(b, '\n'), 0
		}
		if _, err := w.Write(out); err != nil {
			return fail(err)
		}
		r.off, r.n = off, int64(len(out))
		idx[e.id] = &r
		off += r.n
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := j.install(tf, tmp); err != nil {
		return err
	}
	j.idx, j.size, j.live, j.finished, j.nextExpiry = map[string]*jrec{}, off, 0, 0, time.Time{}
	for id, r := range idx {
		j.index(id, *r)
	}
	j.floor = 0
	if j.live > j.opt.MaxBytes {
		j.floor = j.live
	}
	j.compactions++
	j.lastCompaction = now
	return nil
}

// own waits until nobody else owns j and takes it; false if j is closed.
func (j *FileJournal) own() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.busy {
		j.cond.Wait()
	}
	if j.f == nil {
		return false
	}
	j.busy = true
	return true
}

func (j *FileJournal) disown() {
	j.mu.Lock()
	j.busy = false
	j.cond.Broadcast()
	j.mu.Unlock()
}

// Load implements Journal: the outcomes in the file, oldest first.
// Commands appended as begun since the journal was opened are in flight
// in this process and left out.
func (j *FileJournal) Load() ([]Record, error) {
	if !j.own() {
		return nil, os.ErrClosed
	}
	defer j.disown()
	type ent struct {
		id string
		r  *jrec
	}
	var ents []ent
	for id, r := range j.idx {
		if r.finished {
			ents = append(ents, ent{id, r})
		}
	}
	slices.SortFunc(ents, func(a, b ent) int { return cmp.Compare(a.r.off, b.r.off) })
	src, err := os.Open(j.path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	out := make([]Record, 0, len(ents))
	for _, e := range ents {
		line := make([]byte, e.r.n)
		if _, err := src.ReadAt(line, e.r.off); err != nil {
			return nil, fmt.Errorf("read journal %s: %w", j.path, err)
		}
		var r Record
		if err := UnmarshalRecord(line, &r); err != nil {
			return nil, fmt.Errorf("read journal %s at %d: %w", j.path, e.r.off, err)
		}
		r.Interrupted = j.interrupted[e.id]
		out = append(out, r)
	}
	return out, nil
}

// Info reports the journal's path and size for StartupRecovery and
// CommandHistory.
func (j *FileJournal) Info() JournalInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.info
}

// Close closes the file once the append or compaction under way is done.
func (j *FileJournal) Close() error {
	if !j.own() {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	err := j.f.Close()
	j.f = nil
	j.busy = false
	j.cond.Broadcast()
	return err
}
