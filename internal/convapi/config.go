package convapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// configOf is a conversation's configuration in gptme's shape.
func (s *Server) configOf(h *server.Hosted) ConversationConfig {
	sess := h.Session()
	confirm := sess.ConfirmAll()
	cfg := ConversationConfig{Chat: ChatConfig{Name: sess.Name(), Model: modelName(sess.Model()), Tools: sess.ToolNames(),
		Thinking: string(sess.Thinking()), ToolFormat: "tool", Stream: true, Interactive: true, Workspace: h.Cwd(),
		ConfirmAll: &confirm, AutoConfirm: autoConfirmOf(sess.Grants()), Sandbox: string(h.Sandbox()), Mode: sess.Mode().Name},
		Env: map[string]any{}, Unavailable: sess.UnavailableTools(), ContextFiles: sess.Instructions(), Modes: modesOf(sess)}
	cfg.MCP = redacted(mcpOf(sess))
	return cfg
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request, p params) error {
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.configOf(h))
	return nil
}

// configPayload is rest.config's payload.
type configPayload struct {
	Model      *string    `json:"model,omitempty"`
	Tools      *[]string  `json:"tools,omitempty"`
	Thinking   *string    `json:"thinking,omitempty"`
	Name       *string    `json:"name,omitempty"`
	ConfirmAll *bool      `json:"confirmAll,omitempty"`
	MCP        *MCPConfig `json:"mcp,omitempty"`
	Mode       *string    `json:"mode,omitempty"`
}

func (s *Server) patchConfig(w http.ResponseWriter, r *http.Request, p params) error {
	var pl configPayload
	var mode string
	return s.answerCommand(w, r, p, commandRequest{name: "rest.config", rate: server.RateData, body: true, empty: "No JSON data provided",
		decode: func(o object) (any, string, error) {
			var err error
			pl, mode, err = s.decodeConfig(o)
			return &pl, "", err
		},
		check: func(h *server.Hosted, _ *attachment) error {
			if mode != "" && mode != string(h.Sandbox()) {
				// The tools were built in their mode; a config sent back
				// as GET answered it is fine, a new mode is not.
				return fault.New(fault.Invalid, "sandbox cannot change: this conversation's tools run in "+string(h.Sandbox())+"; create a conversation to choose another mode")
			}
			if pl.Tools != nil {
				// Tools of the conversation's MCP servers, or of those the
				// request gives, are checked in the lane, once the servers
				// run.
				cur := mcpOf(h.Session())
				mayBeMCP := func(n string) bool { return pl.MCP.mayOffer(n) || cur.mayOffer(n) }
				return checkTools(h.Session(), slices.DeleteFunc(slices.Clone(*pl.Tools), mayBeMCP))
			}
			return nil
		}})
}

// decodeConfig reads the body of PATCH .../config: chat's model, tools,
// thinking, name, confirm_all and sandbox, and the mcp section. mode is
// chat.sandbox ("" when absent), which the caller checks against the
// conversation's.
func (s *Server) decodeConfig(o object) (pl configPayload, mode string, err error) {
	chat, ok, err := o.obj("chat", "'chat' must be an object")
	if err != nil {
		return pl, "", err
	}
	if ok {
		if m, ok, err := chat.str("model"); err != nil {
			return pl, "", fault.New(fault.Invalid, "model must be a string (provider/id, as GET /api/v2/models lists them)")
		} else if ok && m != "" {
			if _, err := s.findModel(m); err != nil {
				return pl, "", err
			}
			pl.Model = &m
		}
		if tools, ok, err := chat.strings("tools"); err != nil {
			return pl, "", err
		} else if ok {
			pl.Tools = &tools
		}
		if v, ok, err := chat.str("thinking"); err != nil {
			return pl, "", err
		} else if ok {
			if _, err := llm.ParseThinkingLevel(v); err != nil {
				return pl, "", fault.New(fault.Invalid, "thinking: "+err.Error())
			}
			pl.Thinking = &v
		}
		if v, ok, err := chat.str("name"); err != nil {
			return pl, "", err
		} else if ok && strings.TrimSpace(v) != "" {
			v = strings.TrimSpace(v)
			pl.Name = &v
		}
		if v, ok, err := chat.boolean("confirm_all"); err != nil {
			return pl, "", err
		} else if ok {
			pl.ConfirmAll = &v
		}
		if mode, err = s.readSandbox(chat); err != nil {
			return pl, "", err
		}
		if pl.Mode, err = readMode(chat); err != nil {
			return pl, "", err
		}
	}
	if o.present("mcp") {
		if pl.MCP, err = s.decodeMCP(o, "mcp"); err != nil {
			return pl, "", err
		}
	}
	return pl, mode, nil
}

