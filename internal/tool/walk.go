package tool

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// errStopWalk ends a walk early without being an error.
var errStopWalk = errors.New("stop walk")

// walkEntry is one file or directory met by walkTree.
type walkEntry struct {
	abs  string      // absolute path
	rel  string      // relative to the walk's root, '/'-separated
	name string      // last element
	typ  fs.FileMode // type bits only, from the directory listing (symlinks not followed)
}

func (e *walkEntry) isDir() bool { return e.typ.IsDir() }

// walkTree visits everything under root in lexical order, depth first,
// the way ripgrep and fd see a project: .git is skipped, .gitignore and
// .ignore files (nested ones too, and those of the ancestors up to the
// repository root) hide what they match, hidden files are included, and
// symlinks are reported but never followed, so cycles cannot trap it.
// visit returning errStopWalk ends the walk; descend=false prunes a
// directory. Unreadable directories are skipped silently, as rg does.
// hidden, when not nil, leaves out what it says of an entry's path
// relative to root: what the sandbox hides (a hidden directory that holds
// a visible one is still walked, for that one).
func walkTree(ctx context.Context, root string, hidden func(rel string, isDir bool) bool, visit func(e *walkEntry) (descend bool, err error)) error {
	w := &walker{ctx: ctx, visit: visit, hidden: hidden}
	stack := ancestorIgnores(root)
	err := w.dir(root, "", stack)
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

type walker struct {
	ctx    context.Context
	visit  func(e *walkEntry) (bool, error)
	hidden func(rel string, isDir bool) bool
	entry  walkEntry // reused: visit must not keep the pointer
}

func (w *walker) dir(abs, rel string, stack []*ignoreSet) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil
	}
	has := func(name string) bool {
		// entries are sorted by name.
		lo, hi := 0, len(entries)
		for lo < hi {
			m := (lo + hi) / 2
			if entries[m].Name() < name {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return lo < len(entries) && entries[lo].Name() == name
	}
	if set := loadIgnoreSet(abs, has); set != nil {
		stack = append(stack[:len(stack):len(stack)], set)
	}
	for _, d := range entries {
		name := d.Name()
		if name == ".git" {
			continue
		}
		childAbs := filepath.Join(abs, name)
		childRel := name
		if rel != "" {
			childRel = rel + "/" + name
		}
		typ := d.Type()
		if ignoredBy(stack, childAbs, name, typ.IsDir()) || (w.hidden != nil && w.hidden(childRel, typ.IsDir())) {
			continue
		}
		w.entry = walkEntry{abs: childAbs, rel: childRel, name: name, typ: typ}
		descend, err := w.visit(&w.entry)
		if err != nil {
			return err
		}
		if typ.IsDir() && descend {
			if err := w.dir(childAbs, childRel, stack); err != nil {
				return err
			}
		}
	}
	return nil
}

// ignoredBy asks the ignore sets, innermost first; the first that has an
// opinion decides.
func ignoredBy(stack []*ignoreSet, abs, name string, isDir bool) bool {
	for i := len(stack) - 1; i >= 0; i-- {
		s := stack[i]
		prefix := len(s.dir) + 1
		if s.dir == "/" {
			prefix = 1
		}
		if len(abs) < prefix {
			continue
		}
		rel := filepath.ToSlash(abs[prefix:])
		if ignored, decided := s.match(rel, name, isDir); decided {
			return ignored
		}
	}
	return false
}
