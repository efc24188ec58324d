package transcript

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"

	"github.com/agentd-dev/agentd/internal/llm"
)

// badLine is a line that did not decode.
type badLine struct {
	line int
	err  error
}

// parallelChunk is the least data worth a goroutine when opening a file.
// A variable so tests can exercise the parallel path with small files.
var parallelChunk = 512 << 10

// parseLines decodes every non-blank line of data. Long files are split
// at line boundaries and decoded on all cores: decoding is most of the
// cost of opening a session, and resuming a long one should not wait on
// one core.
func parseLines(data []byte) ([]record, []badLine) {
	n := min(runtime.GOMAXPROCS(0), len(data)/parallelChunk)
	if n <= 1 {
		return parseChunk(data, 0, 0)
	}
	starts := []int{0}
	for i := 1; i < n; i++ {
		at := max(i*len(data)/n, starts[len(starts)-1])
		nl := bytes.IndexByte(data[at:], '\n')
		if nl < 0 {
			break
		}
		starts = append(starts, at+nl+1)
	}
	starts = append(starts, len(data))
	type result struct {
		recs []record
		bad  []badLine
	}
	results := make([]result, len(starts)-1)
	// Line numbers of a chunk depend on the chunks before it.
	firstLine := make([]int, len(results))
	for i := 1; i < len(results); i++ {
		firstLine[i] = firstLine[i-1] + bytes.Count(data[starts[i-1]:starts[i]], []byte{'\n'})
	}
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, b := parseChunk(data[starts[i]:starts[i+1]], int64(starts[i]), firstLine[i])
			results[i] = result{r, b}
		}()
	}
	wg.Wait()
	var recs []record
	var bad []badLine
	for _, r := range results {
		recs = append(recs, r.recs...)
		bad = append(bad, r.bad...)
	}
	return recs, bad
}

// parseChunk decodes the lines of data, which starts at byte base of the
// file, after line number lineBase.
func parseChunk(data []byte, base int64, lineBase int) ([]record, []badLine) {
	var recs []record
	var bad []badLine
	in := new(interner)
	lineNo := lineBase
	for off := 0; off < len(data); {
		lineNo++
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			end += off
			next = end + 1
		} else {
			end = len(data)
		}
		line := data[off:end]
		off = next
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		p, err := parseLineWith(line, in, true)
		if err != nil {
			bad = append(bad, badLine{lineNo, err})
			continue
		}
		recs = append(recs, record{parsed: p, line: lineNo, end: base + int64(next)})
	}
	return recs, bad
}

// record is a line that decoded.
type record struct {
	parsed
	line int   // 1-based
	end  int64 // offset just past the line and its '\n'
}

// load builds the tree from a file's bytes.
func (f *File) load(data []byte) error {
	recs, bad := parseLines(data)
	if len(recs) == 0 || recs[0].header == nil {
		if len(recs) > 0 || len(bad) > 0 {
			return fmt.Errorf("%w: first line is not a session header", ErrNoHeader)
		}
		return fmt.Errorf("%w: empty file", ErrNoHeader)
	}
	last := recs[len(recs)-1]
	f.size = int64(len(data))
	for _, b := range bad {
		if b.line > last.line {
			// A torn append: everything after the last good line goes.
			f.size, f.truncate = last.end, true
			f.warnf("line %d: torn last line dropped (%v)", b.line, b.err)
			continue
		}
		if f.opts.strict {
			return fmt.Errorf("%w: line %d: %v", ErrCorrupt, b.line, b.err)
		}
		f.warnf("line %d: skipped: %v", b.line, b.err)
	}
	f.needNewline = f.size > 0 && data[f.size-1] != '\n'
	f.headerOnDisk = true

	f.header = *recs[0].header
	version := f.header.Version
	if version > CurrentVersion {
		f.warnf("session version %d is newer than %d; entries agentd does not know are kept as they are", version, CurrentVersion)
	}
	if version < CurrentVersion {
		f.migrate(recs, version)
	}
	for i := 1; i < len(recs); i++ {
		r := &recs[i]
		if r.header != nil {
			// pi can write a second header (it re-flushes everything if
			// it opens a file without an assistant message); like pi we
			// use the first.
			f.warnf("line %d: extra session header ignored", r.line)
			continue
		}
		e := r.entry
		if r.bodyErr != nil {
			f.warnf("line %d: %s entry %s kept as is: %v", r.line, e.Type, e.ID, r.bodyErr)
		}
		if e.ID == "" {
			if f.opts.strict {
				return fmt.Errorf("%w: line %d: entry without an id", ErrCorrupt, r.line)
			}
			f.warnf("line %d: entry without an id skipped", r.line)
			continue
		}
		if prev, ok := f.byID[e.ID]; ok {
			if sameEntry(prev, e) {
				continue // the duplicate pi's re-flush writes
			}
			f.warnf("line %d: duplicate entry id %s; the later entry wins", r.line, e.ID)
		}
		f.insert(e)
	}
	if err := f.checkTree(); err != nil {
		return err
	}
	return nil
}

