package transcript

import (
	"fmt"
	"path/filepath"

	"github.com/agentd-dev/agentd/internal/atomicfile"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Fork starts a new session from the conversation as it stood just before
// the user message fromEntryID (pi's /fork): the new file holds the path
// from the root to that message's parent, and the message's text is
// returned so a client can put it back in the editor, change it and
// resubmit. The new header's parentSession is this file's path.
//
// root is the sessions root the new file goes under (in SessionDir(root,
// Cwd())); "" puts it in this file's directory, as pi does.
func (f *File) Fork(fromEntryID, root string) (*File, string, error) {
	f.mu.RLock()
	e := f.byID[fromEntryID]
	if e == nil {
		f.mu.RUnlock()
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, fromEntryID)
	}
	if e.Type != TypeMessage || e.raw != nil || e.Message.Role != llm.RoleUser {
		f.mu.RUnlock()
		return nil, "", fmt.Errorf("%w: %s", ErrNotUser, fromEntryID)
	}
	text := e.Message.TextContent()
	path, labels := f.snapshotLocked(e.ParentID)
	f.mu.RUnlock()
	nf, err := f.branched(path, labels, root)
	if err != nil {
		return nil, "", err
	}
	return nf, text, nil
}

// Clone starts a new session holding the current branch (pi's /clone):
// the path from the root to the leaf, with the labels set on it. The new
// header's parentSession is this file's path. root is as for Fork.
func (f *File) Clone(root string) (*File, error) {
	f.mu.RLock()
	path, labels := f.snapshotLocked(f.leaf)
	f.mu.RUnlock()
	return f.branched(path, labels, root)
}

type labelCopy struct {
	target string
	labelInfo
}

// snapshotLocked returns the path to leaf without its label entries, and
// the labels currently set on entries of that path (wherever in the file
// the label entry is), in pi's order.
func (f *File) snapshotLocked(leaf string) ([]*Entry, []labelCopy) {
	full := f.branchLocked(leaf)
	path := full[:0:0]
	onPath := make(map[string]bool, len(full))
	for _, e := range full {
		if e.Type != TypeLabel {
			path = append(path, e)
			onPath[e.ID] = true
		}
	}
	var labels []labelCopy
	for _, t := range f.labelSeq {
		if onPath[t] {
			labels = append(labels, labelCopy{t, f.labels[t]})
		}
	}
	return path, labels
}

// branched writes a new session holding path followed by label entries
// re-created for labels (like pi's createBranchedSession). The file is
// written whole and at once, through a temporary file and a rename, so it
// never exists half-copied; pi instead waits for the next assistant
// message, which would lose the fork if agentd stopped first. An empty
// path gives a session with no file yet, as Create does.
func (f *File) branched(path []*Entry, labels []labelCopy, root string) (*File, error) {
	o := f.opts
	now := o.now()
	h := Header{Version: CurrentVersion, ID: newSessionID(now), Timestamp: formatISO(now), Cwd: f.header.Cwd, ParentSession: f.path}
	if f.memory {
		nf := newFile("", h, o)
		nf.memory = true
		f.copyInto(nf, path, labels)
		return nf, nil
	}
	dir := filepath.Dir(f.path)
	if root != "" {
		dir = SessionDir(root, f.header.Cwd)
	}
	if err := mkdirDurable(dir); err != nil {
		return nil, err
	}
	nf := newFile(filepath.Join(dir, fileName(h.Timestamp, h.ID)), h, o)
	f.copyInto(nf, path, labels)
	if len(nf.entries) == 0 {
		return nf, nil
	}
	b, err := encodeFile(&nf.header, nf.entries)
	if err != nil {
		return nil, err
	}
	if o.mirror != nil {
		if err := o.mirror(b); err != nil {
			return nil, err
		}
	}
	if err := atomicfile.Write(nf.path, b, o.sync != SyncNever); err != nil {
		return nil, err
	}
	nf.headerOnDisk, nf.size = true, int64(len(b))
	return nf, nil
}

// copyInto fills nf with path and re-created labels. Entries are
// immutable, so the new file shares them.
func (f *File) copyInto(nf *File, path []*Entry, labels []labelCopy) {
	for _, e := range path {
		nf.insert(e)
	}
	for _, l := range labels {
		le := &Entry{Type: TypeLabel, ID: newEntryID(func(id string) bool { return nf.byID[id] != nil }),
			ParentID: nf.leaf, Timestamp: l.timestamp, TargetID: l.target, Label: l.label}
		nf.insert(le)
	}
}
