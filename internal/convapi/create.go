package convapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
)

// createPayload is rest.create's payload.
type createPayload struct {
	Cwd        string         `json:"cwd,omitempty"`
	Model      string         `json:"model,omitempty"`
	Tools      *[]string      `json:"tools,omitempty"`
	Name       string         `json:"name,omitempty"`
	Thinking   string         `json:"thinking,omitempty"`
	Messages   []inputPayload `json:"messages,omitempty"`
	AutoAlways bool           `json:"autoAlways,omitempty"`
	AutoNext   int            `json:"autoNext,omitempty"`
	MCP        *MCPConfig     `json:"mcp,omitempty"`
	Sandbox    string         `json:"sandbox,omitempty"`
	Mode       string         `json:"mode,omitempty"`
}

type inputPayload struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	TimeMs  int64  `json:"timeMs,omitempty"`
	// Files are workspace paths, read when the message is added.
	Files []string `json:"files,omitempty"`
}

// messageIn is the message with its files read from h's workspace.
func (in inputPayload) messageIn(h *server.Hosted) (*llm.Message, error) {
	m := in.message()
	if err := attachFiles(h, m, in.Files); err != nil {
		return nil, err
	}
	return m, nil
}

func (in inputPayload) message() *llm.Message {
	var ts time.Time
	if in.TimeMs != 0 {
		ts = time.UnixMilli(in.TimeMs)
	}
	return inputMessage(in.Role, in.Content, ts)
}

func (s *Server) createConversation(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.create", rate: server.RateData, body: true, creates: true,
		decode: func(o object) (any, string, error) {
			pl, err := s.decodeCreate(o)
			return pl, "", err
		}})
}

// decodeCreate reads PUT's body.
func (s *Server) decodeCreate(o object) (createPayload, error) {
	var pl createPayload
	var err error
	if pl.AutoAlways, pl.AutoNext, err = o.autoConfirm(); err != nil {
		return pl, err
	}
	if o.present("messages") {
		var raw []json.RawMessage
		if unmarshalInto(o["messages"], &raw) != nil {
			return pl, fault.New(fault.Invalid, "'messages' must be a list")
		}
		for _, item := range raw {
			var m object
			if unmarshalInto(item, &m) != nil || m == nil {
				return pl, fault.New(fault.Invalid, "Each message must be an object")
			}
			in, err := inputOf(m, true)
			if err != nil {
				return pl, err
			}
			pl.Messages = append(pl.Messages, in)
		}
	}
	cfg, ok, err := o.obj("config", "'config' must be an object")
	if err != nil {
		return pl, err
	}
	if ok {
		if err := s.readChat(cfg, &pl); err != nil {
			return pl, err
		}
		if cfg.present("mcp") {
			if pl.MCP, err = s.decodeMCP(cfg, "mcp"); err != nil {
				return pl, fault.New(fault.Invalid, "config."+err.Error())
			}
			if err := keepSecrets(pl.MCP, nil, "config.mcp"); err != nil {
				return pl, err
			}
		}
	}
	prompt, _, err := o.str("prompt")
	if err != nil {
		return pl, fault.New(fault.Invalid, "'prompt' must be a string")
	}
	if customPrompt(prompt) {
		// gptme starts such a conversation with the text as its system
		// message; agentd keeps its own system prompt, so the text leads
		// the conversation as a system message the model reads.
		pl.Messages = append([]inputPayload{{Role: "system", Content: prompt}}, pl.Messages...)
	}
	return pl, nil
}

// customPrompt reports whether PUT's prompt is a system prompt of the
// client's rather than the name of one of gptme's ("full", "short",
// "full-noexamples"; "none" and "" ask for no extra text).
func customPrompt(p string) bool {
	switch strings.TrimSpace(p) {
	case "", "full", "short", "full-noexamples", "none":
		return false
	}
	return true
}

