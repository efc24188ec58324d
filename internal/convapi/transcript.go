package convapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
)

// POST .../transcript adds the turns of a voice call to a conversation,
// making the conversation when it does not exist (gptme's voice server
// calls it once a call ends). A call is added once: the turns follow a
// hidden marker message that names the call, and a call_sid found in one
// is acknowledged without adding anything, so a voice server may retry.

// customVoiceCall is the custom type of the marker before a call's turns.
const customVoiceCall = "gptme.voice_call"

// transcriptPayload is rest.transcript's payload.
type transcriptPayload struct {
	Turns   []inputPayload  `json:"turns"`
	CallSID string          `json:"callSid"`
	Call    json.RawMessage `json:"call"`
}

func (s *Server) transcript(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.transcript", rate: server.RateData, body: true, creates: true,
		decode: func(o object) (any, string, error) {
			pl, err := decodeTranscript(o)
			return pl, "", err
		}})
}

// decodeTranscript reads the body with gptme's checks, in its order and
// with its texts; turns with another role or no text are left out, as
// gptme leaves them out.
func decodeTranscript(o object) (transcriptPayload, error) {
	var pl transcriptPayload
	var turns []json.RawMessage
	if !o.present("turns") || json.Unmarshal(o["turns"], &turns) != nil || len(turns) == 0 {
		return pl, fault.New(fault.Invalid, "turns (list) is required")
	}
	for i, raw := range turns {
		var t object
		if json.Unmarshal(raw, &t) != nil || t == nil {
			return pl, fault.New(fault.Invalid, fmt.Sprintf("turns[%d] must be an object", i))
		}
		text, _, err := t.str("text")
		if err != nil {
			return pl, fault.New(fault.Invalid, fmt.Sprintf("turns[%d].text must be a string", i))
		}
		var role string
		if json.Unmarshal(t["role"], &role) != nil || (role != "user" && role != "assistant") {
			continue
		}
		if text = strings.TrimSpace(text); text != "" {
			pl.Turns = append(pl.Turns, inputPayload{Role: role, Content: text})
		}
	}
	call, ok, err := o.obj("call_metadata", "call_metadata (object) is required")
	if err != nil || !ok || len(call) == 0 {
		return pl, fault.New(fault.Invalid, "call_metadata (object) is required")
	}
	if !call.present("call_sid") || string(call["call_sid"]) == `""` {
		return pl, fault.New(fault.Invalid, "call_metadata.call_sid is required")
	}
	sid, _, err := call.str("call_sid")
	if err != nil {
		return pl, fault.New(fault.Invalid, "call_metadata.call_sid must be a string")
	}
	pl.CallSID, pl.Call = sid, o["call_metadata"]
	return pl, nil
}

// runTranscript runs in the conversation's lane whether or not it exists
// yet, like rest.create.
func (s *Server) runTranscript(ctx context.Context, c *call) (any, error) {
	var p transcriptPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	id := c.cmd.SessionID
	// A conversation the principal may not see is not found, as on every
	// other route, even though this one makes a missing one: adding to
	// it, or answering already_acked, would reach or reveal another
	// subject's conversation. Its id is taken, so it cannot be made
	// either; the answer says no more than PUT's 409 does.
	h, err := s.conversation(ctx, id)
	if fault.CodeOf(err) == fault.NotFound {
		h, err = s.make(ctx, id, createPayload{})
		if fault.CodeOf(err) == fault.Conflict {
			err = fault.New(fault.NotFound, "Conversation not found: "+id)
		}
	}
	if err != nil {
		return nil, err
	}
	sess := h.Session()
	for _, m := range sess.Messages() {
		if m.Role == llm.RoleCustom && m.CustomType == customVoiceCall && callSID(m.Details) == p.CallSID {
			return TranscriptResponse{Status: "already_acked", ConversationID: id}, nil
		}
	}
	if len(p.Turns) == 0 {
		return TranscriptResponse{Status: "ok", ConversationID: id}, nil
	}
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot add message while generation is in progress")
	}
	marker := &llm.Message{Role: llm.RoleCustom, CustomType: customVoiceCall, Details: p.Call, Timestamp: time.Now().UnixMilli(),
		Content: []llm.Content{llm.Text("The messages that follow are the transcript of voice call " + p.CallSID + ".")}}
	for _, m := range append([]*llm.Message{marker}, messagesOf(p.Turns)...) {
		if err := sess.Append(m); err != nil {
			if fault.CodeOf(err) == fault.Busy {
				return nil, fault.New(fault.Conflict, "Cannot add message while generation is in progress")
			}
			return nil, err
		}
	}
	return TranscriptResponse{Status: "ok", ConversationID: id, MessagesAdded: len(p.Turns)}, nil
}

func messagesOf(in []inputPayload) []*llm.Message {
	out := make([]*llm.Message, len(in))
	for i, t := range in {
		out[i] = t.message()
	}
	return out
}

// callSID is the call_sid of a marker's details.
func callSID(details json.RawMessage) string {
	var d struct {
		CallSID string `json:"call_sid"`
	}
	_ = json.Unmarshal(details, &d)
	return d.CallSID
}