// migrate brings a v1 or v2 file to v3 in memory, as pi does on load, and
// marks the file for rewriting before the next append: the ids v1
// migration invents must be on disk before new entries refer to them.
func (f *File) migrate(recs []record, version int) {
	if version < 2 {
		// v1 was a flat list: give every entry an id and chain them. A
		// compaction pointed at its first kept entry by index into the
		// file's lines (header included).
		taken := make(map[string]bool)
		prev := ""
		for i := range recs {
			e := recs[i].entry
			if e == nil {
				continue
			}
			e.ID = newEntryID(func(id string) bool { return taken[id] })
			taken[e.ID] = true
			e.ParentID = prev
			prev = e.ID
			if e.raw != nil {
				e.raw = spliceEnvelope(e.raw, e.ID, e.ParentID)
			}
		}
		for i := range recs {
			if idx := recs[i].firstKeptIndex; idx >= 0 && recs[i].entry != nil {
				if idx < len(recs) && recs[idx].entry != nil {
					recs[i].entry.FirstKeptEntryID = recs[idx].entry.ID
				}
			}
		}
	}
	// v2 → v3 renamed the message role hookMessage to custom, which
	// llm.Message's decoder already does.
	f.header.Version = CurrentVersion
	f.rewrite = true
	f.warnf("migrated from session version %d; the file is rewritten as version %d on the next append", version, CurrentVersion)
}

// spliceEnvelope adds id and parentId to an opaque v1 line, at the end of
// the object as pi's in-place migration does.
func spliceEnvelope(raw []byte, id, parentID string) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[len(raw)-1] != '}' {
		return raw
	}
	out := append([]byte(nil), raw[:len(raw)-1]...)
	if len(bytes.TrimSpace(out[1:])) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"id":`...)
	out = llm.AppendJSONString(out, id)
	out = append(out, `,"parentId":`...)
	if parentID == "" {
		out = append(out, "null"...)
	} else {
		out = llm.AppendJSONString(out, parentID)
	}
	return append(out, '}')
}

func sameEntry(a, b *Entry) bool {
	x, err1 := a.AppendJSON(nil)
	y, err2 := b.AppendJSON(nil)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// checkTree rejects parent cycles, which no writer produces and which
// would send pi into an endless loop, and notes orphans, which pi treats
// as roots.
func (f *File) checkTree() error {
	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]uint8, len(f.byID))
	var stack []string
	for id := range f.byID {
		for cur := id; cur != ""; {
			if s := state[cur]; s == done {
				break
			} else if s == visiting {
				return fmt.Errorf("%w: entry %s is its own ancestor", ErrCorrupt, cur)
			}
			state[cur] = visiting
			stack = append(stack, cur)
			e := f.byID[cur]
			if e.ParentID != "" && f.byID[e.ParentID] == nil {
				f.warnf("entry %s: parent %s not found; treated as a root", cur, e.ParentID)
				break
			}
			cur = e.ParentID
		}
		for _, s := range stack {
			state[s] = done
		}
		stack = stack[:0]
	}
	return nil
}
