package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Bounds of Tree, as pi-server's: a client gets a bounded answer however
// large or deep a session has grown.
const (
	// MaxTreeNodes is the most nodes Tree returns.
	MaxTreeNodes = 10000
	// MaxTreeDepth is the deepest level Tree descends to (roots are at
	// 0); entries below it are left out with their subtrees.
	MaxTreeDepth = 1000
	// treePreviewLen is the most UTF-16 code units (JavaScript's string
	// length, which clients measure in) a node's preview keeps.
	treePreviewLen = 400
)

// TreeNode is one entry of a session's tree as a client shows it.
type TreeNode struct {
	EntryID  string
	ParentID string // "" for a root
	Type     transcript.EntryType
	Role     llm.Role // of a message entry; "" for other entries
	// Text previews the entry on one line: whitespace collapsed, at most
	// 400 characters then "…"; "[role]" or "[type]" when it has no text.
	Text      string
	Timestamp string // as written; "" if the entry has none
	Label     string // the label set on the entry, "" if none
}

// Tree is a session's entry tree.
type Tree struct {
	// LeafID is the current position, "" before the first entry.
	LeafID string
	// Nodes are in pre-order: each node, then its children's subtrees,
	// children oldest first. Roots come in file order.
	Nodes []TreeNode
}

// Tree returns the session's whole entry tree, every branch and every
// kind of entry, bounded by MaxTreeNodes and MaxTreeDepth.
func (s *Session) Tree() Tree {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	// The leaf first: entries are only ever added, so the snapshot taken
	// after it always holds it.
	leaf := f.Leaf()
	return Tree{LeafID: leaf, Nodes: treeNodes(f.Entries(), MaxTreeNodes, MaxTreeDepth)}
}

// LeafID is the transcript's current entry: the conversation as it
// stands.
func (s *Session) LeafID() string {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	return f.Leaf()
}

// treeNodes lays out entries (in file order) as pi's getTree shapes them
// and pi-server flattens them: an entry whose parent is missing is a root;
// a duplicated id counts once, as its last line (the one the transcript
// keeps); children are ordered by timestamp, file order among equals.
func treeNodes(entries []transcript.Entry, maxNodes, maxDepth int) []TreeNode {
	last := make(map[string]int, len(entries))
	for i := range entries {
		last[entries[i].ID] = i
	}
	labels := map[string]string{}
	var roots []int
	children := map[string][]int{}
	for i := range entries {
		e := &entries[i]
		if e.Type == transcript.TypeLabel && !e.Opaque() {
			if e.Label == "" {
				delete(labels, e.TargetID)
			} else {
				labels[e.TargetID] = e.Label
			}
		}
		if last[e.ID] != i {
			continue
		}
		if _, ok := last[e.ParentID]; e.ParentID == "" || e.ParentID == e.ID || !ok {
			roots = append(roots, i)
		} else {
			children[e.ParentID] = append(children[e.ParentID], i)
		}
	}
	for _, kids := range children {
		sort.SliceStable(kids, func(a, b int) bool {
			ta, tb := entries[kids[a]].Time(), entries[kids[b]].Time()
			// An unreadable timestamp sorts as pi's NaN does: equal to all.
			return !ta.IsZero() && !tb.IsZero() && ta.Before(tb)
		})
	}
	type pending struct{ i, depth int }
	stack := make([]pending, 0, len(roots))
	for k := len(roots) - 1; k >= 0; k-- {
		stack = append(stack, pending{roots[k], 0})
	}
	out := make([]TreeNode, 0, min(len(entries), maxNodes))
	var jp jsonfield.Parser // for the lines of opaque entries and custom data
	for len(stack) > 0 && len(out) < maxNodes {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p.depth > maxDepth {
			continue
		}
		e := &entries[p.i]
		out = append(out, treeNode(e, labels[e.ID], &jp))
		kids := children[e.ID]
		for k := len(kids) - 1; k >= 0; k-- {
			stack = append(stack, pending{kids[k], p.depth + 1})
		}
	}
	return out
}