func (s *Server) runConfig(ctx context.Context, c *call) (any, error) {
	var p configPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot update config while generation is in progress")
	}
	busy := func(err error) error {
		if fault.CodeOf(err) == fault.Busy {
			return fault.New(fault.Conflict, "Cannot update config while generation is in progress")
		}
		return err
	}
	// Everything is checked before anything changes: new MCP servers are
	// opened and chat.tools checked against their tools, the model and
	// the thinking level looked up.
	before := configStateOf(sess)
	if p.MCP != nil {
		if err := keepSecrets(p.MCP, before.mcp, "mcp"); err != nil {
			return nil, err
		}
	}
	change := s.prepareMCP(ctx, c.h, p.MCP)
	defer change.abandon()
	if p.Tools != nil {
		if err := s.checkToolNames(ctx, sess, *p.Tools, change); err != nil {
			return nil, err
		}
	}
	var model *llm.Model
	if p.Model != nil {
		m, err := s.findModel(*p.Model)
		if err != nil {
			return nil, err
		}
		model = m
	}
	if err := checkMode(sess, p.Mode); err != nil {
		return nil, err
	}
	var level llm.ThinkingLevel
	if p.Thinking != nil {
		l, err := llm.ParseThinkingLevel(*p.Thinking)
		if err != nil {
			return nil, fault.New(fault.Invalid, "thinking: "+err.Error())
		}
		level = l
	}
	// Then the changes, each recorded in the conversation's file; one
	// that fails (the file cannot be written) puts back what differs from
	// before, so that a refused request leaves the conversation as it
	// was. The MCP section goes first: the largest write, and the only
	// one whose putting back restarts nothing.
	failed := func(err error) (any, error) {
		s.restoreConfig(ctx, c.h, before, change != nil && change.done)
		if fault.As(err) != nil {
			return nil, busy(err)
		}
		// The operator learns why; the client that nothing changed.
		s.srv.Logger().Error("recording a config change", "session", c.h.ID(), "err", err)
		return nil, fault.Wrap(fault.Failed, err, "The conversation's file could not record the change, so nothing changed; try again")
	}
	if change != nil {
		if err := change.save(sess); err != nil {
			return failed(err)
		}
	}
	if model != nil {
		if err := sess.SetModel(model); err != nil {
			return failed(err)
		}
	}
	if p.Thinking != nil {
		if _, err := sess.SetThinking(level); err != nil {
			return failed(err)
		}
	}
	if p.Name != nil {
		if err := sess.SetName(*p.Name); err != nil {
			return failed(err)
		}
	}
	if p.ConfirmAll != nil {
		if err := sess.SetConfirmAll(*p.ConfirmAll); err != nil {
			return failed(err)
		}
	}
	if p.Mode != nil {
		if err := sess.SetMode(*p.Mode); err != nil {
			return failed(err)
		}
	}
	if change != nil {
		// The servers the conversation had stop here; nothing after
		// this but the tools list, whose names were checked above.
		change.use(s, c.h)
	}
	if p.Tools != nil {
		if err := sess.SetTools(*p.Tools); err != nil {
			return failed(err)
		}
	}
	cfg := s.configOf(c.h)
	return ConfigResponse{Status: "ok", Message: "Chat config updated", Config: cfg, Tools: cfg.Chat.Tools}, nil
}

// configState is what a config PATCH may change, as it was before it:
// what a refused one puts back.
type configState struct {
	mcpEntry   json.RawMessage // the MCP section's custom entry; nil for none
	mcp        *MCPConfig
	model      *llm.Model
	thinking   llm.ThinkingLevel
	name       string
	confirmAll bool
	mode       string
}

func configStateOf(sess *session.Session) configState {
	entry, _ := sess.Custom(customMCP)
	cfg, _ := mcpSection(entry)
	return configState{mcpEntry: entry, mcp: cfg, model: sess.Model(), thinking: sess.Thinking(),
		name: sess.Name(), confirmAll: sess.ConfirmAll(), mode: sess.Mode().Name}
}

// restoreConfig puts back each setting of the conversation that differs
// from st, and st's MCP servers when the conversation was given others
// (servers). SetModel and SetThinking change the session before they
// record the change, so the model and level are compared in memory: they
// go back even when the file did not take the new ones.
func (s *Server) restoreConfig(ctx context.Context, h *server.Hosted, st configState, servers bool) {
	sess := h.Session()
	if entry, _ := sess.Custom(customMCP); !bytes.Equal(entry, st.mcpEntry) {
		prev := st.mcpEntry
		if prev == nil {
			prev = noMCP
		}
		s.putBack(h, "mcp", sess.SaveCustom(customMCP, prev))
	}
	if sess.Model() != st.model {
		s.putBack(h, "model", sess.SetModel(st.model))
	}
	if sess.Thinking() != st.thinking {
		_, err := sess.SetThinking(st.thinking)
		s.putBack(h, "thinking", err)
	}
	if sess.Name() != st.name {
		s.putBack(h, "name", sess.SetName(st.name))
	}
	s.putBack(h, "confirm_all", sess.SetConfirmAll(st.confirmAll)) // nothing when unchanged
	s.putBack(h, "mode", sess.SetMode(st.mode))                    // nothing when unchanged
	if servers {
		var again *convMCP
		if st.mcp != nil {
			again = s.openMCP(ctx, h, st.mcp)
		}
		s.useMCP(h, again)
	}
}

// putBack logs a setting that could not be recorded as put back after a
// refused config change: the file failed twice in one request. The model
// and thinking level are back in memory all the same (the file may say
// otherwise until the next change); a name or confirmation mode, which
// changes only once recorded, stays as the request set it.
func (s *Server) putBack(h *server.Hosted, what string, err error) {
	if err != nil {
		s.srv.Logger().Warn("recording a setting put back after a refused config change", "session", h.ID(), "setting", what, "err", err)
	}
}