// readChat reads PUT's config.chat: the model, tools, thinking level,
// name and workspace of the new conversation. gptme's other settings are
// accepted and ignored.
func (s *Server) readChat(cfg object, pl *createPayload) error {
	chat, ok, err := cfg.obj("chat", "'config.chat' must be an object")
	if err != nil || !ok {
		return err
	}
	if m, ok, err := chat.str("model"); err != nil {
		return fault.New(fault.Invalid, "model must be a string (provider/id, as GET /api/v2/models lists them)")
	} else if ok && m != "" {
		if _, err := s.findModel(m); err != nil {
			return err
		}
		pl.Model = m
	}
	if tools, ok, err := chat.strings("tools"); err != nil {
		return err
	} else if ok {
		pl.Tools = &tools
	}
	if v, _, err := chat.str("name"); err != nil {
		return err
	} else {
		pl.Name = strings.TrimSpace(v)
	}
	if v, ok, err := chat.str("thinking"); err != nil {
		return err
	} else if ok {
		if _, err := llm.ParseThinkingLevel(v); err != nil {
			return fault.New(fault.Invalid, "thinking: "+err.Error())
		}
		pl.Thinking = v
	}
	if pl.Sandbox, err = s.readSandbox(chat); err != nil {
		return err
	}
	if m, err := readMode(chat); err != nil {
		return err
	} else if m != nil {
		pl.Mode = *m
	}
	ws, _, err := chat.str("workspace")
	if err != nil {
		return err
	}
	switch ws {
	case "", ".", "@log":
		// The server's working directory.
	default:
		if err := server.CheckCwd(ws); err != nil {
			return fault.New(fault.Invalid, "workspace: "+strings.TrimPrefix(err.Error(), "Validation failed: cwd: "))
		}
		pl.Cwd = ws
	}
	return nil
}

// readSandbox reads chat.sandbox (agentd), refused by the layer's rule
// and in its words, which every face shares: a wrong type is an unknown
// mode too, so the client learns the modes it may send.
func (s *Server) readSandbox(chat object) (string, error) {
	v, ok, err := chat.str("sandbox")
	if err != nil {
		v, ok = string(chat["sandbox"]), true
	}
	if !ok {
		return "", nil
	}
	if err := s.srv.CheckSandbox(clip(v, 64)); err != nil {
		return "", err
	}
	return v, nil
}

// inputOf reads a message a client adds ({role, content, timestamp?,
// files?}).
func inputOf(m object, inList bool) (inputPayload, error) {
	var in inputPayload
	role, _, err := m.str("role")
	if err != nil || (role != "user" && role != "assistant" && role != "system") {
		raw := "None"
		if m.present("role") {
			raw = strings.Trim(string(m["role"]), `"`)
		}
		return in, fault.New(fault.Invalid, "Invalid role: "+clip(raw, 100)+". Must be one of: ('system', 'user', 'assistant')")
	}
	if !m.present("content") {
		if inList {
			return in, fault.New(fault.Invalid, "Message missing required 'content' field")
		}
		return in, fault.New(fault.Invalid, "Missing required fields (role, content)")
	}
	content, _, err := m.str("content")
	if err != nil {
		if inList {
			return in, fault.New(fault.Invalid, "Message 'content' must be a string")
		}
		return in, fault.New(fault.Invalid, "content must be a string")
	}
	if ts, ok, err := m.str("timestamp"); err != nil {
		return in, fault.New(fault.Invalid, "Invalid timestamp format: "+clip(string(m["timestamp"]), 100))
	} else if ok {
		t, ok := parseISO(ts)
		if !ok {
			return in, fault.New(fault.Invalid, "Invalid timestamp format: "+clip(ts, 100))
		}
		in.TimeMs = t.UnixMilli()
	}
	files, _, err := m.strings("files")
	if err != nil {
		if inList {
			return in, fault.New(fault.Invalid, "Message 'files' must be a list of strings")
		}
		return in, fault.New(fault.Invalid, "files must be a list of strings")
	}
	if err := checkFileNames(role, files); err != nil {
		return in, err
	}
	in.Role, in.Content, in.Files = role, content, files
	return in, nil
}