func treeNode(e *transcript.Entry, label string, jp *jsonfield.Parser) TreeNode {
	n := TreeNode{EntryID: e.ID, ParentID: e.ParentID, Type: e.Type, Timestamp: e.Timestamp, Label: label}
	var p preview
	if e.Opaque() {
		n.Role = opaqueText(&p, e, jp)
	} else {
		if e.Type == transcript.TypeMessage && e.Message != nil {
			n.Role = e.Message.Role
		}
		entryText(&p, e, jp)
	}
	n.Text = p.finish()
	if n.Text == "" {
		if n.Role != "" {
			n.Text = "[" + string(n.Role) + "]"
		} else {
			n.Text = "[" + string(e.Type) + "]"
		}
	}
	return n
}

// preview builds a node's text the way pi-server's normalizePreview
// treats the whole text: every run of whitespace (JavaScript's \s) one
// space, trimmed, cut to treePreviewLen UTF-16 code units (never inside a
// surrogate pair) with "…" after a cut. It does so as the text is added
// and stops looking once full, so a long message costs no more than a
// short one.
type preview struct {
	b     strings.Builder
	units int
	space bool // whitespace since the last character kept
	full  bool // a character did not fit
	any   bool // something was added, if only whitespace
}

func (p *preview) add(s string) {
	if s != "" {
		p.any = true
	}
	if p.b.Cap() == 0 {
		// Room for the usual preview, ASCII, cut or not, in one go.
		p.b.Grow(min(len(s), treePreviewLen) + len("…"))
	}
	for i := 0; i < len(s) && !p.full; {
		// Runs of ASCII letters go in whole: text is mostly those, and a
		// preview is built for every node of a tree.
		if c := s[i]; c < utf8.RuneSelf && !jsSpace(rune(c)) {
			j := i + 1
			for j < len(s) && s[j] < utf8.RuneSelf && !jsSpace(rune(s[j])) {
				j++
			}
			p.put(s[i:j], j-i)
			i = j
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if jsSpace(r) {
			p.space = p.b.Len() > 0
		} else {
			p.put(s[i:i+size], utf16.RuneLen(r)) // never -1: DecodeRune gives no surrogates
		}
		i += size
	}
}

// put adds text of the given UTF-16 length, after the pending space. Of
// an ASCII run (units == len(text)) what fits goes in; a longer character
// goes in whole or not at all.
func (p *preview) put(text string, units int) {
	if p.space {
		if p.units == treePreviewLen {
			p.full = true
			return
		}
		p.b.WriteByte(' ')
		p.units++
		p.space = false
	}
	room := treePreviewLen - p.units
	if units <= room {
		p.b.WriteString(text)
		p.units += units
		return
	}
	if units == len(text) {
		p.b.WriteString(text[:room])
		p.units += room
	}
	p.full = true
}

// finish returns the preview. Call it once, after the last add.
func (p *preview) finish() string {
	if p.full {
		p.b.WriteString("…")
	}
	return p.b.String()
}

// entryText adds to p what a node shows of an entry.
func entryText(p *preview, e *transcript.Entry, jp *jsonfield.Parser) {
	switch e.Type {
	case transcript.TypeMessage:
		m := e.Message
		blocksText(p, m.Content)
		if p.any {
			return
		}
		// Messages without content: a command the user ran shows its
		// output (only its output, however empty, as pi-server), a
		// summary its summary.
		switch m.Role {
		case llm.RoleBashExecution:
			p.add(m.Output)
		case llm.RoleBranchSummary, llm.RoleCompactionSummary:
			p.add(m.Summary)
		}
	case transcript.TypeCustomMessage:
		blocksText(p, e.Content)
	case transcript.TypeBranchSummary, transcript.TypeCompaction:
		p.add(e.Summary)
	case transcript.TypeModelChange:
		if e.Provider != "" && e.ModelID != "" {
			p.add(e.Provider + "/" + e.ModelID)
		} else {
			p.add(e.ModelID)
		}
	case transcript.TypeThinkingLevelChange:
		p.add(string(e.ThinkingLevel))
	case transcript.TypeLabel:
		p.add(labelText(e.Label, e.TargetID))
	case transcript.TypeCustom:
		if e.CustomType != "" {
			p.add(e.CustomType)
		} else if e.Data != nil {
			p.add(customDataText(e.Data, jp))
		}
	case transcript.TypeSessionInfo:
		p.add(e.Name)
	}
}

// blocksText adds the text and the reasoning of content blocks.
func blocksText(p *preview, content []llm.Content) {
	for i := range content {
		switch c := &content[i]; c.Type {
		case llm.ContentText:
			p.add(c.Text)
		case llm.ContentThinking:
			p.add(c.Thinking)
		}
	}
}

func labelText(label, target string) string {
	if label == "" {
		label = "(cleared)"
	}
	if target != "" {
		label += " → " + target
	}
	return label
}

// customDataText shows a custom entry's data: a string as it is,
// anything else as JSON, as written.
func customDataText(data json.RawMessage, jp *jsonfield.Parser) string {
	v, err := jp.Parse(data)
	switch {
	case err != nil:
		return ""
	case jsonfield.IsString(v):
		return jsonfield.String(v)
	}
	return string(data)
}

// rawField is the value of line's first top-level field key as written
// (fastjson keeps no text of what it parsed), nil if it has none.
func rawField(line []byte, key string) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k == key {
			return v
		}
	}
	return nil
}

