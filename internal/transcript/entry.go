package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// CurrentVersion is the session file version agentd writes: pi's v3.
const CurrentVersion = 3

// EntryType discriminates the lines of a session file after the header.
type EntryType string

// The entry types of pi's v3 format. A file may hold others (written by a
// newer pi or an extension); those are kept verbatim, see Entry.Opaque.
const (
	TypeMessage             EntryType = "message"
	TypeModelChange         EntryType = "model_change"
	TypeThinkingLevelChange EntryType = "thinking_level_change"
	TypeCompaction          EntryType = "compaction"
	TypeBranchSummary       EntryType = "branch_summary"
	TypeCustom              EntryType = "custom"
	TypeCustomMessage       EntryType = "custom_message"
	TypeLabel               EntryType = "label"
	TypeSessionInfo         EntryType = "session_info"
)

// typeSession is the header's type. It is not an EntryType: the header is
// not part of the tree.
const typeSession = "session"

// Header is the first line of a session file.
type Header struct {
	Version       int    // 3 once loaded: older files are migrated in memory
	ID            string // UUIDv7
	Timestamp     string // ISO 8601, as written
	Cwd           string
	ParentSession string // path of the session this one was forked or cloned from; "" if none
}

// Entry is one node of a session's tree. Like llm.Message it is a flat
// union keyed by Type: only the fields of its type are meaningful. Entries
// handed out by File are copies, but Message, Content, Details and Data
// share memory with the File's own entry and must not be modified.
type Entry struct {
	Type      EntryType
	ID        string // 8 hex digits
	ParentID  string // "" for a root (parentId null)
	Timestamp string // ISO 8601, as written

	Message *llm.Message // message

	Provider string // model_change
	ModelID  string // model_change

	ThinkingLevel llm.ThinkingLevel // thinking_level_change

	Summary          string          // compaction, branch_summary
	FirstKeptEntryID string          // compaction
	TokensBefore     int64           // compaction
	Details          json.RawMessage // compaction, branch_summary, custom_message; nil if absent
	FromHook         bool            // compaction, branch_summary: written by an extension
	FromID           string          // branch_summary: the leaf left behind, "root" if none

	CustomType string          // custom, custom_message
	Data       json.RawMessage // custom; nil if absent
	Content    []llm.Content   // custom_message
	Display    bool            // custom_message

	TargetID string // label
	Label    string // label; "" clears the target's label

	Name string // session_info; "" clears the name

	// raw is the line as read, kept for entries agentd cannot represent
	// (unknown types, bodies that do not decode) so they are written back
	// unchanged.
	raw []byte
	// Presence bits for optional fields pi may or may not write, so that
	// re-encoding a decoded line reproduces it byte for byte.
	noFromHook    bool
	contentString bool // custom_message content was a plain string
	noLabel       bool
}

// Opaque reports whether the entry is one agentd keeps but does not
// interpret: an unknown type, or a known type whose body did not decode.
// Only its envelope (Type, ID, ParentID, Timestamp) is set; it is written
// back exactly as read and contributes nothing to Context.
func (e *Entry) Opaque() bool { return e.raw != nil }

// Raw returns the line an opaque entry was read from, or nil.
func (e *Entry) Raw() []byte { return e.raw }

// Time parses Timestamp; the zero time if it does not parse.
func (e *Entry) Time() time.Time {
	t, _ := parseISO(e.Timestamp)
	return t
}

