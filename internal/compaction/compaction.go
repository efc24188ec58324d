// Package compaction condenses the older part of a session into a summary
// so that a long conversation keeps fitting the model's context window. It
// follows pi's compaction: the same trigger, token estimates, cut-point
// rules (a tool call is never separated from its result), split turns,
// iterative summaries and cumulative tracking of the files read and
// modified, so sessions move between pi and agentd unchanged. The prompts
// and the transcript format sent to the summarising model are agentd's own.
//
// The package is pure apart from Summarize, which asks a model: the session
// builds the path, calls Prepare, then Summarize, and appends a compaction
// entry from the Result.
package compaction

import (
	"errors"
	"fmt"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Defaults, as pi's.
const (
	DefaultReserveTokens    = 16384
	DefaultKeepRecentTokens = 20000
)

// Settings are a session's compaction settings; the JSON shape is pi's
// "compaction" settings object.
type Settings struct {
	// Enabled turns automatic compaction on. Manual compaction ignores it.
	Enabled bool `json:"enabled"`
	// ReserveTokens is the room left in the context window for the model's
	// answer; compaction triggers when the context grows into it. The
	// summary requests' answer caps are derived from it too.
	ReserveTokens int64 `json:"reserveTokens"`
	// KeepRecentTokens is roughly how much of the newest conversation is
	// kept verbatim after a compaction.
	KeepRecentTokens int64 `json:"keepRecentTokens"`
}

// DefaultSettings returns pi's defaults: enabled, 16384 reserved, 20000 kept.
func DefaultSettings() Settings {
	return Settings{Enabled: true, ReserveTokens: DefaultReserveTokens, KeepRecentTokens: DefaultKeepRecentTokens}
}

// ShouldCompact reports whether automatic compaction should run: it is
// enabled and the context has grown into the reserve. An unknown window
// (0) never triggers, since nothing can be said about how full it is.
func ShouldCompact(contextTokens, contextWindow int64, s Settings) bool {
	if !s.Enabled || contextWindow <= 0 {
		return false
	}
	return contextTokens > contextWindow-s.ReserveTokens
}

// The error texts are pi's, because clients show them as they are (the RPC
// error of a compact command).
var (
	// ErrNothingToCompact is returned when the conversation since the last
	// compaction offers no place to cut (it has no messages).
	//lint:ignore ST1005 pi's wording, which RPC clients match on
	ErrNothingToCompact = errors.New("Nothing to compact (session too small)")
	// ErrAlreadyCompacted is returned when the newest entry of the path is
	// itself a compaction. It also matches ErrNothingToCompact, so callers
	// that only care whether there was work can test for that alone.
	ErrAlreadyCompacted error = alreadyCompacted{}
)

type alreadyCompacted struct{}

func (alreadyCompacted) Error() string        { return "Already compacted" }
func (alreadyCompacted) Is(target error) bool { return target == ErrNothingToCompact }

// Item is one entry of the session's current path, root first.
//
// Message is what the entry contributes to the model's context, built the
// way the session builds the context anyway:
//   - a message entry: its message;
//   - a custom_message entry: a RoleCustom message;
//   - a branch_summary entry: a RoleBranchSummary message;
//   - a compaction entry: a RoleCompactionSummary message (or nil, if the
//     entry is the one Previous names). Compactions are never summarised
//     again or cut at; the previous summary reaches the model through
//     Previous instead;
//   - any other entry (model or thinking-level change, label, custom
//     state, session info): nil. Such entries still matter: a cut right
//     after them keeps them, as pi does, so the kept part starts with the
//     settings that were in force.
type Item struct {
	EntryID string
	Message *llm.Message
}

// Previous is the latest compaction entry on the path, if there is one.
type Previous struct {
	// EntryID is the compaction entry's own id.
	EntryID string
	// Summary is the entry's summary, file lists included.
	Summary string
	// FirstKeptEntryID is where that compaction's kept part began.
	FirstKeptEntryID string
	// Details are the entry's file lists (see ParseDetails). Leave nil
	// when the entry has none or was written by an extension (pi's
	// fromHook): extensions store their own shapes in details.
	Details *Details
}

// Details are the file lists pi stores in a compaction entry's details,
// in the same JSON shape. Both are sorted and never nil.
type Details struct {
	// ReadFiles were read but never written or edited.
	ReadFiles []string `json:"readFiles"`
	// ModifiedFiles were written or edited.
	ModifiedFiles []string `json:"modifiedFiles"`
}

// Plan is what Prepare decided: which messages to summarise and where the
// kept part begins. Extensions that write their own summary get the same
// information pi gives them.
type Plan struct {
	// ToSummarize are the messages before the kept part (before the start
	// of the split turn, if there is one).
	ToSummarize []*llm.Message
	// TurnPrefix is the start of a turn too large to keep whole; it is
	// summarised on its own so the kept rest of the turn makes sense.
	TurnPrefix []*llm.Message
	// FirstKeptEntryID is the entry the kept part begins at.
	FirstKeptEntryID string
	// SplitTurn says the cut falls inside a turn (TurnPrefix is set).
	SplitTurn bool
	// TokensBefore is the estimated size of the context being replaced.
	TokensBefore int64
	// PreviousSummary is the previous compaction's summary, without the
	// file lists that are recomputed and appended again.
	PreviousSummary string
	// ReadFiles and ModifiedFiles are the files touched by read, write and
	// edit calls in the summarised messages, together with those of the
	// previous compaction.
	ReadFiles, ModifiedFiles []string
	// Settings are the settings the plan was made with.
	Settings Settings
}

// Prepare decides how to compact the path. path is the session's current
// path, root first (see Item); prev is its latest compaction, nil if it
// has none. Only the part from prev's kept boundary onwards is looked at:
// messages kept by the previous compaction are summarised along with the
// newer ones, since the new summary replaces the old one. If
// FirstKeptEntryID is not on the path the part starts after the compaction
// entry, and if neither is (the session passed only that part) at the
// first item.
//
// The cut is found by walking back from the newest message until
// KeepRecentTokens are reached; the kept part begins at the nearest user,
// assistant, bash, custom or branch-summary message at or after that point
// that does not separate a tool call from its result.
//
// When the part holds fewer than KeepRecentTokens, all of it is kept and
// nothing is left to summarise, as in pi: the compaction still happens
// (the summary carries the earlier one on). Prepare fails with
// ErrAlreadyCompacted when the path ends with a compaction, and with
// ErrNothingToCompact when the part offers no place to cut (it has no
// message a kept part could begin at). The plan points at the
// path's messages rather than copying them; they must not change until
// Summarize has returned.
func Prepare(path []Item, prev *Previous, s Settings) (Plan, error) {
	prevID := ""
	if prev != nil {
		prevID = prev.EntryID
	}
	if n := len(path); n > 0 && isCompaction(path[n-1], prevID) {
		return Plan{}, ErrAlreadyCompacted
	}
	span := path[boundary(path, prev):]

	plan := Plan{Settings: s, TokensBefore: tokensBefore(span, prev, prevID)}
	if prev != nil {
		plan.PreviousSummary = prev.Summary
		if prev.Details != nil {
			plan.PreviousSummary = stripFileLists(prev.Summary)
		}
	}

	c, err := findCut(span, prevID, s.KeepRecentTokens)
	if err != nil {
		return Plan{}, err
	}
	historyEnd := c.kept
	if c.split {
		historyEnd = c.turnStart
		plan.SplitTurn = true
		plan.TurnPrefix = messages(span[c.turnStart:c.kept], prevID)
	}
	// Nothing may be left to summarise: everything is kept, as pi does
	// (a compact command on a short conversation succeeds there).
	plan.ToSummarize = messages(span[:historyEnd], prevID)
	plan.FirstKeptEntryID = span[c.kept].EntryID
	if plan.FirstKeptEntryID == "" {
		return Plan{}, fmt.Errorf("compaction: the entry the kept part would begin at has no id")
	}

	var files fileOps
	if prev != nil && prev.Details != nil {
		files.addDetails(prev.Details)
	}
	files.addMessages(plan.ToSummarize)
	files.addMessages(plan.TurnPrefix)
	plan.ReadFiles, plan.ModifiedFiles = files.lists()
	return plan, nil
}

// boundary is the index of the first item the new compaction may
// summarise.
func boundary(path []Item, prev *Previous) int {
	if prev == nil {
		return 0
	}
	after := -1
	for i := range path {
		if path[i].EntryID == prev.FirstKeptEntryID && prev.FirstKeptEntryID != "" {
			return i
		}
		if path[i].EntryID == prev.EntryID && prev.EntryID != "" && after < 0 {
			after = i + 1
		}
	}
	return max(after, 0)
}

// tokensBefore estimates the context the session has now: the previous
// summary and every message since its kept boundary, as pi rebuilds it.
func tokensBefore(span []Item, prev *Previous, prevID string) int64 {
	msgs := make([]*llm.Message, 0, len(span)+1)
	if prev != nil && prev.Summary != "" {
		msgs = append(msgs, &llm.Message{Role: llm.RoleCompactionSummary, Summary: prev.Summary})
	}
	for _, it := range span {
		if it.Message != nil && !isCompaction(it, prevID) {
			msgs = append(msgs, it.Message)
		}
	}
	return ContextTokens(msgs)
}

func isCompaction(it Item, prevID string) bool {
	if it.Message != nil {
		return it.Message.Role == llm.RoleCompactionSummary
	}
	return prevID != "" && it.EntryID == prevID
}

// messages returns the messages of items that are summarised: compactions
// and entries without a message are left out.
func messages(items []Item, prevID string) []*llm.Message {
	var out []*llm.Message
	for _, it := range items {
		if it.Message != nil && !isCompaction(it, prevID) {
			out = append(out, it.Message)
		}
	}
	return out
}

// cut is where a span is divided. Indexes are into the span.
type cut struct {
	kept      int // first kept item
	turnStart int // start of the split turn, when split
	split     bool
}

// findCut applies pi's cut-point rules to span.
func findCut(span []Item, prevID string, keep int64) (cut, error) {
	cuttable := cutPoints(span, prevID)

	// Walk back from the newest message until the kept part is big enough.
	at := -1
	var acc int64
	for i := len(span) - 1; i >= 0; i-- {
		it := span[i]
		if it.Message == nil || isCompaction(it, prevID) {
			continue
		}
		acc += EstimateTokens(it.Message)
		if acc >= keep {
			at = i
			break
		}
	}
	if at < 0 {
		// Everything since the last compaction fits in what would be
		// kept: pi keeps it all, from the first place to cut, and still
		// compacts (a summary of nothing new, the earlier one carried on).
		at = 0
	}

	c := -1
	for i := at; i < len(span); i++ {
		if cuttable[i] {
			c = i
			break
		}
	}
	if c < 0 {
		// The newest messages alone exceed the budget and offer no cut
		// point (one huge tool result after the last call). pi keeps the
		// whole span then, which compacts nothing; cutting before the call
		// keeps more than asked but still frees everything older.
		for i := at - 1; i >= 0; i-- {
			if cuttable[i] {
				c = i
				break
			}
		}
	}
	if c < 0 {
		return cut{}, ErrNothingToCompact
	}

	res := cut{kept: c, turnStart: -1}
	if span[c].Message.Role != llm.RoleUser {
		for i := c; i >= 0; i-- {
			// A turn start is also a place the kept part could begin, so a
			// message recorded inside a call/result pair does not count.
			if cuttable[i] && startsTurn(span[i].Message.Role) {
				res.turnStart = i
				break
			}
		}
		// A cut at a bash, custom or branch-summary message is itself a
		// turn start, so nothing of its turn precedes it.
		res.split = res.turnStart >= 0 && res.turnStart < c
	}

	// Keep the message-less entries (settings changes, labels) just before
	// the cut with the kept part, but never reach past a compaction.
	for res.kept > 0 {
		p := span[res.kept-1]
		if p.Message != nil || isCompaction(p, prevID) {
			break
		}
		res.kept--
	}
	return res, nil
}

// startsTurn reports whether a message of role r begins a turn: the user,
// or something standing in for the user.
func startsTurn(r llm.Role) bool {
	switch r {
	case llm.RoleUser, llm.RoleBashExecution, llm.RoleCustom, llm.RoleBranchSummary:
		return true
	}
	return false
}

// cutPoints marks the items the kept part may begin at: messages of a
// cuttable role that do not fall between a tool call and its result. In a
// well-formed conversation results follow their call at once, so the
// second rule only excludes what the first already does; it is there so
// that a message recorded between a call and its result (a user's bash
// command, an extension's message) can never split the pair.
func cutPoints(span []Item, prevID string) []bool {
	ok := make([]bool, len(span))
	var calls map[string]int // tool call id → index of the newest assistant making it
	var cover []int          // difference array of indexes lying inside a call/result pair
	for i, it := range span {
		m := it.Message
		if m == nil || isCompaction(it, prevID) {
			continue
		}
		switch m.Role {
		case llm.RoleUser, llm.RoleBashExecution, llm.RoleCustom, llm.RoleBranchSummary:
			ok[i] = true
		case llm.RoleAssistant:
			ok[i] = true
			for j := range m.Content {
				if m.Content[j].Type == llm.ContentToolCall {
					if calls == nil {
						calls = make(map[string]int)
					}
					calls[m.Content[j].ID] = i
				}
			}
		case llm.RoleToolResult:
			if k, found := calls[m.ToolCallID]; found && k+1 < i {
				if cover == nil {
					cover = make([]int, len(span)+1)
				}
				cover[k+1]++
				cover[i]--
			}
		}
	}
	if cover != nil {
		depth := 0
		for i := range span {
			depth += cover[i]
			if depth > 0 {
				ok[i] = false
			}
		}
	}
	return ok
}