// opaqueText adds to p what a node shows of an entry agentd keeps but
// does not interpret, read straight from its line by the same rules, and
// returns the role of a message entry. A field of another type than the
// rule's is as good as missing.
func opaqueText(p *preview, e *transcript.Entry, jp *jsonfield.Parser) llm.Role {
	line, err := jp.Parse(e.Raw())
	if err != nil {
		return "" // not seen: the transcript kept only lines that are JSON
	}
	var role llm.Role
	if e.Type == transcript.TypeMessage {
		role = llm.Role(jsonfield.String(line.Get("message", "role")))
	}
	str := jsonfield.String
	blocks := func(v *fastjson.Value) {
		if v == nil {
			return
		}
		var list []*fastjson.Value
		switch v.Type() {
		case fastjson.TypeString:
			p.add(str(v))
			return
		case fastjson.TypeNull:
			return
		case fastjson.TypeArray:
			list = v.GetArray()
		default:
			// One block standing alone reads as a list of it.
			list = []*fastjson.Value{v}
		}
		for _, c := range list {
			if jsonfield.IsString(c) {
				p.add(str(c))
				continue
			}
			for _, k := range []string{"text", "thinking", "content"} {
				if f := c.Get(k); jsonfield.IsString(f) {
					p.add(str(f))
					break
				}
			}
		}
	}
	switch e.Type {
	case transcript.TypeMessage:
		m := line.Get("message")
		if blocks(m.Get("content")); p.any {
			return role
		}
		// The first of these that is a string, however empty.
		for _, k := range []string{"text", "output", "command", "summary"} {
			if f := m.Get(k); jsonfield.IsString(f) {
				p.add(str(f))
				break
			}
		}
	case transcript.TypeCustomMessage:
		blocks(line.Get("content"))
	case transcript.TypeBranchSummary, transcript.TypeCompaction:
		p.add(str(line.Get("summary")))
	case transcript.TypeModelChange:
		if pr, m := str(line.Get("provider")), str(line.Get("modelId")); pr != "" && m != "" {
			p.add(pr + "/" + m)
		} else {
			p.add(m)
		}
	case transcript.TypeThinkingLevelChange:
		p.add(str(line.Get("thinkingLevel")))
	case transcript.TypeLabel:
		p.add(labelText(str(line.Get("label")), str(line.Get("targetId"))))
	case transcript.TypeCustom:
		if t := str(line.Get("customType")); t != "" {
			p.add(t)
		} else if d := line.Get("data"); jsonfield.IsString(d) {
			p.add(str(d))
		} else if d != nil {
			p.add(string(rawField(e.Raw(), "data")))
		}
	case transcript.TypeSessionInfo:
		p.add(str(line.Get("name")))
	}
	return role
}

// jsSpace is JavaScript's \s: the same set its String#trim strips.
func jsSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// NavigateOptions say what NavigateTree does besides moving.
type NavigateOptions struct {
	// Summarize asks the model for a note about the path being left,
	// recorded as a branch_summary entry where the conversation goes on.
	Summarize bool
	// CustomInstructions guide the note; with ReplaceInstructions they
	// are the whole request instead of agentd's.
	CustomInstructions  string
	ReplaceInstructions bool
	// Label, if set, labels the summary entry, or without a summary the
	// target entry.
	Label string
}