// AppendJSON appends the entry's line (without the newline) in pi's field
// order for its type.
func (e *Entry) AppendJSON(b []byte) ([]byte, error) {
	if e.raw != nil {
		return append(b, e.raw...), nil
	}
	str := llm.AppendJSONString
	// pi builds custom and custom_message entries with customType first
	// and the envelope last; every other entry starts with the envelope.
	switch e.Type {
	case TypeCustom:
		b = append(b, `{"type":"custom","customType":`...)
		b = str(b, e.CustomType)
		if e.Data != nil {
			b = append(b, `,"data":`...)
			b = append(b, e.Data...)
		}
		b = append(b, ',')
		return appendEnvelopeTail(b, e), nil
	case TypeCustomMessage:
		b = append(b, `{"type":"custom_message","customType":`...)
		b = str(b, e.CustomType)
		b = append(b, `,"content":`...)
		var err error
		if b, err = appendContent(b, e.Content, e.contentString); err != nil {
			return nil, err
		}
		b = append(b, `,"display":`...)
		b = strconv.AppendBool(b, e.Display)
		if e.Details != nil {
			b = append(b, `,"details":`...)
			b = append(b, e.Details...)
		}
		b = append(b, ',')
		return appendEnvelopeTail(b, e), nil
	}
	b = append(b, `{"type":`...)
	b = str(b, string(e.Type))
	b = append(b, ',')
	b = appendEnvelopeTail(b, e)
	b = b[:len(b)-1] // reopen the object
	switch e.Type {
	case TypeMessage:
		if e.Message == nil {
			return nil, errors.New("transcript: message entry without a message")
		}
		b = append(b, `,"message":`...)
		var err error
		if b, err = e.Message.AppendJSON(b); err != nil {
			return nil, err
		}
	case TypeModelChange:
		b = append(b, `,"provider":`...)
		b = str(b, e.Provider)
		b = append(b, `,"modelId":`...)
		b = str(b, e.ModelID)
	case TypeThinkingLevelChange:
		b = append(b, `,"thinkingLevel":`...)
		b = str(b, string(e.ThinkingLevel))
	case TypeCompaction:
		b = append(b, `,"summary":`...)
		b = str(b, e.Summary)
		if e.FirstKeptEntryID != "" {
			b = append(b, `,"firstKeptEntryId":`...)
			b = str(b, e.FirstKeptEntryID)
		}
		b = append(b, `,"tokensBefore":`...)
		b = strconv.AppendInt(b, e.TokensBefore, 10)
		b = appendDetailsFromHook(b, e)
	case TypeBranchSummary:
		b = append(b, `,"fromId":`...)
		b = str(b, e.FromID)
		b = append(b, `,"summary":`...)
		b = str(b, e.Summary)
		b = appendDetailsFromHook(b, e)
	case TypeLabel:
		b = append(b, `,"targetId":`...)
		b = str(b, e.TargetID)
		if !e.noLabel {
			b = append(b, `,"label":`...)
			b = str(b, e.Label)
		}
	case TypeSessionInfo:
		b = append(b, `,"name":`...)
		b = str(b, e.Name)
	default:
		return nil, fmt.Errorf("transcript: cannot encode entry of type %q", e.Type)
	}
	return append(b, '}'), nil
}

// appendEnvelopeTail appends `"id":…,"parentId":…,"timestamp":…}`.
func appendEnvelopeTail(b []byte, e *Entry) []byte {
	b = append(b, `"id":`...)
	b = llm.AppendJSONString(b, e.ID)
	b = append(b, `,"parentId":`...)
	if e.ParentID == "" {
		b = append(b, "null"...)
	} else {
		b = llm.AppendJSONString(b, e.ParentID)
	}
	b = append(b, `,"timestamp":`...)
	b = llm.AppendJSONString(b, e.Timestamp)
	return append(b, '}')
}

func appendDetailsFromHook(b []byte, e *Entry) []byte {
	if e.Details != nil {
		b = append(b, `,"details":`...)
		b = append(b, e.Details...)
	}
	if !e.noFromHook {
		b = append(b, `,"fromHook":`...)
		b = strconv.AppendBool(b, e.FromHook)
	}
	return b
}

// appendContent writes custom_message content: a plain string when it was
// read as one (and still is a single text block), else an array of blocks.
func appendContent(b []byte, content []llm.Content, asString bool) ([]byte, error) {
	if asString && len(content) == 1 && content[0].Type == llm.ContentText && content[0].TextSignature == "" {
		return llm.AppendJSONString(b, content[0].Text), nil
	}
	b = append(b, '[')
	for i := range content {
		if i > 0 {
			b = append(b, ',')
		}
		j, err := content[i].MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, j...)
	}
	return append(b, ']'), nil
}

// AppendJSON appends the header line (without the newline) in pi's order.
func (h *Header) AppendJSON(b []byte) []byte {
	b = append(b, `{"type":"session","version":`...)
	b = strconv.AppendInt(b, int64(h.Version), 10)
	b = append(b, `,"id":`...)
	b = llm.AppendJSONString(b, h.ID)
	b = append(b, `,"timestamp":`...)
	b = llm.AppendJSONString(b, h.Timestamp)
	b = append(b, `,"cwd":`...)
	b = llm.AppendJSONString(b, h.Cwd)
	if h.ParentSession != "" {
		b = append(b, `,"parentSession":`...)
		b = llm.AppendJSONString(b, h.ParentSession)
	}
	return append(b, '}')
}

