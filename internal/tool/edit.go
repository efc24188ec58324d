package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// maxEditBytes bounds the file edit will load: the edit works on whole
// strings, and a model has no business splicing a gigabyte file.
const maxEditBytes = 128 << 20

const utf8BOM = "\ufeff"

type editTool struct{ env Env }

// EditDetails are the details of a successful edit, in pi's shape.
type EditDetails struct {
	// Diff is the change in pi's numbered diff format (see renderDiff).
	Diff string `json:"diff"`
	// FirstChangedLine is the first changed line in the new file, 1-based.
	FirstChangedLine int `json:"firstChangedLine,omitempty"`
}

func (t *editTool) Spec() llm.Tool { return editSpec() }

func (t *editTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("edit", call.Args)
	edits := decodeEdits(a)
	a.onlyKeys("path", "edits")
	path, ok := a.str("path", true)
	if ok && path == "" {
		a.fail("path", "must not be empty")
	}
	if r, bad := a.failed(); bad {
		return r
	}
	abs, err := t.env.resolve(path)
	if err != nil {
		return Errorf("Invalid path %q: %v", path, err)
	}
	if r := t.env.checkWritable(abs, path); r != nil {
		return *r
	}
	if r := t.env.checkReadable(abs, path); r != nil {
		return *r
	}
	unlock, err := t.env.Locks.Lock(ctx, abs)
	if err != nil {
		return Errorf("Operation aborted")
	}
	defer unlock()
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}

	f, errResult := openRegular(abs, path)
	if f == nil {
		return errResult
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxEditBytes+1))
	f.Close()
	if err != nil {
		return Errorf("Cannot read %s: %v", path, unwrapPathError(err))
	}
	if len(raw) > maxEditBytes {
		return Errorf("%s is larger than %s; edit does not change files that big. Use bash (sed, patch) instead.", path, formatSize(maxEditBytes))
	}
	content := string(raw)
	bom := ""
	if strings.HasPrefix(content, utf8BOM) {
		// Models never include the invisible BOM in oldText; match without
		// it and put it back.
		bom, content = utf8BOM, content[len(utf8BOM):]
	}
	updated, err := applyEdits(content, edits, path)
	if err != nil {
		return Errorf("%s", err.Error())
	}
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}
	if err := writeFileInPlace(abs, []byte(bom+updated)); err != nil {
		return Errorf("Cannot write %s: %v", path, unwrapPathError(err))
	}
	before, _ := foldNewlines(content)
	after, _ := foldNewlines(updated)
	diff, first := renderDiff(before, after)
	return TextResult(fmt.Sprintf("Applied %d edit(s) to %s.", len(edits), path),
		EditDetails{Diff: diff, FirstChangedLine: first})
}

// decodeEdits reads edits[] and folds in the forms pi also accepts: edits
// sent as a JSON string (some models double-encode arrays) and a single
// top-level oldText/newText pair from the older one-edit schema.
func decodeEdits(a *args) []Replacement {
	var edits []Replacement
	if a.present("edits") {
		raw := bytes.TrimSpace(a.m["edits"])
		if len(raw) > 0 && raw[0] == '"' {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				if inner := bytes.TrimSpace([]byte(s)); len(inner) > 0 && inner[0] == '[' {
					raw = inner
				}
			}
		}
		var items []json.RawMessage
		if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			a.fail("edits", "must be an array of {oldText, newText} objects")
		} else {
			for i, item := range items {
				if r, ok := decodeEdit(a, fmt.Sprintf("edits.%d", i), item); ok {
					edits = append(edits, r)
				}
			}
		}
	}
	if a.present("oldText") || a.present("newText") {
		oldText, ok1 := a.str("oldText", true)
		newText, ok2 := a.str("newText", true)
		if ok1 && ok2 {
			edits = append(edits, Replacement{OldText: oldText, NewText: newText})
		}
		delete(a.m, "oldText")
		delete(a.m, "newText")
	} else if !a.present("edits") {
		a.fail("edits", "required array is missing")
		return nil
	}
	if len(edits) == 0 && len(a.errs) == 0 {
		a.fail("edits", "must contain at least one replacement")
	}
	return edits
}

func decodeEdit(a *args, field string, raw json.RawMessage) (Replacement, bool) {
	var m map[string]json.RawMessage
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		a.fail(field, "must be an object with oldText and newText")
		return Replacement{}, false
	}
	sub := &args{tool: a.tool, m: m}
	oldText, _ := sub.str("oldText", true)
	newText, _ := sub.str("newText", true)
	sub.onlyKeys("oldText", "newText")
	for _, e := range sub.errs {
		a.errs = append(a.errs, field+"."+e)
	}
	return Replacement{OldText: oldText, NewText: newText}, len(sub.errs) == 0
}
