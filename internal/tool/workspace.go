package tool

import (
	"context"
	"io/fs"
)

// WalkWorkspace visits what is under root the way the search tools see a
// project (see walkTree): .git directories are skipped, .gitignore and
// .ignore files hide what they match, symlinks are reported and never
// followed. skip, when not nil, prunes an entry by its '/'-separated path
// relative to root (a checkpoint store that lives in the workspace).
// visit gets each entry's relative path and type bits; it must not keep
// anything it is given beyond the call.
func WalkWorkspace(ctx context.Context, root string, skip func(rel string, isDir bool) bool, visit func(rel string, typ fs.FileMode) error) error {
	return walkTree(ctx, root, skip, func(e *walkEntry) (bool, error) {
		return true, visit(e.rel, e.typ)
	})
}

// LineRun is a run of lines with one fate in a LineDiff: Op is ' ' for
// lines both texts have, '-' for removed and '+' for added ones; each line
// keeps its "\n".
type LineRun struct {
	Op    byte
	Lines []string
}

// LineDiff compares two texts line by line with the edit tool's diff
// (Myers, bounded): within each changed region the removed lines come
// before the added ones.
func LineDiff(a, b string) []LineRun {
	parts := diffLines(a, b)
	out := make([]LineRun, len(parts))
	for i, p := range parts {
		op := byte(' ')
		switch p.op {
		case opDelete:
			op = '-'
		case opInsert:
			op = '+'
		}
		out[i] = LineRun{Op: op, Lines: p.lines}
	}
	return out
}