// lineJSON is every field any line may carry. One decode reads the whole
// line; which fields matter depends on Type.
type lineJSON struct {
	Type      *string `json:"type"`
	ID        *string `json:"id"`
	ParentID  *string `json:"parentId"`
	Timestamp string  `json:"timestamp"`

	// header
	Version       *float64 `json:"version"`
	Cwd           string   `json:"cwd"`
	ParentSession string   `json:"parentSession"`

	Message json.RawMessage `json:"message"`

	Provider      string `json:"provider"`
	ModelID       string `json:"modelId"`
	ThinkingLevel string `json:"thinkingLevel"`

	Summary             string          `json:"summary"`
	FirstKeptEntryID    string          `json:"firstKeptEntryId"`
	FirstKeptEntryIndex *float64        `json:"firstKeptEntryIndex"` // v1
	TokensBefore        float64         `json:"tokensBefore"`
	Details             json.RawMessage `json:"details"`
	FromHook            *bool           `json:"fromHook"`
	FromID              string          `json:"fromId"`

	CustomType string          `json:"customType"`
	Data       json.RawMessage `json:"data"`
	Content    json.RawMessage `json:"content"`
	Display    bool            `json:"display"`

	TargetID string  `json:"targetId"`
	Label    *string `json:"label"`
	Name     string  `json:"name"`
}

// errNotEntry marks a line that is JSON but not something a session file
// can hold (not an object, no string type).
var errNotEntry = errors.New("not a session entry")

// parsed is one decoded line: either a header or an entry.
type parsed struct {
	header *Header
	entry  *Entry
	// firstKeptIndex is a v1 compaction's firstKeptEntryIndex, -1 if absent.
	firstKeptIndex int
	// bodyErr is why a known-type entry became opaque.
	bodyErr error
}

// parseLine decodes one line of a session file. It fails only when the
// line is not a JSON object with a string "type" (what pi would also be
// unable to use); an entry whose body agentd cannot represent comes back
// opaque, with bodyErr saying why. Entries of v1 files have no id; the
// caller decides whether that is acceptable.
func parseLine(line []byte) (parsed, error) { return parseLineWith(line, nil, true) }

// parseLineWith is parseLine with an interner for the strings a file
// repeats, and a switch for the fast decoder so tests can compare it with
// the reference path.
func parseLineWith(line []byte, in *interner, fast bool) (parsed, error) {
	p := parsed{firstKeptIndex: -1}
	var j lineJSON
	fastOK := fast && fastLine(line, &j)
	if fastOK && j.Message != nil && (j.Type == nil || EntryType(*j.Type) != TypeMessage) && !json.Valid(j.Message) {
		// Only message entries look inside "message"; elsewhere the
		// fast decoder has not validated it.
		fastOK = false
	}
	if !fastOK {
		j = lineJSON{}
		if err := json.Unmarshal(line, &j); err != nil {
			var typeErr *json.UnmarshalTypeError
			if !errors.As(err, &typeErr) {
				return p, err
			}
			// Valid JSON with a field of an unexpected type. Keep what
			// the tree needs and carry the line as is.
			return parseOpaque(line, err)
		}
	}
	if j.Type == nil {
		return p, errNotEntry
	}
	if *j.Type == typeSession {
		return parseHeader(j)
	}
	e := &Entry{Type: EntryType(*j.Type), Timestamp: j.Timestamp}
	if j.ID != nil {
		e.ID = *j.ID
	}
	if j.ParentID != nil {
		e.ParentID = *j.ParentID
	}
	var err error
	switch e.Type {
	case TypeMessage:
		if len(j.Message) == 0 || j.Message[0] != '{' {
			err = errors.New("message entry without a message object")
			break
		}
		if fastOK {
			if m, ok := fastMessage(j.Message, in); ok {
				e.Message = m
				break
			}
			// The fast line decoder only checked the message's nesting;
			// a message that is not valid JSON makes the line garbled,
			// as it would be for encoding/json.
			if !json.Valid(j.Message) {
				return p, errors.New("invalid JSON in message")
			}
		}
		m := new(llm.Message)
		if err = json.Unmarshal(j.Message, m); err == nil {
			e.Message = m
		}
	case TypeModelChange:
		e.Provider, e.ModelID = j.Provider, j.ModelID
	case TypeThinkingLevelChange:
		e.ThinkingLevel = llm.ThinkingLevel(j.ThinkingLevel)
	case TypeCompaction:
		e.Summary, e.FirstKeptEntryID = j.Summary, j.FirstKeptEntryID
		if e.TokensBefore, err = toInt(j.TokensBefore); err != nil {
			break
		}
		e.Details = j.Details
		e.FromHook, e.noFromHook = j.FromHook != nil && *j.FromHook, j.FromHook == nil
		if j.FirstKeptEntryIndex != nil {
			p.firstKeptIndex = int(*j.FirstKeptEntryIndex)
		}
	case TypeBranchSummary:
		e.FromID, e.Summary = j.FromID, j.Summary
		e.Details = j.Details
		e.FromHook, e.noFromHook = j.FromHook != nil && *j.FromHook, j.FromHook == nil
	case TypeCustom:
		e.CustomType, e.Data = j.CustomType, j.Data
	case TypeCustomMessage:
		e.CustomType, e.Display, e.Details = j.CustomType, j.Display, j.Details
		e.Content, e.contentString, err = decodeContent(j.Content)
	case TypeLabel:
		e.TargetID = j.TargetID
		if j.Label != nil {
			e.Label = *j.Label
		} else {
			e.noLabel = true
		}
	case TypeSessionInfo:
		e.Name = j.Name
	default:
		// A type from a newer pi: nothing to warn about, just carry it.
		p.entry = opaqueEntry(e, line)
		return p, nil
	}
	if err != nil {
		p.bodyErr = err
		e = opaqueEntry(e, line)
	}
	p.entry = e
	return p, nil
}

