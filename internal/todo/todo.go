// Package todo holds a session's plan: the todo list the model keeps with
// the todo tool, its progress, and change notifications for clients that
// show it.
//
// The model's main operation is writing the whole list, which models get
// right far more reliably than incremental edits; updating items by id is
// there for the frequent "mark this done, start the next" step on a long
// list.
package todo

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Status is where an item stands.
type Status string

// The statuses, the convention most coding agents and models share.
const (
	Pending    Status = "pending"
	InProgress Status = "in_progress"
	Completed  Status = "completed"
)

// ParseStatus reads a status, accepting the spellings models commonly use
// for the three ("done", "in-progress", "todo"); empty is Pending.
func ParseStatus(s string) (Status, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "pending", "todo", "not_started", "not started", "open":
		return Pending, nil
	case "in_progress", "in-progress", "in progress", "inprogress", "active", "doing", "started":
		return InProgress, nil
	case "completed", "complete", "done", "finished":
		return Completed, nil
	}
	return "", fmt.Errorf("unknown status %q (want pending, in_progress or completed)", s)
}

// Item is one entry of the list.
type Item struct {
	// ID is stable across rewrites of the list, so a client can tell an
	// item that changed from one that was replaced.
	ID      int    `json:"id"`
	Content string `json:"content"`
	Status  Status `json:"status"`
}

// Snapshot is the list at one moment: what observers receive, what the
// tool's results carry as details, and the JSON form of a List.
type Snapshot struct {
	Items []Item `json:"items"`
	// Done and Total are derived from Items, for clients that show only
	// progress; they are ignored when a snapshot is restored.
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Update changes one item: the zero Status and empty Content leave that
// part as it is.
type Update struct {
	ID      int
	Status  Status
	Content string
}

// List is a goroutine-safe todo list. The zero List is empty and has no
// observer.
type List struct {
	onChange func(Snapshot)

	mu     sync.Mutex
	items  []Item
	nextID int
	// queue and draining deliver snapshots in order, outside mu, on the
	// goroutines that made the changes (see drain).
	queue    []Snapshot
	draining bool
}

// NewList returns an empty list. onChange, when non-nil, is called after
// every change with the new snapshot: in the order of the changes, one
// call at a time, never under the list's lock (so it may read the list).
func NewList(onChange func(Snapshot)) *List {
	return &List{onChange: onChange}
}

// Items returns a copy of the items in order.
func (l *List) Items() []Item {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// Snapshot returns the current list.
func (l *List) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

// Progress returns how many items are completed and how many there are.
func (l *List) Progress() (done, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return progress(l.items)
}

func progress(items []Item) (done, total int) {
	for _, it := range items {
		if it.Status == Completed {
			done++
		}
	}
	return done, len(items)
}

func (l *List) snapshotLocked() Snapshot {
	done, total := progress(l.items)
	return Snapshot{Items: slices.Clone(l.items), Done: done, Total: total}
}

// Write replaces the whole list. An item keeps a positive ID it is given
// unless an earlier item already took it; an item without one takes the ID
// of an unclaimed current item with the same content, or a new ID. So a
// model that rewrites the list without ids still keeps them stable.
// Content must not be empty; an empty Status is Pending.
func (l *List) Write(items []Item) error {
	next := make([]Item, len(items))
	for i, it := range items {
		it.Content = strings.TrimSpace(it.Content)
		if it.Content == "" {
			return fmt.Errorf("todos[%d].content: required", i)
		}
		st, err := ParseStatus(string(it.Status))
		if err != nil {
			return fmt.Errorf("todos[%d].status: %v", i, err)
		}
		it.Status = st
		next[i] = it
	}

	l.mu.Lock()
	taken := make(map[int]bool, len(next))
	for i := range next {
		if id := next[i].ID; id > 0 && !taken[id] {
			taken[id] = true
		} else {
			next[i].ID = 0
		}
	}
	for i := range next {
		if next[i].ID != 0 {
			continue
		}
		for _, old := range l.items {
			if old.Content == next[i].Content && !taken[old.ID] {
				next[i].ID = old.ID
				taken[old.ID] = true
				break
			}
		}
	}
	for id := range taken {
		l.nextID = max(l.nextID, id)
	}
	for i := range next {
		if next[i].ID == 0 {
			l.nextID++
			next[i].ID = l.nextID
		}
	}
	l.setLocked(next)
	return nil
}

// Apply makes every update or, if one is invalid (unknown id, bad
// status), none of them.
func (l *List) Apply(updates []Update) error {
	l.mu.Lock()
	next := slices.Clone(l.items)
	for i, u := range updates {
		at := slices.IndexFunc(next, func(it Item) bool { return it.ID == u.ID })
		if at < 0 {
			l.mu.Unlock()
			return fmt.Errorf("update[%d].id: no item #%d", i, u.ID)
		}
		if u.Status != "" {
			st, err := ParseStatus(string(u.Status))
			if err != nil {
				l.mu.Unlock()
				return fmt.Errorf("update[%d].status: %v", i, err)
			}
			next[at].Status = st
		}
		if c := strings.TrimSpace(u.Content); c != "" {
			next[at].Content = c
		}
	}
	l.setLocked(next)
	return nil
}

// setLocked installs items, queues the snapshot if anything changed,
// unlocks, and delivers.
func (l *List) setLocked(items []Item) {
	changed := !slices.Equal(l.items, items)
	l.items = items
	if changed && l.onChange != nil {
		l.queue = append(l.queue, l.snapshotLocked())
	}
	l.mu.Unlock()
	if changed {
		l.drain()
	}
}

// drain delivers queued snapshots unless another goroutine already is;
// that one delivers whatever is queued meanwhile, which keeps the order
// without a goroutine of our own and without holding mu in onChange.
func (l *List) drain() {
	l.mu.Lock()
	if l.draining {
		l.mu.Unlock()
		return
	}
	l.draining = true
	locked := true
	defer func() {
		if !locked {
			l.mu.Lock()
		}
		l.draining = false
		l.mu.Unlock()
	}()
	for len(l.queue) > 0 {
		s := l.queue[0]
		l.queue = l.queue[1:]
		l.mu.Unlock()
		locked = false
		l.onChange(s)
		l.mu.Lock()
		locked = true
	}
	l.queue = nil
}

// MarshalJSON encodes the list as its Snapshot.
func (l *List) MarshalJSON() ([]byte, error) {
	return json.Marshal(l.Snapshot())
}

// UnmarshalJSON restores a list from a Snapshot, ids included; restoring
// counts as a change for the observer.
func (l *List) UnmarshalJSON(data []byte) error {
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	return l.Write(s.Items)
}

// Text renders items the way the todo tool shows them to the model.
func Text(items []Item) string {
	if len(items) == 0 {
		return "The todo list is empty"
	}
	done, total := progress(items)
	var b strings.Builder
	fmt.Fprintf(&b, "Todos (%d/%d completed):", done, total)
	for _, it := range items {
		switch it.Status {
		case Completed:
			fmt.Fprintf(&b, "\n- [x] #%d %s", it.ID, it.Content)
		case InProgress:
			fmt.Fprintf(&b, "\n- [~] #%d %s (in progress)", it.ID, it.Content)
		default:
			fmt.Fprintf(&b, "\n- [ ] #%d %s", it.ID, it.Content)
		}
	}
	return b.String()
}
