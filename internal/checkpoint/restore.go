package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// Restored is what a restore did.
type Restored struct {
	// Undo is the snapshot of the workspace taken just before the
	// restore: restoring it undoes this one.
	Undo string `json:"undo"`
	// Written are the paths written (created or changed back), Deleted
	// the paths removed.
	Written []string `json:"written"`
	Deleted []string `json:"deleted"`
	// Kept are paths the restore left as they are, and why.
	Kept []Skip `json:"kept,omitempty"`
}

// Restore makes the workspace's recorded files what snapshot id holds:
// files it lists are written back (content, executable bit, symlinks as
// links), files recorded now that it does not list are deleted. First it
// takes a snapshot of the workspace as it is (Restored.Undo), so that
// every restore can be undone; a file that snapshot could not record
// (too large, unreadable) is not overwritten, and nothing is deleted
// when snapshot id was cut short by a limit.
//
// Every change goes through an os.Root of the workspace: a symlink a
// model left in the workspace (to a file or to a directory on the way)
// is replaced, never written through, and no path leaves the workspace.
// All content is checked against its hash before anything is touched.
func (s *Store) Restore(ctx context.Context, id string) (*Restored, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	target, err := s.Tree(id)
	if err != nil {
		return nil, err
	}
	undoID, cur, err := s.snapshotLocked(ctx)
	if err != nil {
		return nil, err
	}
	res := &Restored{Undo: undoID, Written: []string{}, Deleted: []string{}}
	root, err := os.OpenRoot(s.ws)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: opening the workspace: %w", err)
	}
	defer root.Close()

	var writes []Entry
	for _, e := range target.Entries {
		c, ok := cur.find(e.Path)
		if ok && c.same(e) {
			continue
		}
		if !ok {
			if cur.skipped(e.Path) {
				res.Kept = append(res.Kept, Skip{Path: e.Path, Reason: "its current version could not be saved, so it is not overwritten"})
				continue
			}
			if fi, err := root.Lstat(e.Path); err == nil {
				reason := "its current version was not saved (snapshot limit), so it is not overwritten"
				if fi.IsDir() {
					reason = "it is a directory now"
				}
				res.Kept = append(res.Kept, Skip{Path: e.Path, Reason: reason})
				continue
			}
		}
		writes = append(writes, e)
	}
	var deletes []string
	for _, c := range cur.Entries {
		if _, ok := target.find(c.Path); ok {
			continue
		}
		switch {
		case target.skipped(c.Path):
			res.Kept = append(res.Kept, Skip{Path: c.Path, Reason: "the checkpoint did not record it"})
		case target.Partial:
			res.Kept = append(res.Kept, Skip{Path: c.Path, Reason: "the checkpoint stopped at a limit, so it may have existed"})
		default:
			deletes = append(deletes, c.Path)
		}
	}
	// Check every blob before changing anything.
	for _, e := range writes {
		if e.IsLink() {
			continue
		}
		if _, err := s.object(e.Hash); err != nil {
			return nil, fmt.Errorf("checkpoint: cannot restore %s: %w; nothing was changed", e.Path, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for _, p := range deletes {
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("checkpoint: deleting %s: %w", p, err)
		}
		res.Deleted = append(res.Deleted, p)
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, e := range writes {
		if err := s.restoreEntry(root, e); err != nil {
			return res, fmt.Errorf("checkpoint: restoring %s: %w", e.Path, err)
		}
		res.Written = append(res.Written, e.Path)
	}
	// Directories left empty by the deletions go too, deepest first,
	// unless the snapshot has something under them; a directory with
	// anything else in it (an ignored file) stays.
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range ds {
		if !target.hasUnder(d) {
			root.Remove(d) // fails, as it should, when not empty
		}
	}
	return res, nil
}

func (t *Tree) hasUnder(dir string) bool {
	i, _ := slices.BinarySearchFunc(t.Entries, dir+"/", func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	return i < len(t.Entries) && strings.HasPrefix(t.Entries[i].Path, dir+"/")
}

// restoreEntry writes one entry: its parent directories are made real
// directories (a symlink or file in their place is removed), and the
// entry is written to a temporary name and renamed over the path, which
// replaces a symlink there instead of writing through it.
func (s *Store) restoreEntry(root *os.Root, e Entry) error {
	if err := ensureDir(root, path.Dir(e.Path)); err != nil {
		return err
	}
	if fi, err := root.Lstat(e.Path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", e.Path)
	}
	if e.IsLink() {
		if err := root.Remove(e.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return root.Symlink(e.Link, e.Path)
	}
	data, err := s.object(e.Hash)
	if err != nil {
		return err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(path.Dir(e.Path), "."+path.Base(e.Path)+".agentd-restore-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fs.FileMode(e.Mode))
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Chmod(fs.FileMode(e.Mode))
	if err := errors.Join(werr, cerr, f.Close()); err != nil {
		root.Remove(tmp)
		return err
	}
	if err := root.Rename(tmp, e.Path); err != nil {
		root.Remove(tmp)
		return err
	}
	return nil
}

// ensureDir makes every element of dir a directory, replacing a symlink
// found in the way (a link is never followed to write elsewhere).
func ensureDir(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case fi.IsDir():
			continue
		case fi.Mode()&fs.ModeSymlink == 0:
			// A recorded file here was deleted before; this one was
			// never saved, so it is not thrown away.
			return fmt.Errorf("%s is a file that was not recorded, not a directory", p)
		default:
			if err := root.Remove(p); err != nil {
				return err
			}
		}
		if err := root.Mkdir(p, 0o755); err != nil {
			return err
		}
	}
	return nil
}
