package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentd-dev/agentd/internal/atomicfile"

	"github.com/agentd-dev/agentd/internal/llm"
)

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