// NavigateResult is how a navigation ended.
type NavigateResult struct {
	// EditorText is the text of the target when it was a user or custom
	// message: the conversation moved to just before it, so a client can
	// offer it for editing and sending again. HasEditorText tells an
	// empty text from none.
	EditorText    string
	HasEditorText bool
	// Cancelled and Aborted are set when the summary was aborted; the
	// session was left as it was.
	Cancelled bool
	Aborted   bool
	// SummaryEntryID is the branch_summary entry recorded, "" if none.
	SummaryEntryID string
}

// NavigateTree moves the session to another entry of its tree, as pi's
// navigateTree: to a user or custom message's parent (the message comes
// back as EditorText), to any other entry itself. With opts.Summarize
// the entries left behind, from the current leaf back to where the two
// paths meet, are summarised by the model first, and the summary is
// recorded at the new position (when that path holds no message there is
// nothing to summarise, and no summary). The agent's context is then
// rebuilt from there; the model and thinking level stay as they are.
//
// Moving to the current leaf changes nothing. An unknown entry is a
// fault.NotFound error; a session that is running (or summarising) is a
// fault.Busy one, and while a navigation summarises, prompts are refused
// as during a run. Abort (or AbortCompaction, or cancelling ctx) stops
// the summary and leaves the session where it was, reported as Aborted.
func (s *Session) NavigateTree(ctx context.Context, targetID string, opts NavigateOptions) (NavigateResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	release, err := s.claim(cancel)
	if err != nil {
		return NavigateResult{}, err
	}
	// After release (defers run last first): the calls the new position
	// ends with wait for a person.
	defer s.repark()
	defer release()

	s.mu.Lock()
	f, model := s.file, s.model
	s.mu.Unlock()
	oldLeaf := f.Leaf()
	if targetID == oldLeaf {
		return NavigateResult{}, nil
	}
	target, ok := f.Entry(targetID)
	if !ok {
		return NavigateResult{}, fault.Errorf(fault.NotFound, "Entry %s not found", targetID)
	}

	var res NavigateResult
	newLeaf := targetID
	switch {
	case target.Type == transcript.TypeMessage && target.Message != nil && target.Message.Role == llm.RoleUser:
		newLeaf, res.EditorText, res.HasEditorText = target.ParentID, target.Message.TextContent(), true
	case target.Type == transcript.TypeCustomMessage && !target.Opaque():
		m := llm.Message{Content: target.Content}
		newLeaf, res.EditorText, res.HasEditorText = target.ParentID, m.TextContent(), true
	}
	if _, ok := f.Entry(newLeaf); !ok {
		newLeaf = "" // an orphan's parent is missing: it is a root, as the tree shows it
	}

	var summary *compaction.BranchSummary
	if opts.Summarize {
		left := leftBehind(f, oldLeaf, targetID)
		if len(left.Messages) > 0 {
			left.CustomInstructions, left.ReplaceInstructions = opts.CustomInstructions, opts.ReplaceInstructions
			sum, err := s.summarizeBranch(ctx, model, left)
			if ctx.Err() != nil {
				return NavigateResult{Cancelled: true, Aborted: true}, nil
			}
			if err != nil {
				return NavigateResult{}, err
			}
			summary = &sum
		}
	}

	if summary != nil {
		details, _ := json.Marshal(summary.Details)
		id, err := f.BranchWithSummary(newLeaf, summary.Summary, details, false)
		if err != nil {
			return NavigateResult{}, fmt.Errorf("recording the branch summary: %w", err)
		}
		res.SummaryEntryID = id
	} else if err := f.SetLeaf(newLeaf); err != nil {
		return NavigateResult{}, fmt.Errorf("moving to entry %s: %w", newLeaf, err)
	}
	// The leaf has moved: the context follows it whatever happens to the
	// label.
	var labelErr error
	if opts.Label != "" {
		on := targetID
		if summary != nil {
			on = res.SummaryEntryID
		}
		if _, err := f.AppendLabel(on, opts.Label); err != nil {
			labelErr = fmt.Errorf("recording the label: %w", err)
		}
	}
	if err := s.loadContext(f); err != nil {
		return NavigateResult{}, err
	}
	if labelErr != nil {
		return NavigateResult{}, labelErr
	}
	return res, nil
}

