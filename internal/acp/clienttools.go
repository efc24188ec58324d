package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

// clientTools are the tools that go through the editor when it offers
// them: reads and writes of text files (so the model sees unsaved
// buffers and the editor shows each change), and bash in the editor's
// terminal. They take the built-in tools' names and schemas, so the model
// and the permission policy see no difference.
//
// The editor does what it is asked with the editor's own rights, so
// nothing goes to it that the session's sandbox would not allow:
// writes and edits only where the sandbox lets tools write (others are
// refused as the built-in tools refuse them), reads only there too when
// the sandbox confines (elsewhere the model is told to read through
// bash, which runs here under the sandbox), and bash goes to the
// editor's terminal only in a full-access session; a confined session
// keeps the built-in bash, confined and asking to escalate as always.
func (ss *acpSession) clientTools(caps clientCapabilities) []tool.Tool {
	var out []tool.Tool
	builtin := func(name string) tool.Tool {
		t, err := tool.New(name, tool.Env{Cwd: ss.cwd})
		if err != nil {
			panic("acp: no built-in tool " + name) // the names below are the built-ins'
		}
		return t
	}
	if caps.FS.ReadTextFile {
		out = append(out, &editorRead{ss: ss, spec: builtin("read").Spec(), disk: builtin("read")})
	}
	if caps.FS.WriteTextFile {
		out = append(out, &editorWrite{ss: ss, spec: builtin("write").Spec()})
	}
	if caps.FS.ReadTextFile && caps.FS.WriteTextFile {
		out = append(out, &editorEdit{ss: ss, spec: builtin("edit").Spec()})
	}
	if caps.Terminal && !ss.policy.Confined() {
		out = append(out, &editorBash{ss: ss, spec: builtin("bash").Spec()})
	}
	return out
}

func (ss *acpSession) path(p string) string {
	// Models copy the editor's @-mentions.
	return absPath(ss.cwd, strings.TrimPrefix(p, "@"))
}

// mayWrite refuses, as the built-in write tool does, a write the
// session's sandbox does not allow; nil allows it. Links are resolved
// first: a link in the workspace is judged by where it leads.
func (ss *acpSession) mayWrite(abs, path string) *tool.Result {
	p := ss.policy
	if !p.Confined() {
		return nil
	}
	real, err := sandbox.RealPath(abs)
	if err != nil {
		r := tool.Errorf("Cannot write %s: the sandbox could not resolve where it leads (%v).", path, err)
		return &r
	}
	if p.AllowsWrite(real) {
		return nil
	}
	r := tool.Errorf("Cannot write %s: the sandbox (%s) does not allow it. Write inside the workspace, or ask the user to do it.", path, p.Describe())
	return &r
}

// mayRead refuses reading through the editor outside where a confined
// session may write (its workspace, the temp dir): the editor reads with
// its own rights, and what the sandbox hides from tools must stay hidden.
func (ss *acpSession) mayRead(abs, path string) *tool.Result {
	p := ss.policy
	if !p.Confined() {
		return nil
	}
	real, err := sandbox.RealPath(abs)
	if err == nil {
		for _, d := range p.Writable {
			if real == d || strings.HasPrefix(real, strings.TrimSuffix(d, "/")+"/") {
				return nil
			}
		}
	}
	r := tool.Errorf("Cannot read %s through the editor: in this sandbox (%s) the editor's files are read only inside the workspace. Read it with bash (cat), which runs under the sandbox.", path, p.Describe())
	return &r
}

type editorRead struct {
	ss   *acpSession
	spec llm.Tool
	// disk reads what an editor cannot hand over as text: images.
	disk tool.Tool
}

func (t *editorRead) Spec() llm.Tool { return t.spec }

var imageExt = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}

