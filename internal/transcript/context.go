package transcript

import (
	"github.com/agentd-dev/agentd/internal/llm"
)

// Context is what a session position means to the agent: the messages to
// send (pi's AgentMessage list, before the agent turns custom and summary
// messages into user messages) and the model and thinking level in force.
type Context struct {
	Messages []llm.Message
	// Items are the same messages paired with the entry each comes from
	// (the compaction entry for the summary). Message entries' messages
	// are the File's own, shared, never to be modified; a session keeps
	// them as its conversation without copying.
	Items         []ContextItem
	ThinkingLevel llm.ThinkingLevel // "off" unless a thinking_level_change says otherwise
	Provider      string            // "" if no model is known on the path
	ModelID       string
}

// ContextItem is one message of a context and the entry it comes from.
type ContextItem struct {
	EntryID string
	Message *llm.Message
}

// Context builds the context at leafID by pi's rules (buildSessionContext):
//
//   - Walk from the root to leafID. The latest thinking_level_change sets
//     the thinking level; the latest model_change or assistant message
//     sets the model.
//   - Without a compaction on the path, every message entry contributes
//     its message, every custom_message a custom message, and every
//     branch_summary with a summary a branchSummary message.
//   - With one, the latest compaction contributes a compactionSummary
//     message first, then the entries before it from firstKeptEntryId on
//     (none if that id is not on the path), then the entries after it.
//
// leafID "" is the position before the first entry: no messages. An
// unknown leafID falls back to the last entry of the file, as pi does.
// Opaque entries contribute nothing. The messages share content with the
// File and must not be modified in place; appending to their slices is
// safe.
func (f *File) Context(leafID string) Context {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if leafID == "" {
		return Context{ThinkingLevel: llm.ThinkingOff}
	}
	if f.byID[leafID] == nil {
		if len(f.entries) == 0 {
			return Context{ThinkingLevel: llm.ThinkingOff}
		}
		leafID = f.entries[len(f.entries)-1].ID
	}
	return buildContext(f.branchLocked(leafID))
}

func buildContext(path []*Entry) Context {
	c := Context{ThinkingLevel: llm.ThinkingOff}
	compaction := -1
	for i, e := range path {
		if e.raw != nil {
			continue
		}
		switch e.Type {
		case TypeThinkingLevelChange:
			c.ThinkingLevel = e.ThinkingLevel
		case TypeModelChange:
			c.Provider, c.ModelID = e.Provider, e.ModelID
		case TypeMessage:
			if e.Message.Role == llm.RoleAssistant {
				c.Provider, c.ModelID = e.Message.Provider, e.Message.Model
			}
		case TypeCompaction:
			compaction = i
		}
	}
	add := func(e *Entry) {
		if m := contextMessage(e); m != nil {
			c.Items = append(c.Items, ContextItem{e.ID, m})
		}
	}
	if compaction < 0 {
		c.Items = make([]ContextItem, 0, len(path))
		for _, e := range path {
			add(e)
		}
	} else {
		ce := path[compaction]
		c.Items = make([]ContextItem, 0, len(path)-compaction+1)
		c.Items = append(c.Items, ContextItem{ce.ID, &llm.Message{Role: llm.RoleCompactionSummary, Summary: ce.Summary,
			TokensBefore: ce.TokensBefore, Timestamp: unixMilli(ce.Timestamp)}})
		kept := false
		for _, e := range path[:compaction] {
			if e.ID == ce.FirstKeptEntryID {
				kept = true
			}
			if kept {
				add(e)
			}
		}
		for _, e := range path[compaction+1:] {
			add(e)
		}
	}
	c.Messages = make([]llm.Message, len(c.Items))
	for i, it := range c.Items {
		m := *it.Message
		// Clip so that a caller appending content cannot write into the
		// stored message's spare capacity.
		m.Content = m.Content[:len(m.Content):len(m.Content)]
		c.Messages[i] = m
	}
	return c
}

// contextMessage is what entry e contributes to a context, nil for
// nothing. A message entry contributes its own stored message.
func contextMessage(e *Entry) *llm.Message {
	if e.raw != nil {
		return nil
	}
	switch e.Type {
	case TypeMessage:
		return e.Message
	case TypeCustomMessage:
		return &llm.Message{Role: llm.RoleCustom, CustomType: e.CustomType, Content: e.Content,
			Display: e.Display, Details: e.Details, Timestamp: unixMilli(e.Timestamp)}
	case TypeBranchSummary:
		if e.Summary != "" {
			return &llm.Message{Role: llm.RoleBranchSummary, Summary: e.Summary,
				FromID: e.FromID, Timestamp: unixMilli(e.Timestamp)}
		}
	}
	return nil
}

// unixMilli is JavaScript's new Date(iso).getTime(); 0 where pi would get
// NaN.
func unixMilli(iso string) int64 {
	t, ok := parseISO(iso)
	if !ok {
		return 0
	}
	return t.UnixMilli()
}
