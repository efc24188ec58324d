package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// Turn is one checkpointed turn: the workspace before its first change
// and, once it ended, after.
type Turn struct {
	// ID names the turn: the transcript entry id of the user message
	// that started it.
	ID string `json:"id"`
	// Prompt is the start of that message, for a list to show.
	Prompt string `json:"prompt,omitempty"`
	Before string `json:"before"`
	// After is empty while the turn runs (or when agentd stopped during
	// it): its changes then run up to the next turn's Before, or to now.
	After   string    `json:"after,omitempty"`
	Started time.Time `json:"started"`
}

// Revert is one revert that can be undone.
type Revert struct {
	Turn string `json:"turn"`
	// Undo is the snapshot taken just before the revert.
	Undo string `json:"undo"`
	// Leaf is where the conversation was when the revert truncated it
	// (Truncated), so undoing the revert can go back there.
	Leaf      string    `json:"leaf,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	Time      time.Time `json:"time"`
}

// record is one journal line.
type record struct {
	Op     string    `json:"op"` // begin, end, revert, unrevert
	Turn   string    `json:"turn,omitempty"`
	Prompt string    `json:"prompt,omitempty"`
	Tree   string    `json:"tree,omitempty"`
	Revert *Revert   `json:"revert,omitempty"`
	Time   time.Time `json:"time"`
}

// Tracker keeps the checkpoints of one session: its store and a journal
// (journal.jsonl, one fsynced JSON line per change) that a restart
// replays. Safe for concurrent use.
type Tracker struct {
	store   *Store
	journal string

	mu      sync.Mutex
	turns   []*Turn
	open    *Turn
	reverts []Revert // undoable, last on top
}

// OpenTracker opens the checkpoints kept in dir for workspace ws and
// replays their journal. A line cut short by a crash ends the replay.
func OpenTracker(dir, ws string, limits Limits) (*Tracker, error) {
	st, err := Open(dir, ws, limits)
	if err != nil {
		return nil, err
	}
	t := &Tracker{store: st, journal: filepath.Join(st.Dir(), "journal.jsonl")}
	data, err := os.ReadFile(t.journal)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint journal: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			break
		}
		t.apply(r)
	}
	// A turn agentd stopped during stays open: its changes run to the
	// next turn's start, or to now.
	t.open = nil
	return t, nil
}

// Store is the tracker's snapshot store.
func (t *Tracker) Store() *Store { return t.store }

func (t *Tracker) apply(r record) {
	switch r.Op {
	case "begin":
		t.reverts = nil
		if tr := t.find(r.Turn); tr != nil {
			tr.After = ""
			t.open = tr
			return
		}
		tr := &Turn{ID: r.Turn, Prompt: r.Prompt, Before: r.Tree, Started: r.Time}
		t.turns = append(t.turns, tr)
		t.open = tr
	case "end":
		if tr := t.find(r.Turn); tr != nil {
			tr.After = r.Tree
		}
		t.open = nil
	case "revert":
		if r.Revert != nil {
			t.reverts = append(t.reverts, *r.Revert)
		}
	case "unrevert":
		if n := len(t.reverts); n > 0 {
			t.reverts = t.reverts[:n-1]
		}
	}
}

func (t *Tracker) find(id string) *Turn {
	for _, tr := range t.turns {
		if tr.ID == id {
			return tr
		}
	}
	return nil
}

// write appends r to the journal durably, then applies it.
func (t *Tracker) write(r record) error {
	r.Time = time.Now().UTC()
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(t.store.Dir(), 0o700); err != nil {
		return fmt.Errorf("checkpoint journal: %w", err)
	}
	f, err := os.OpenFile(t.journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint journal: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		return fmt.Errorf("checkpoint journal: %w", err)
	}
	t.apply(r)
	return nil
}

// Begin is called before a change to the workspace in turn id: the
// first call of a turn snapshots the workspace as its Before (ending the
// turn before it, if still open, at the same snapshot); later calls of
// the same turn do nothing. A new turn drops the reverts that could be
// undone: undoing one now would throw its work away.
func (t *Tracker) Begin(ctx context.Context, id, prompt string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != nil && t.open.ID == id {
		return nil
	}
	snap, _, err := t.store.Snapshot(ctx)
	if err != nil {
		return err
	}
	if t.open != nil {
		if err := t.write(record{Op: "end", Turn: t.open.ID, Tree: snap}); err != nil {
			return err
		}
	}
	if tr := t.find(id); tr != nil {
		// The same turn again (resumed after a restart): it keeps the
		// Before it had.
		return t.write(record{Op: "begin", Turn: id})
	}
	return t.write(record{Op: "begin", Turn: id, Prompt: prompt, Tree: snap})
}

// End closes the open turn with a snapshot of the workspace as After.
func (t *Tracker) End(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endLocked(ctx)
}

func (t *Tracker) endLocked(ctx context.Context) error {
	if t.open == nil {
		return nil
	}
	snap, _, err := t.store.Snapshot(ctx)
	if err != nil {
		return err
	}
	return t.write(record{Op: "end", Turn: t.open.ID, Tree: snap})
}

// Turns lists the checkpointed turns, oldest first.
func (t *Tracker) Turns() []Turn {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Turn, len(t.turns))
	for i, tr := range t.turns {
		out[i] = *tr
	}
	return out
}

// LastRevert is the revert UndoRevert would undo.
func (t *Tracker) LastRevert() (Revert, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.reverts) == 0 {
		return Revert{}, false
	}
	return t.reverts[len(t.reverts)-1], true
}

// TurnDiff is what a turn changed.
type TurnDiff struct {
	Turn  Turn       `json:"turn"`
	Files []FileDiff `json:"files"`
	// Skipped are the paths the snapshots left out (either side).
	Skipped []Skip `json:"skipped,omitempty"`
	// Partial: a snapshot stopped at a limit.
	Partial bool `json:"partial,omitempty"`
	// Live: the turn has no After yet; this is up to the workspace now.
	Live bool `json:"live,omitempty"`
}

// ErrNoTurn is a turn the tracker has no checkpoint of.
func errNoTurn(id string) error {
	if id == "" {
		return fault.New(fault.NotFound, "no turn has changed files yet: there is no checkpoint")
	}
	return fault.Errorf(fault.NotFound, "turn %q has no checkpoint (it changed no files, or is not in this session)", id)
}

func (t *Tracker) turnLocked(id string) (*Turn, int, error) {
	if id == "" {
		if len(t.turns) == 0 {
			return nil, 0, errNoTurn("")
		}
		return t.turns[len(t.turns)-1], len(t.turns) - 1, nil
	}
	for i, tr := range t.turns {
		if tr.ID == id {
			return tr, i, nil
		}
	}
	return nil, 0, errNoTurn(id)
}

// Diff is what turn id ("" for the last) changed: from its Before to its
// After, or (when agentd stopped during it) to the next turn's Before,
// or to the workspace now.
func (t *Tracker) Diff(ctx context.Context, id string) (*TurnDiff, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, i, err := t.turnLocked(id)
	if err != nil {
		return nil, err
	}
	to := tr.After
	live := false
	if to == "" && i+1 < len(t.turns) {
		to = t.turns[i+1].Before
	}
	if to == "" {
		if to, _, err = t.store.Snapshot(ctx); err != nil {
			return nil, err
		}
		live = true
	}
	a, err := t.store.Tree(tr.Before)
	if err != nil {
		return nil, err
	}
	b, err := t.store.Tree(to)
	if err != nil {
		return nil, err
	}
	files, err := t.store.Diff(a, b)
	if err != nil {
		return nil, err
	}
	d := &TurnDiff{Turn: *tr, Files: files, Live: live, Partial: a.Partial || b.Partial}
	seen := map[string]bool{}
	for _, s := range append(append([]Skip(nil), a.Skipped...), b.Skipped...) {
		if !seen[s.Path] {
			seen[s.Path] = true
			d.Skipped = append(d.Skipped, s)
		}
	}
	return d, nil
}

// Revert puts the workspace back as it was before turn id ("" for the
// last) and records how to undo that. leaf and truncated say where the
// conversation was, if the caller also truncated it. An open turn is
// ended first.
func (t *Tracker) Revert(ctx context.Context, id, leaf string, truncated bool) (*Restored, Turn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, _, err := t.turnLocked(id)
	if err != nil {
		return nil, Turn{}, err
	}
	if err := t.endLocked(ctx); err != nil {
		return nil, Turn{}, err
	}
	res, err := t.store.Restore(ctx, tr.Before)
	if res != nil && res.Undo != "" {
		// Even a restore that failed half way is undone from its
		// snapshot, so it is recorded.
		if jerr := t.write(record{Op: "revert", Revert: &Revert{Turn: tr.ID, Undo: res.Undo, Leaf: leaf, Truncated: truncated}}); jerr != nil {
			return res, *tr, errors.Join(err, jerr)
		}
	}
	return res, *tr, err
}

// UndoRevert puts the workspace back as it was before the last revert
// that is still undoable, and returns that revert.
func (t *Tracker) UndoRevert(ctx context.Context) (*Restored, Revert, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.reverts) == 0 {
		return nil, Revert{}, fault.New(fault.Conflict, "there is no revert to undo (a turn that changes files after a revert makes it final)")
	}
	r := t.reverts[len(t.reverts)-1]
	res, err := t.store.Restore(ctx, r.Undo)
	if err != nil {
		return res, r, err
	}
	return res, r, t.write(record{Op: "unrevert", Turn: r.Turn})
}