func (t *editorRead) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	var a struct {
		Path   string `json:"path"`
		Offset *int   `json:"offset"`
		Limit  *int   `json:"limit"`
	}
	if err := json.Unmarshal(call.Args, &a); err != nil || a.Path == "" {
		return tool.Errorf("read needs a \"path\" string")
	}
	if r := t.ss.mayRead(t.ss.path(a.Path), a.Path); r != nil {
		return *r
	}
	if imageExt[strings.ToLower(filepath.Ext(a.Path))] {
		return t.disk.Execute(ctx, call, update)
	}
	req := map[string]any{"sessionId": t.ss.id, "path": t.ss.path(a.Path)}
	start := 1
	if a.Offset != nil && *a.Offset > 1 {
		start = *a.Offset
		req["line"] = start
	}
	if a.Limit != nil && *a.Limit > 0 {
		req["limit"] = *a.Limit
	}
	var res struct {
		Content string `json:"content"`
	}
	if err := t.ss.a.conn.call(ctx, "fs/read_text_file", req, &res); err != nil {
		return tool.Errorf("Could not read %s: %v", a.Path, err)
	}
	return tool.TextResult(limitText(res.Content, start), nil)
}

// limitText keeps what fits the built-in tools' limits (lines and bytes)
// and says where to continue.
func limitText(s string, start int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	n, size := 0, 0
	for n < len(lines) && n < tool.MaxLines && size+len(lines[n]) <= tool.MaxBytes {
		size += len(lines[n])
		n++
	}
	if n == len(lines) {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", start, start+n-1, start+len(lines)-1, start+n)
}

type editorWrite struct {
	ss   *acpSession
	spec llm.Tool
}

func (t *editorWrite) Spec() llm.Tool { return t.spec }

func (t *editorWrite) Execute(ctx context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(call.Args, &a); err != nil || a.Path == "" || a.Content == nil {
		return tool.Errorf("write needs a \"path\" and a \"content\" string")
	}
	if r := t.ss.mayWrite(t.ss.path(a.Path), a.Path); r != nil {
		return *r
	}
	if err := t.ss.a.conn.call(ctx, "fs/write_text_file", map[string]any{"sessionId": t.ss.id, "path": t.ss.path(a.Path), "content": *a.Content}, nil); err != nil {
		return tool.Errorf("Could not write %s: %v", a.Path, err)
	}
	return tool.TextResult(fmt.Sprintf("Successfully wrote %d bytes to %s", len(*a.Content), a.Path), nil)
}

type editorEdit struct {
	ss   *acpSession
	spec llm.Tool
}

func (t *editorEdit) Spec() llm.Tool { return t.spec }

// Execute applies exact replacements to the editor's text of the file.
// Each oldText must occur exactly once in it, and the edits must not
// overlap; whitespace-tolerant matching is the built-in tool's only.
func (t *editorEdit) Execute(ctx context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	var a struct {
		Path  string `json:"path"`
		Edits []struct {
			OldText string `json:"oldText"`
			NewText string `json:"newText"`
		} `json:"edits"`
	}
	if err := json.Unmarshal(call.Args, &a); err != nil || a.Path == "" || len(a.Edits) == 0 {
		return tool.Errorf("edit needs a \"path\" and \"edits\" [{oldText, newText}]")
	}
	path := t.ss.path(a.Path)
	if r := t.ss.mayWrite(path, a.Path); r != nil {
		return *r
	}
	if r := t.ss.mayRead(path, a.Path); r != nil {
		return *r
	}
	var res struct {
		Content string `json:"content"`
	}
	if err := t.ss.a.conn.call(ctx, "fs/read_text_file", map[string]any{"sessionId": t.ss.id, "path": path}, &res); err != nil {
		return tool.Errorf("Could not read %s: %v", a.Path, err)
	}
	type span struct {
		at, end int
		text    string
	}
	var spans []span
	for i, e := range a.Edits {
		if e.OldText == "" {
			return tool.Errorf("edits[%d].oldText must not be empty", i)
		}
		switch n := strings.Count(res.Content, e.OldText); {
		case n == 0:
			return tool.Errorf("Could not find edits[%d].oldText in %s. It must match the file exactly, including whitespace.", i, a.Path)
		case n > 1:
			return tool.Errorf("edits[%d].oldText occurs %d times in %s. Add surrounding lines to make it unique.", i, n, a.Path)
		}
		at := strings.Index(res.Content, e.OldText)
		spans = append(spans, span{at, at + len(e.OldText), e.NewText})
	}
	for i := range spans {
		for j := range spans {
			if i != j && spans[i].at < spans[j].end && spans[j].at < spans[i].end {
				return tool.Errorf("edits[%d] and edits[%d] overlap in %s; merge them into one edit", i, j, a.Path)
			}
		}
	}
	var b strings.Builder
	pos := 0
	for pos <= len(res.Content) {
		next := -1
		for i, s := range spans {
			if s.at >= pos && (next < 0 || s.at < spans[next].at) {
				next = i
			}
		}
		if next < 0 {
			b.WriteString(res.Content[pos:])
			break
		}
		b.WriteString(res.Content[pos:spans[next].at])
		b.WriteString(spans[next].text)
		pos = spans[next].end
		spans[next].at = -1
	}
	if err := t.ss.a.conn.call(ctx, "fs/write_text_file", map[string]any{"sessionId": t.ss.id, "path": path, "content": b.String()}, nil); err != nil {
		return tool.Errorf("Could not write %s: %v", a.Path, err)
	}
	return tool.TextResult(fmt.Sprintf("Successfully replaced %d block(s) in %s.", len(a.Edits), a.Path), nil)
}

type editorBash struct {
	ss   *acpSession
	spec llm.Tool
}

func (t *editorBash) Spec() llm.Tool { return t.spec }

// Execute runs the command in a terminal of the editor, shown in the
// tool call while it runs, and returns its output's tail.
func (t *editorBash) Execute(ctx context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	var a struct {
		Command string   `json:"command"`
		Timeout *float64 `json:"timeout"`
	}
	if err := json.Unmarshal(call.Args, &a); err != nil || a.Command == "" {
		return tool.Errorf("bash needs a \"command\" string")
	}
	if a.Timeout != nil && *a.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*a.Timeout*float64(time.Second)))
		defer cancel()
	}
	conn, sid := t.ss.a.conn, t.ss.id
	var created struct {
		TerminalID string `json:"terminalId"`
	}
	if err := conn.call(ctx, "terminal/create", map[string]any{"sessionId": sid, "command": "bash", "args": []string{"-c", a.Command},
		"cwd": t.ss.cwd, "outputByteLimit": tool.MaxBytes}, &created); err != nil {
		return tool.Errorf("Could not start the command in the editor's terminal: %v", err)
	}
	term := created.TerminalID
	t.ss.setTerminal(call.ID, term)
	t.ss.update(toolCall{SessionUpdate: "tool_call_update", ToolCallID: call.ID, Status: "in_progress",
		Content: []toolCallContent{{Type: "terminal", TerminalID: term}}})
	// Release with a context of its own: the run's may be over.
	defer func() {
		rctx, cancel := context.WithTimeout(t.ss.ctx, 5*time.Second)
		defer cancel()
		_ = conn.call(rctx, "terminal/release", map[string]any{"sessionId": sid, "terminalId": term}, nil)
	}()
	var exit struct {
		ExitCode *int    `json:"exitCode"`
		Signal   *string `json:"signal"`
	}
	waitErr := conn.call(ctx, "terminal/wait_for_exit", map[string]any{"sessionId": sid, "terminalId": term}, &exit)
	if waitErr != nil {
		kctx, cancel := context.WithTimeout(t.ss.ctx, 5*time.Second)
		_ = conn.call(kctx, "terminal/kill", map[string]any{"sessionId": sid, "terminalId": term}, nil)
		cancel()
	}
	var output struct {
		Output    string `json:"output"`
		Truncated bool   `json:"truncated"`
	}
	octx, cancel := context.WithTimeout(t.ss.ctx, 5*time.Second)
	defer cancel()
	_ = conn.call(octx, "terminal/output", map[string]any{"sessionId": sid, "terminalId": term}, &output)
	text := output.Output
	if output.Truncated {
		text = "[earlier output cut by the editor's terminal]\n" + text
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return tool.Errorf("%s\n\nCommand timed out after %g seconds", text, *a.Timeout)
	case waitErr != nil:
		return tool.Errorf("%s\n\nCommand aborted", text)
	case exit.Signal != nil && *exit.Signal != "":
		return tool.Errorf("%s\n\nCommand killed by signal %s", text, *exit.Signal)
	case exit.ExitCode != nil && *exit.ExitCode != 0:
		return tool.Errorf("%s\n\nCommand exited with code %d", text, *exit.ExitCode)
	}
	if text == "" {
		text = "(no output)"
	}
	return tool.TextResult(text, nil)
}