// opaqueEntry keeps only e's envelope and the line it came from.
func opaqueEntry(e *Entry, line []byte) *Entry {
	return &Entry{Type: e.Type, ID: e.ID, ParentID: e.ParentID, Timestamp: e.Timestamp,
		raw: bytes.Clone(line)}
}

// parseOpaque reads just the envelope of a line whose body has fields of
// the wrong JSON type.
func parseOpaque(line []byte, bodyErr error) (parsed, error) {
	p := parsed{firstKeptIndex: -1}
	var env struct {
		Type      json.RawMessage `json:"type"`
		ID        json.RawMessage `json:"id"`
		ParentID  json.RawMessage `json:"parentId"`
		Timestamp json.RawMessage `json:"timestamp"`
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return p, err
	}
	var typ string
	if json.Unmarshal(env.Type, &typ) != nil {
		return p, errNotEntry
	}
	if typ == typeSession {
		// A header is needed to use the file at all; a malformed one is
		// not something to carry along.
		return p, fmt.Errorf("malformed session header: %w", bodyErr)
	}
	e := &Entry{Type: EntryType(typ)}
	if err := decodeEnvelope(e, env.ID, env.ParentID, env.Timestamp); err != nil {
		return p, err
	}
	p.entry = opaqueEntry(e, line)
	p.bodyErr = bodyErr
	return p, nil
}

func parseHeader(j lineJSON) (parsed, error) {
	p := parsed{firstKeptIndex: -1}
	h := &Header{Version: 1, Cwd: j.Cwd, ParentSession: j.ParentSession}
	if j.Version != nil {
		h.Version = int(*j.Version)
	}
	if j.ID == nil || *j.ID == "" {
		return p, errors.New("session header without an id")
	}
	h.ID, h.Timestamp = *j.ID, j.Timestamp
	p.header = h
	return p, nil
}

// decodeEnvelope reads id, parentId and timestamp. id may be absent (v1
// files); if present it, and a non-null parentId, must be strings.
func decodeEnvelope(e *Entry, id, parentID, ts json.RawMessage) error {
	if len(id) > 0 && json.Unmarshal(id, &e.ID) != nil {
		return errors.New("entry id is not a string")
	}
	if len(parentID) > 0 && !bytes.Equal(parentID, []byte("null")) && json.Unmarshal(parentID, &e.ParentID) != nil {
		return errors.New("entry parentId is not a string")
	}
	if len(ts) > 0 {
		_ = json.Unmarshal(ts, &e.Timestamp)
	}
	return nil
}

// decodeContent reads pi's string-or-blocks content.
func decodeContent(raw json.RawMessage) ([]llm.Content, bool, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, err
		}
		return []llm.Content{llm.Text(s)}, true, nil
	}
	var c []llm.Content
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, err
	}
	return c, false, nil
}

// toInt accepts JSON numbers that are whole, as JavaScript writes counts.
func toInt(f float64) (int64, error) {
	if f != float64(int64(f)) {
		return 0, fmt.Errorf("tokensBefore %v is not an integer", f)
	}
	return int64(f), nil
}