func (s *Server) runCreate(ctx context.Context, c *call) (any, error) {
	var p createPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	id := c.cmd.SessionID
	// chat.tools may name tools of the MCP servers the request gives:
	// set once the servers are there (createMCP).
	tools := p.Tools
	if p.MCP != nil {
		p.Tools = nil
	}
	h, err := s.make(ctx, id, p)
	if err != nil {
		return nil, err
	}
	if p.MCP != nil {
		if err := s.createMCP(ctx, h, p.MCP, tools); err != nil {
			s.discard(ctx, id, "a conversation that failed to set up")
			return nil, err
		}
	}
	at := s.att.create(id)
	s.att.update(at.id, func(a *attachment) { a.autoAlways, a.autoNext = p.AutoAlways, p.AutoNext })
	return CreatedResponse{Status: "ok", ConversationID: id, SessionID: at.id}, nil
}

// createMCP gives a new conversation the MCP servers of cfg, then the
// tools of chat.tools (nil: all), which may be theirs.
func (s *Server) createMCP(ctx context.Context, h *server.Hosted, cfg *MCPConfig, tools *[]string) error {
	change := s.prepareMCP(ctx, h, cfg)
	defer change.abandon()
	if tools != nil {
		if err := s.checkToolNames(ctx, h.Session(), *tools, change); err != nil {
			return err
		}
	}
	// A failure removes the conversation: nothing to put back.
	if err := change.save(h.Session()); err != nil {
		return err
	}
	change.use(s, h)
	if tools != nil {
		return h.Session().SetTools(*tools)
	}
	return nil
}

// discard removes conversation id, which failed to be made (what says
// which, for the log). The client may be gone: the half-made
// conversation must go anyway, so ctx's cancellation does not reach it.
func (s *Server) discard(ctx context.Context, id, what string) {
	if err := s.srv.Delete(context.WithoutCancel(ctx), id); err != nil {
		s.srv.Logger().Warn("removing "+what, "session", id, "err", err)
	}
}

// make creates conversation id and sets it up; one that fails to set up
// is removed again.
func (s *Server) make(ctx context.Context, id string, p createPayload) (*server.Hosted, error) {
	h, err := s.srv.Create(ctx, server.CreateRequest{ID: id, Cwd: p.Cwd, Who: principalOf(ctx), Sandbox: sandbox.Mode(p.Sandbox)})
	if err != nil {
		if fault.CodeOf(err) == fault.Conflict {
			return nil, fault.New(fault.Conflict, "Conversation already exists: "+id)
		}
		return nil, err
	}
	if err := s.setUp(h, p); err != nil {
		s.discard(ctx, id, "a conversation that failed to set up")
		return nil, err
	}
	return h, nil
}

// setUp configures a new conversation: every tool call is confirmed by a
// person (this face's rule), then the model, thinking, tools, name and
// first messages the client gave.
func (s *Server) setUp(h *server.Hosted, p createPayload) error {
	sess := h.Session()
	if err := sess.SetConfirmAll(true); err != nil {
		return err
	}
	if p.Mode != "" {
		if err := checkMode(sess, &p.Mode); err != nil {
			return err
		}
		if err := sess.SetMode(p.Mode); err != nil {
			return err
		}
	}
	if p.Model != "" {
		m, err := s.findModel(p.Model)
		if err != nil {
			return err
		}
		if err := sess.SetModel(m); err != nil {
			return err
		}
	}
	if p.Thinking != "" {
		l, err := llm.ParseThinkingLevel(p.Thinking)
		if err != nil {
			return fault.New(fault.Invalid, "thinking: "+err.Error())
		}
		if _, err := sess.SetThinking(l); err != nil {
			return err
		}
	}
	if p.Tools != nil {
		if err := sess.SetTools(*p.Tools); err != nil {
			return err
		}
	}
	if p.Name != "" {
		if err := sess.SetName(p.Name); err != nil {
			return err
		}
	}
	for _, in := range p.Messages {
		m, err := in.messageIn(h)
		if err != nil {
			return err
		}
		if err := sess.Append(m); err != nil {
			return err
		}
	}
	return nil
}
