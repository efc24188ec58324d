package tool

import (
	"strconv"
	"strings"
)

// diffContext is how many unchanged lines the edit diff shows around each
// change, as in pi.
const diffContext = 4

// maxDiffEdits caps the Myers search. Beyond it the changed region is
// shown as one removal plus one addition, which is what a change that
// large reads as anyway, and the search's memory stays bounded.
const maxDiffEdits = 1000

type diffOp int8

const (
	opEqual diffOp = iota
	opDelete
	opInsert
)

// diffPart is a run of lines with one fate, each line keeping its "\n".
type diffPart struct {
	op    diffOp
	lines []string
}

// splitLinesKeep splits s into lines that keep their trailing "\n"; a last
// line without one is its own token, so "x" and "x\n" differ, as in a
// line diff that respects a missing final newline.
func splitLinesKeep(s string) []string {
	if s == "" {
		return nil
	}
	out := make([]string, 0, strings.Count(s, "\n")+1)
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// diffLines compares two texts line by line. Within each changed region
// the removed lines come before the added ones.
func diffLines(a, b string) []diffPart {
	x, y := splitLinesKeep(a), splitLinesKeep(b)
	// The common head and tail are nearly all of a typical edit; trimming
	// them first leaves the quadratic part with only the changed lines.
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	var parts []diffPart
	add := func(op diffOp, line string) {
		if n := len(parts); n > 0 && parts[n-1].op == op {
			parts[n-1].lines = append(parts[n-1].lines, line)
			return
		}
		parts = append(parts, diffPart{op: op, lines: []string{line}})
	}
	for _, l := range x[:pre] {
		add(opEqual, l)
	}
	midX, midY := x[pre:len(x)-suf], y[pre:len(y)-suf]
	ops := myers(midX, midY)
	// Reorder each run of changes so deletions precede insertions.
	i, j := 0, 0
	for k := 0; k < len(ops); {
		if ops[k] == opEqual {
			add(opEqual, midX[i])
			i++
			j++
			k++
			continue
		}
		var dels, ins int
		for ; k < len(ops) && ops[k] != opEqual; k++ {
			if ops[k] == opDelete {
				dels++
			} else {
				ins++
			}
		}
		for ; dels > 0; dels-- {
			add(opDelete, midX[i])
			i++
		}
		for ; ins > 0; ins-- {
			add(opInsert, midY[j])
			j++
		}
	}
	for _, l := range x[len(x)-suf:] {
		add(opEqual, l)
	}
	return parts
}

// myers returns the edit script turning x into y (Myers' O(ND) greedy
// algorithm, keeping each round's frontier for the backtrack).
func myers(x, y []string) []diffOp {
	n, m := len(x), len(y)
	if n == 0 || m == 0 {
		return replaceAll(n, m)
	}
	// Compare interned ids, not strings.
	ids := make(map[string]int, n+m)
	xi, yi := make([]int, n), make([]int, m)
	for i, s := range x {
		id, ok := ids[s]
		if !ok {
			id = len(ids)
			ids[s] = id
		}
		xi[i] = id
	}
	for i, s := range y {
		id, ok := ids[s]
		if !ok {
			id = len(ids)
			ids[s] = id
		}
		yi[i] = id
	}
	maxD := min(n+m, maxDiffEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		snap := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var px int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				px = v[off+k+1]
			} else {
				px = v[off+k-1] + 1
			}
			py := px - k
			for px < n && py < m && xi[px] == yi[py] {
				px++
				py++
			}
			v[off+k] = px
			if px >= n && py >= m {
				found = d
			}
		}
		for k := -d; k <= d; k++ {
			snap[k+d] = v[off+k]
		}
		trace = append(trace, snap)
	}
	if found < 0 {
		return replaceAll(n, m)
	}
	// Walk back from (n, m) through the saved frontiers.
	ops := make([]diffOp, 0, n+m)
	px, py := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1]
		at := func(k int) int { return prev[k+(d-1)] }
		k := px - py
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		sx := at(pk)
		sy := sx - pk
		for px > sx && py > sy {
			ops = append(ops, opEqual)
			px--
			py--
		}
		if pk == k+1 {
			ops = append(ops, opInsert)
		} else {
			ops = append(ops, opDelete)
		}
		px, py = sx, sy
	}
	for px > 0 && py > 0 {
		ops = append(ops, opEqual)
		px--
		py--
	}
	for l, r := 0, len(ops)-1; l < r; l, r = l+1, r-1 {
		ops[l], ops[r] = ops[r], ops[l]
	}
	return ops
}

func replaceAll(n, m int) []diffOp {
	ops := make([]diffOp, 0, n+m)
	for range n {
		ops = append(ops, opDelete)
	}
	for range m {
		ops = append(ops, opInsert)
	}
	return ops
}

// renderDiff formats a line diff the way pi's edit details carry it, which
// clients parse: one line per diff line, "+" / "-" / " " then the line
// number (new-file numbers for additions, old-file numbers otherwise)
// padded to a common width, a space and the text; at most diffContext
// unchanged lines around each change, and "..." where lines are skipped.
// It also returns the first changed line, numbered in the new file.
func renderDiff(oldText, newText string) (string, int) {
	parts := diffLines(oldText, newText)
	width := len(strconv.Itoa(max(countSplit(oldText), countSplit(newText))))
	pad := func(n int) string {
		s := strconv.Itoa(n)
		if len(s) < width {
			s = strings.Repeat(" ", width-len(s)) + s
		}
		return s
	}
	blank := strings.Repeat(" ", width)
	var out []string
	emit := func(sign byte, n int, line string) {
		out = append(out, string(sign)+pad(n)+" "+strings.TrimSuffix(line, "\n"))
	}
	oldN, newN := 1, 1
	first := 0
	for i, p := range parts {
		if p.op != opEqual {
			if first == 0 {
				first = newN
			}
			for _, l := range p.lines {
				if p.op == opInsert {
					emit('+', newN, l)
					newN++
				} else {
					emit('-', oldN, l)
					oldN++
				}
			}
			continue
		}
		before := i > 0
		after := i < len(parts)-1
		lines := p.lines
		show := func(ls []string) {
			for _, l := range ls {
				emit(' ', oldN, l)
				oldN++
				newN++
			}
		}
		skip := func(n int) {
			out = append(out, " "+blank+" ...")
			oldN += n
			newN += n
		}
		switch {
		case before && after:
			if len(lines) <= 2*diffContext {
				show(lines)
			} else {
				show(lines[:diffContext])
				skip(len(lines) - 2*diffContext)
				show(lines[len(lines)-diffContext:])
			}
		case before:
			n := min(diffContext, len(lines))
			show(lines[:n])
			if len(lines) > n {
				skip(len(lines) - n)
			}
		case after:
			n := max(0, len(lines)-diffContext)
			if n > 0 {
				skip(n)
			}
			show(lines[n:])
		default:
			oldN += len(lines)
			newN += len(lines)
		}
	}
	return strings.Join(out, "\n"), first
}

// countSplit is the number of pieces s.split("\n") yields, which sets the
// width of line numbers in pi's diff format.
func countSplit(s string) int { return strings.Count(s, "\n") + 1 }