// claim makes the session busy for a navigation as a run makes it: Prompt
// answers ErrBusy, fork and the like refuse, Abort and AbortCompaction
// call cancel and wait, Close waits. release gives it back and records
// the commands the user ran meanwhile, as the end of a run does.
func (s *Session) claim(cancel context.CancelFunc) (release func(), err error) {
	s.awaitRunTail()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.runDone != nil:
		return nil, errIdle
	case s.compactCancel != nil:
		return nil, fault.New(fault.Busy, "a compaction is running; abort it or wait for it to finish first")
	}
	done := make(chan struct{})
	s.runCancel, s.runDone, s.compactCancel = func(error) { cancel() }, done, cancel
	s.wg.Add(1)
	return func() {
		s.mu.Lock()
		s.runCancel, s.runDone, s.compactCancel = nil, nil, nil
		bash := s.pendingBash
		s.pendingBash = nil
		s.mu.Unlock()
		for _, m := range bash {
			s.appendOutsideRun(m)
		}
		close(done)
		s.wg.Done()
	}, nil
}

// leftBehind is what a navigation from oldLeaf to target leaves: the
// entries after the deepest one the two paths share, as pi collects them
// for a branch summary.
func leftBehind(f *transcript.File, oldLeaf, target string) compaction.Branch {
	if oldLeaf == "" {
		return compaction.Branch{}
	}
	onTarget := map[string]bool{}
	for _, e := range f.Branch(target) {
		onTarget[e.ID] = true
	}
	path := f.Branch(oldLeaf)
	from := 0
	for i := len(path) - 1; i >= 0; i-- {
		if onTarget[path[i].ID] {
			from = i + 1
			break
		}
	}
	var b compaction.Branch
	for i := from; i < len(path); i++ {
		e := &path[i]
		if e.Opaque() {
			continue
		}
		switch e.Type {
		case transcript.TypeMessage:
			b.Messages = append(b.Messages, e.Message)
		case transcript.TypeCustomMessage:
			b.Messages = append(b.Messages, &llm.Message{Role: llm.RoleCustom, CustomType: e.CustomType, Content: e.Content, Display: e.Display})
		case transcript.TypeCompaction:
			b.Messages = append(b.Messages, &llm.Message{Role: llm.RoleCompactionSummary, Summary: e.Summary, TokensBefore: e.TokensBefore})
		case transcript.TypeBranchSummary:
			if e.Summary != "" {
				b.Messages = append(b.Messages, &llm.Message{Role: llm.RoleBranchSummary, Summary: e.Summary, FromID: e.FromID})
			}
			// Only summaries agentd or pi wrote have file lists in
			// details; an extension's are its own.
			if !e.FromHook && len(e.Details) > 0 {
				if d := compaction.ParseDetails(e.Details); d != nil {
					b.Files = append(b.Files, *d)
				}
			}
		}
	}
	return b
}

// summarizeBranch asks the model for the note on the path being left,
// with the session in the compacting state meanwhile.
func (s *Session) summarizeBranch(ctx context.Context, model *llm.Model, b compaction.Branch) (compaction.BranchSummary, error) {
	s.setState(StateCompacting, "")
	defer s.setState(StateIdle, "")
	var opts llm.StreamOptions
	if s.cfg.Options != nil {
		var err error
		if opts, err = s.cfg.Options(ctx, model); err != nil {
			return compaction.BranchSummary{}, err
		}
	}
	return compaction.SummarizeBranch(ctx, compaction.StreamFunc(s.cfg.Stream), model, opts, b)
}

// loadContext makes f's context at its leaf the agent's conversation.
func (s *Session) loadContext(f *transcript.File) error {
	items, msgs := contextItems(f.Context(f.Leaf()))
	if err := s.agent.SetMessages(msgs); err != nil {
		return err
	}
	s.mu.Lock()
	s.items = items
	s.prevDetails = lastCompactionDetails(f)
	s.mu.Unlock()
	return nil
}

// contextItems pairs a context's messages with their entries. The
// messages are the transcript's own (immutable) ones, not the copies in
// c.Messages: a loaded session holds each message once.
func contextItems(c transcript.Context) ([]item, []*llm.Message) {
	items := make([]item, len(c.Items))
	msgs := make([]*llm.Message, len(c.Items))
	for i, it := range c.Items {
		items[i] = item{it.EntryID, it.Message}
		msgs[i] = it.Message
	}
	return items, msgs
}
