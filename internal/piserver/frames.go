package piserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// frame is an outbound message with a data object, in pi-server's key
// order.
type frame struct {
	Type string `json:"type"`
	Data any    `json:"data"`
}

func readyFrame(version string) []byte {
	type ready struct {
		ServerVersion   string   `json:"serverVersion"`
		ProtocolVersion string   `json:"protocolVersion"`
		Transports      []string `json:"transports"`
	}
	return piwire.Marshal(frame{"server_ready", ready{version, ProtocolVersion, []string{"websocket", "stdio"}}})
}

func shutdownFrame(drain time.Duration) []byte {
	return piwire.Marshal(struct {
		Type string `json:"type"`
		Data struct {
			Reason    string `json:"reason"`
			TimeoutMs int64  `json:"timeoutMs"`
		} `json:"data"`
	}{Type: "server_shutdown", Data: struct {
		Reason    string `json:"reason"`
		TimeoutMs int64  `json:"timeoutMs"`
	}{"graceful_shutdown", drain.Milliseconds()}})
}

// wireResponse is the response envelope (spec §5), in pi-server's order.
type wireResponse struct {
	ID             string          `json:"id,omitempty"`
	Type           string          `json:"type"`
	Command        string          `json:"command"`
	Success        bool            `json:"success"`
	Error          string          `json:"error,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	SessionVersion *int            `json:"sessionVersion,omitempty"`
	Replayed       bool            `json:"replayed,omitempty"`
	TimedOut       bool            `json:"timedOut,omitempty"`
	// DataDropped marks a replay whose answer was too large to keep:
	// the outcome is the original one, without its data.
	DataDropped bool `json:"dataDropped,omitempty"`
}

func failureFrame(id, command, msg string) []byte {
	return piwire.Marshal(wireResponse{ID: id, Type: "response", Command: command, Error: msg})
}

func responseFrame(r pipeline.Response) []byte {
	w := wireResponse{ID: r.ID, Type: "response", Command: r.Command, Success: r.Success,
		SessionVersion: r.SessionVersion, Replayed: r.Replayed, TimedOut: r.TimedOut, DataDropped: r.DataDropped}
	if r.Success {
		w.Data = r.Data
	} else {
		w.Error = errorText(r.Err)
	}
	if createsSession(r.Command) && r.Success && w.SessionVersion == nil {
		zero := 0
		w.SessionVersion = &zero
	}
	return piwire.Marshal(w)
}

// createsSession reports whether a command's success starts a session's
// version at 0: a session loaded under the file's own id has no sessionId
// in its command, so the pipeline cannot attach the version itself.
func createsSession(command string) bool {
	return command == "create_session" || command == "load_session"
}

// errorText is what a client reads of a failure: the pipeline's and the
// handlers' errors are written for clients; anything internal is not.
func errorText(e *fault.Error) string {
	switch {
	case e == nil:
		return "unknown error"
	case e.Code == fault.Internal:
		return "Internal error"
	}
	return e.Message
}

type lifecycleData struct {
	CommandID        string   `json:"commandId"`
	CommandType      string   `json:"commandType"`
	SessionID        string   `json:"sessionId,omitempty"`
	DependsOn        []string `json:"dependsOn"`
	IfSessionVersion *int     `json:"ifSessionVersion,omitempty"`
	IdempotencyKey   string   `json:"idempotencyKey,omitempty"`
	Success          *bool    `json:"success,omitempty"`
	Error            string   `json:"error,omitempty"`
	SessionVersion   *int     `json:"sessionVersion,omitempty"`
	Replayed         bool     `json:"replayed,omitempty"`
	TimedOut         bool     `json:"timedOut,omitempty"`
}

func lifecycleFrame(ev pipeline.Event) []byte {
	deps := ev.DependsOn
	if len(deps) > 0 && strings.HasPrefix(deps[0], "sub:") {
		deps = make([]string, len(ev.DependsOn))
		for i, d := range ev.DependsOn {
			deps[i] = server.ClientID(d)
		}
	}
	d := lifecycleData{CommandID: server.ClientID(ev.CommandID), CommandType: ev.Command, SessionID: ev.SessionID,
		DependsOn: deps, IfSessionVersion: ev.IfSessionVersion, IdempotencyKey: server.ClientID(ev.IdempotencyKey)}
	if ev.Type == pipeline.CommandFinished {
		ok := ev.Success
		d.Success = &ok
		if !ok {
			d.Error = errorText(ev.Err)
			d.Error = server.ClientText(d.Error)
		}
		d.SessionVersion, d.Replayed, d.TimedOut = ev.SessionVersion, ev.Replayed, ev.TimedOut
		if createsSession(ev.Command) && ok && d.SessionVersion == nil {
			zero := 0
			d.SessionVersion = &zero
		}
	}
	return piwire.Marshal(struct {
		Type string        `json:"type"`
		Data lifecycleData `json:"data"`
	}{string(ev.Type), d})
}

// codec encodes session events as pi-server event frames.
type codec struct {
	// delta makes message_update carry only the delta.
	delta bool
}

// Encode wraps a session event in the pi-server event envelope, with
// agentd's per-session seq so a client can resume; no frame for events
// that have no wire form. The deltas of one content block carry a Key, so
// a client that falls behind gets them joined: one frame whose delta is
// every delta it stands for, with the newest seq (and, in pi's full
// format, the newest partial message). A full-format delta is encoded only
// when a writer takes it: it carries the whole message so far, and
// encoding it for every event, when a client that is behind is sent a few
// of them, cost most of the server's CPU.
func (cd *codec) Encode(sessionID string, ev session.Event) server.Frame {
	a := ev.Agent
	if a != nil && a.Type == agent.EventMessageUpdate && a.Update != nil && !cd.delta && a.Message != nil && a.Message.Role == llm.RoleAssistant {
		switch u := a.Update; u.Type {
		case llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta:
			p := snapshot(a.Message, u.Delta)
			return server.Frame{
				Key: server.FrameKey{Scope: sessionID, Name: string(u.Type), Index: u.ContentIndex},
				Seq: ev.Seq, Text: u.Delta, Merge: mergeFull, State: p,
				Size: fullUpdateSize(sessionID, p, u.Delta), Linger: server.StreamLinger,
			}
		}
	}
	f := server.Frame{Data: cd.frame(sessionID, ev)}
	if f.Data == nil || a == nil || a.Type != agent.EventMessageUpdate || a.Update == nil {
		return f
	}
	// A stream's updates come many a second: they may wait a moment for
	// company, so that several go out in one write. The message's end,
	// and every event that is not an update, go at once and take them
	// along.
	f.Linger = server.StreamLinger
	switch u := a.Update; u.Type {
	case llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta:
		// The delta format reads no partial message, so the joined frame
		// can be made later, from the key and the joined text. (A replayed
		// full-format delta has no partial message either.)
		f.Key = server.FrameKey{Scope: sessionID, Name: string(u.Type), Index: u.ContentIndex}
		f.Seq, f.Text, f.Merge = ev.Seq, u.Delta, cd.merge()
	}
	return f
}

func (cd *codec) merge() func(server.FrameKey, uint64, string, any) []byte {
	if cd.delta {
		return mergeDelta
	}
	return mergeBare
}

// mergeDelta is Frame.Merge for a delta-format message_update: the key
// holds the session, the kind of delta and the content block.
func mergeDelta(k server.FrameKey, seq uint64, text string, _ any) []byte {
	return updateFrame(k, seq, text, nil, true)
}

// mergeBare is Frame.Merge for a full-format message_update without its
// partial message (a replayed one).
func mergeBare(k server.FrameKey, seq uint64, text string, _ any) []byte {
	return updateFrame(k, seq, text, nil, false)
}

// updateFrame is the frame of a message_update delta: the key holds the
// session, the kind of delta and the content block; msg, in the full
// format, the partial message.
func updateFrame(k server.FrameKey, seq uint64, text string, msg *llm.Message, delta bool) []byte {
	u := llm.Event{Type: llm.EventType(k.Name), ContentIndex: k.Index, Delta: text}
	ev := session.Event{Seq: seq, Type: session.EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate, Update: &u, Message: msg}}
	return (&codec{delta: delta}).frame(k.Scope, ev)
}

// partial is a full-format message_update's partial message as it was at
// the event, for encoding the frame later. The stream goes on changing its
// message, but only by replacing its fields and blocks (a block's text is
// a new string each delta, sharing bytes that never change), so a copy of
// the fields an assistant message's JSON carries and of its block list
// keeps that state. A client that keeps up is sent the frame as it is:
// the first writer encodes it, others watching the session reuse the
// bytes.
type partial struct {
	content      []llm.Content
	blocks       [2]llm.Content // content's array, for the usual one or two blocks
	timestamp    int64
	api          llm.API
	provider     string
	model        string
	usage        llm.Usage
	stopReason   llm.StopReason
	errorMessage string
	responseID   string

	delta string
	hint  int // piwire.SizeHint of the message
	once  sync.Once
	data  []byte
}

// snapshot copies what m's JSON carries; m is an assistant message.
func snapshot(m *llm.Message, delta string) *partial {
	p := &partial{timestamp: m.Timestamp, api: m.API, provider: m.Provider, model: m.Model, usage: m.Usage,
		stopReason: m.StopReason, errorMessage: m.ErrorMessage, responseID: m.ResponseID, delta: delta}
	if len(m.Content) <= len(p.blocks) {
		p.content = p.blocks[:len(m.Content):len(m.Content)]
		copy(p.content, m.Content)
	} else {
		p.content = append([]llm.Content(nil), m.Content...)
	}
	msg := p.message()
	p.hint = piwire.SizeHint(&msg)
	return p
}

// message is the partial message again.
func (p *partial) message() llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Content: p.content, Timestamp: p.timestamp, API: p.api, Provider: p.provider,
		Model: p.model, Usage: p.usage, StopReason: p.stopReason, ErrorMessage: p.errorMessage, ResponseID: p.responseID}
}

// fullUpdateSize is about the bytes of a full-format message_update: the
// envelope and the event around the partial message, which it carries
// twice (as partial and as message).
func fullUpdateSize(sessionID string, p *partial, text string) int {
	return 200 + len(sessionID) + 2*p.hint + len(text) + len(text)/16
}

// mergeFull is Frame.Merge for a full-format message_update: state is the
// *partial of the newest event merged in.
func mergeFull(k server.FrameKey, seq uint64, text string, state any) []byte {
	p := state.(*partial)
	if text == p.delta {
		// Not merged (or merged with empty deltas only): the event's own
		// frame, the same for every client.
		p.once.Do(func() {
			m := p.message()
			p.data = updateFrame(k, seq, text, &m, false)
		})
		return p.data
	}
	m := p.message()
	return updateFrame(k, seq, text, &m, false)
}

// EncodePending is the extension_ui_request of a question asked before
// the client subscribed, without a seq: it is no event of the log, and a
// client resuming by seq must not count it.
func (cd *codec) EncodePending(sessionID string, r interaction.Request) server.Frame {
	return server.Frame{Data: cd.frame(sessionID, session.Event{Type: session.EventInteractionRequested, Interaction: &interaction.Event{Request: r}})}
}

// frame is Encode's frame data.
func (cd *codec) frame(sessionID string, ev session.Event) []byte {
	var inner []byte
	switch ev.Type {
	case session.EventInteractionRequested:
		r := ev.Interaction.Request
		d, ok := piwire.NewDialog(r, true)
		if !ok {
			return nil
		}
		inner = piwire.Marshal(struct {
			Type      string `json:"type"`
			RequestID string `json:"requestId"`
			piwire.Dialog
		}{"extension_ui_request", r.ID, d})
	case session.EventInteractionResolved:
		outcome, reason := "answered", ""
		if res := ev.Interaction.Resolution; res != nil {
			switch res.By {
			case interaction.ResolvedAnswered:
			case interaction.ResolvedTimeout:
				outcome = "timeout"
			default:
				outcome, reason = "cancelled", res.Reason
			}
		}
		inner = piwire.Marshal(struct {
			Type      string `json:"type"`
			RequestID string `json:"requestId"`
			Outcome   string `json:"outcome"`
			Reason    string `json:"reason,omitempty"`
		}{"extension_ui_resolved", ev.Interaction.Request.ID, outcome, reason})
	case session.EventStateChanged, session.EventModelChanged, session.EventTodoUpdated, session.EventSessionChanged:
		inner = agentdEvent(ev)
	default:
		// pi's events, the most frequent by far, are encoded straight into
		// the envelope.
		b := envelope(sessionID, ev.Seq, cd.room(ev))
		n := len(b)
		// AppendEvent returns nil, or b unchanged, for an event pi has no
		// form for.
		if b = piwire.AppendEvent(b, ev, cd.delta); len(b) <= n {
			return nil
		}
		return append(b, '}')
	}
	if inner == nil {
		return nil
	}
	b := envelope(sessionID, ev.Seq, len(inner)+1)
	b = append(b, inner...)
	return append(b, '}')
}

// room guesses how many bytes an event's encoding takes, so its frame is
// made in one allocation of about its size. A delta in the delta format,
// the frame sent most by far, is about 100 bytes besides its text; an
// event with a message is mostly that message (twice in a full-format
// message_update); a wrong guess costs one more allocation as the frame
// grows.
func (cd *codec) room(ev session.Event) int {
	a := ev.Agent
	if a == nil {
		return 256
	}
	n := 256
	if u := a.Update; a.Type == agent.EventMessageUpdate && u != nil {
		n = 112 + len(u.Delta) + len(u.Content)
		if cd.delta || a.Message == nil {
			return n
		}
		return n + 2*piwire.SizeHint(a.Message)
	}
	switch a.Type {
	case agent.EventMessageStart, agent.EventMessageEnd, agent.EventTurnEnd:
		n += piwire.SizeHint(a.Message)
		for _, m := range a.ToolResults {
			n += piwire.SizeHint(m)
		}
	case agent.EventAgentEnd:
		for _, m := range a.Messages {
			n += piwire.SizeHint(m)
		}
	}
	return n
}

// envelope starts an event frame: {"type":"event","sessionId":…,"seq":…,"event":
// with room for more.
func envelope(sessionID string, seq uint64, more int) []byte {
	b := make([]byte, 0, len(sessionID)+64+more)
	b = append(b, `{"type":"event","sessionId":`...)
	b = llm.AppendJSONString(b, sessionID)
	if seq != 0 { // seqs start at 1; 0 is a frame that is no event of the log
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, seq, 10)
	}
	return append(b, `,"event":`...)
}

// agentdEvent encodes the session events pi has no event for; clients
// that do not know them ignore them (spec §14).
func agentdEvent(ev session.Event) []byte {
	switch ev.Type {
	case session.EventStateChanged:
		return piwire.Marshal(struct {
			Type     string          `json:"type"`
			State    session.State   `json:"state"`
			Previous session.State   `json:"previous"`
			Outcome  session.Outcome `json:"outcome,omitempty"`
		}{string(ev.Type), ev.State, ev.Previous, ev.Outcome})
	case session.EventModelChanged:
		return piwire.Marshal(struct {
			Type  string     `json:"type"`
			Model *llm.Model `json:"model"`
		}{string(ev.Type), ev.Model})
	case session.EventTodoUpdated:
		return piwire.Marshal(struct {
			Type string `json:"type"`
			Todo any    `json:"todo"`
		}{string(ev.Type), ev.Todo})
	case session.EventSessionChanged:
		return piwire.Marshal(struct {
			Type        string `json:"type"`
			SessionFile string `json:"sessionFile,omitempty"`
		}{string(ev.Type), ev.SessionFile})
	}
	return nil
}

// frameError is a frame rejected before admission.
type frameError struct {
	id, command, msg string
}

// isEnvelopeKey: envelope keys are the pipeline's; everything else is
// the payload. A switch, not a map built at start.
func isEnvelopeKey(k string) bool {
	switch k {
	case "type", "id", "sessionId", "dependsOn", "ifSessionVersion", "idempotencyKey":
		return true
	}
	return false
}

// decodeCommand parses and validates one frame (spec §4): the envelope,
// and the fields the command's spec declares. Everything a handler reads
// is checked here, so a malformed command never reaches the pipeline.
func decodeCommand(data []byte, specs map[string]*commandSpec) (pipeline.Command, *frameError) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return pipeline.Command{}, &frameError{command: "unknown", msg: "Invalid JSON: " + piwire.DescribeJSONError(err)}
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return pipeline.Command{}, &frameError{command: "unknown", msg: "Invalid JSON: a frame must hold exactly one JSON object"}
	}
	if fields == nil {
		return pipeline.Command{}, &frameError{command: "unknown", msg: "Invalid JSON: a frame must be a JSON object"}
	}
	var problems []string
	bad := func(field, format string, args ...any) {
		problems = append(problems, field+": "+fmt.Sprintf(format, args...))
	}
	str := func(key string) (string, bool) {
		raw, ok := fields[key]
		if !ok {
			return "", false
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			bad(key, "must be a string")
			return "", false
		}
		return v, true
	}
	var cmd pipeline.Command
	typ, hasType := str("type")
	cmd.Type = typ
	command := typ
	if command == "" {
		command = "unknown"
	}
	// A response echoes the id it answers, valid or not, so the client
	// can match the refusal to what it sent.
	var echoID string
	if id, ok := str("id"); ok {
		echoID = id
		switch {
		case id == "":
			bad("id", "must be a non-empty string")
		case len(id) > 256:
			bad("id", "must be at most 256 characters")
		case strings.HasPrefix(id, "anon:"):
			bad("id", "must not start with the reserved prefix 'anon:'")
		default:
			cmd.ID = id
		}
	}
	if !hasType {
		if _, present := fields["type"]; !present {
			bad("type", "is required")
		}
		return cmd, &frameError{id: echoID, command: command, msg: "Validation failed: " + strings.Join(problems, "; ")}
	}
	spec := specs[typ]
	if spec == nil {
		bad("type", "Unknown command type '%s'", typ)
		return cmd, &frameError{id: echoID, command: command, msg: "Validation failed: " + strings.Join(problems, "; ")}
	}
	if k, ok := str("idempotencyKey"); ok {
		if k == "" || len(k) > 256 {
			bad("idempotencyKey", "must be a non-empty string of at most 256 characters")
		} else {
			cmd.IdempotencyKey = k
		}
	}
	if sid, ok := str("sessionId"); ok {
		switch {
		case sid == "":
			bad("sessionId", "Session ID must be a non-empty string")
		case len(sid) > 256:
			bad("sessionId", "Session ID too long (max 256 characters)")
		case !idChars(sid, false):
			bad("sessionId", "Session ID must contain only alphanumeric characters, underscores, dashes, and dots")
		default:
			cmd.SessionID = sid
		}
	} else if spec.session {
		if _, present := fields["sessionId"]; !present {
			bad("sessionId", "Session commands must have a non-empty string 'sessionId'")
		}
	} else if spec.needsID {
		if _, present := fields["sessionId"]; !present {
			bad("sessionId", "is required")
		}
	}
	if raw, ok := fields["dependsOn"]; ok {
		var deps []string
		switch {
		case json.Unmarshal(raw, &deps) != nil:
			bad("dependsOn", "must be an array of strings")
		case len(deps) > 32:
			bad("dependsOn", "at most 32 dependencies")
		case len(deps) > 0 && cmd.ID == "":
			bad("dependsOn", "requires the command to have an 'id'")
		default:
			for _, d := range deps {
				if d == "" {
					bad("dependsOn", "entries must be non-empty strings")
					break
				}
			}
			cmd.DependsOn = deps
		}
	}
	if raw, ok := fields["ifSessionVersion"]; ok {
		n, err := nonNegInt(raw)
		switch {
		case err != nil:
			bad("ifSessionVersion", "must be a non-negative integer")
		case !spec.session && !spec.needsID:
			bad("ifSessionVersion", "Only supported for session-targeted commands")
		default:
			cmd.IfSessionVersion = &n
		}
	}
	payload := map[string]json.RawMessage{}
	for k, v := range fields {
		if !isEnvelopeKey(k) {
			payload[k] = v
		}
	}
	for _, f := range spec.fields {
		raw, ok := payload[f.name]
		if !ok || string(raw) == "null" {
			if f.required {
				bad(f.name, "is required")
			}
			continue
		}
		if msg := f.check(raw); msg != "" {
			bad(f.name, "%s", msg)
			continue
		}
		if f.inner != nil {
			problems = append(problems, f.inner(raw)...)
		}
		// What the handler will read must decode: nested shapes (images,
		// an answer's method) are checked here, before admission.
		var p params
		if err := json.Unmarshal(append(append(llm.AppendJSONString([]byte{'{'}, f.name), ':'), append(raw, '}')...), &p); err != nil {
			bad(f.name, "%s", shapeProblem(err))
		}
	}
	if len(problems) > 0 {
		return cmd, &frameError{id: echoID, command: command, msg: "Validation failed: " + strings.Join(problems, "; ")}
	}
	if len(payload) > 0 {
		keys := make([]string, 0, len(payload))
		for k := range payload {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b := []byte{'{'}
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = llm.AppendJSONString(b, k)
			b = append(b, ':')
			b = append(b, payload[k]...)
		}
		cmd.Payload = append(b, '}')
	}
	return cmd, nil
}

func nonNegInt(raw json.RawMessage) (int, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, err
	}
	// Up to 2^53: what a JavaScript client can send exactly (timestamps in
	// ms, seqs).
	if f < 0 || f != math.Trunc(f) || f > 1<<53 {
		return 0, errors.New("not a non-negative integer")
	}
	return int(f), nil
}

// shapeProblem says, without Go type names, why a field did not decode.
func shapeProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s has the wrong type (%s)", strings.TrimPrefix(te.Field, "Fields."), te.Value)
		}
		return fmt.Sprintf("has the wrong type (%s)", te.Value)
	}
	return "has the wrong shape"
}

// field is one command field the decoder checks.
type field struct {
	name     string
	kind     fieldKind
	required bool
	max      int      // strings: most characters (0: no limit)
	oneOf    []string // strings: allowed values
	// inner, when set, checks what the kind cannot (the fields of an
	// object, a string that must not be empty) once the kind is right; it
	// returns problems whole, each naming its own path ("options.label: …").
	inner func(raw json.RawMessage) []string
}

type fieldKind int

const (
	kString fieldKind = iota
	kBool
	kInt
	kObject
	kArray
)

func (f field) check(raw json.RawMessage) string {
	switch f.kind {
	case kString:
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return "must be a string"
		}
		if f.max > 0 && len(v) > f.max {
			return fmt.Sprintf("must be at most %d characters", f.max)
		}
		if len(f.oneOf) > 0 {
			for _, o := range f.oneOf {
				if v == o {
					return ""
				}
			}
			return fmt.Sprintf("must be one of %s", strings.Join(f.oneOf, ", "))
		}
	case kBool:
		var v bool
		if json.Unmarshal(raw, &v) != nil {
			return "must be a boolean"
		}
	case kInt:
		if _, err := nonNegInt(raw); err != nil {
			return "must be a non-negative integer"
		}
	case kObject:
		var v map[string]json.RawMessage
		if json.Unmarshal(raw, &v) != nil || v == nil {
			return "must be an object"
		}
	case kArray:
		var v []json.RawMessage
		if json.Unmarshal(raw, &v) != nil || v == nil {
			return "must be an array"
		}
	}
	return ""
}
