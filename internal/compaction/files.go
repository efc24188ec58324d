package compaction

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/llm"
)

// fileOps collects the paths the built-in file tools were called with.
// Only the tools' names and their "path" argument are looked at, as in
// pi: other tools (bash, extensions) may touch files too, but nothing
// reliable can be said about which.
type fileOps struct {
	read, modified map[string]struct{}
}

func (f *fileOps) add(set *map[string]struct{}, path string) {
	if *set == nil {
		*set = make(map[string]struct{})
	}
	(*set)[path] = struct{}{}
}

func (f *fileOps) addDetails(d *Details) {
	for _, p := range d.ReadFiles {
		f.add(&f.read, p)
	}
	for _, p := range d.ModifiedFiles {
		f.add(&f.modified, p)
	}
}

func (f *fileOps) addMessages(msgs []*llm.Message) {
	var parser jsonfield.Parser
	for _, m := range msgs {
		if m.Role != llm.RoleAssistant {
			continue
		}
		for i := range m.Content {
			c := &m.Content[i]
			if c.Type != llm.ContentToolCall {
				continue
			}
			var set *map[string]struct{}
			switch c.Name {
			case "read":
				set = &f.read
			case "write", "edit":
				set = &f.modified
			default:
				continue
			}
			// Arguments are a valid object (llm repairs or refuses any
			// other); one that is not names no file.
			args, err := parser.Parse(c.Arguments)
			if err != nil {
				continue
			}
			if p := jsonfield.String(args.Get("path")); p != "" {
				f.add(set, p)
			}
		}
	}
}

// lists returns the files only read and the files modified, each sorted;
// a file both read and modified counts as modified.
func (f *fileOps) lists() (read, modified []string) {
	modified = make([]string, 0, len(f.modified))
	for p := range f.modified {
		modified = append(modified, p)
	}
	read = make([]string, 0, len(f.read))
	for p := range f.read {
		if _, ok := f.modified[p]; !ok {
			read = append(read, p)
		}
	}
	slices.Sort(read)
	slices.Sort(modified)
	return read, modified
}

// ParseDetails reads the details of a compaction entry written by agentd
// or pi. Entries without file lists, or with details of another shape (an
// extension's), give nil; non-string list elements are skipped.
func ParseDetails(raw json.RawMessage) *Details {
	var fields struct {
		ReadFiles     json.RawMessage `json:"readFiles"`
		ModifiedFiles json.RawMessage `json:"modifiedFiles"`
	}
	if json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	// Like pi, each list is taken if it is an array, whatever the other is.
	strs := func(list json.RawMessage) ([]string, bool) {
		var elems []json.RawMessage
		if len(list) == 0 || list[0] != '[' || json.Unmarshal(list, &elems) != nil {
			return []string{}, false
		}
		out := make([]string, 0, len(elems))
		for _, e := range elems {
			var s string
			if json.Unmarshal(e, &s) == nil && s != "" {
				out = append(out, s)
			}
		}
		return out, true
	}
	read, okRead := strs(fields.ReadFiles)
	modified, okModified := strs(fields.ModifiedFiles)
	if !okRead && !okModified {
		return nil
	}
	return &Details{ReadFiles: read, ModifiedFiles: modified}
}

// The tags the file lists are appended to a summary in. They are pi's, so
// a summary written by either reads the same to the other and to the
// model.
const (
	readOpen      = "<read-files>"
	readClose     = "</read-files>"
	modifiedOpen  = "<modified-files>"
	modifiedClose = "</modified-files>"
)

// formatFileLists renders the lists as pi appends them to a summary:
// a blank line, then each non-empty list in its tags.
func formatFileLists(read, modified []string) string {
	var b strings.Builder
	section := func(open, close string, paths []string) {
		if len(paths) == 0 {
			return
		}
		b.WriteString("\n\n")
		b.WriteString(open)
		for _, p := range paths {
			b.WriteByte('\n')
			b.WriteString(p)
		}
		b.WriteByte('\n')
		b.WriteString(close)
	}
	section(readOpen, readClose, read)
	section(modifiedOpen, modifiedClose, modified)
	return b.String()
}

// stripFileLists removes the file lists from the end of a summary. They
// are recomputed from the previous details and appended afresh; left in,
// the model would copy them into its summary and they would appear twice.
func stripFileLists(s string) string {
	for {
		t := strings.TrimRight(s, " \t\r\n")
		var open string
		switch {
		case strings.HasSuffix(t, readClose):
			open = readOpen
		case strings.HasSuffix(t, modifiedClose):
			open = modifiedOpen
		default:
			return t
		}
		i := strings.LastIndex(t, open)
		if i < 0 {
			return t
		}
		s = t[:i]
	}
}
