package convapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// conversation finds conversation id: loaded, or known from before a
// restart (loaded now). One the principal of ctx may not see is not
// found, exactly as one that does not exist.
func (s *Server) conversation(ctx context.Context, id string) (*server.Hosted, error) {
	h, err := s.srv.SessionFor(ctx, id, principalOf(ctx))
	if err != nil {
		if fault.CodeOf(err) == fault.NotFound {
			return nil, fault.New(fault.NotFound, "Conversation not found: "+id)
		}
		return nil, err
	}
	return h, nil
}

// attachmentOf checks the session_id a request names: it must exist and
// belong to the conversation. "" is no attachment (the design document's
// requests have none).
func (s *Server) attachmentOf(ctx context.Context, conv, sid string) (*attachment, error) {
	if sid == "" {
		return nil, nil
	}
	at, ok := s.att.get(sid)
	if !ok {
		return nil, fault.New(fault.NotFound, "Session not found: "+sid)
	}
	if _, err := s.conversation(ctx, conv); err != nil {
		return nil, err
	}
	if at.conv != conv {
		return nil, fault.New(fault.Forbidden, "Session "+sid+" does not belong to conversation "+conv)
	}
	return at, nil
}

// body reads a request body as a JSON object.
func (s *Server) body(w http.ResponseWriter, r *http.Request, emptyMsg string) (object, error) {
	b, err := readBody(w, r, s.srv.Limits().MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	return parseObject(b, emptyMsg)
}

// findModel finds "provider/id" (or a bare id, when one provider has it)
// among the models that can be used now (registry.Pick), in this face's
// words.
func (s *Server) findModel(name string) (*llm.Model, error) {
	m, err := registry.Pick(s.opt.Models.Available(), name)
	switch {
	case errors.Is(err, registry.ErrAmbiguousModel):
		return nil, fault.New(fault.Invalid, "Model "+name+" is ambiguous: name it as provider/id")
	case err != nil:
		return nil, fault.New(fault.Invalid, "Model not found: "+name+" (GET /api/v2/models lists the models that can be used)")
	}
	return m, nil
}

func modelName(m *llm.Model) string {
	if m == nil {
		return ""
	}
	return m.Provider + "/" + m.ID
}

// ---- meta ----

func (s *Server) root(w http.ResponseWriter, _ *http.Request, _ params) error {
	configured := false
	if d := s.opt.DefaultModel; d != nil {
		_, err := registry.Pick(s.opt.Models.Available(), modelName(d))
		configured = err == nil
	}
	w.Header().Set("X-API-Version", "2")
	writeJSON(w, http.StatusOK, RootResponse{Message: "agentd v2 API", Documentation: "/api/v2/openapi.json", Version: s.opt.Version,
		APIVersion: APIVersion, ContractRevision: ContractRevision, ProviderConfigured: configured,
		Capabilities: map[string]bool{"event_resume": true, "tool_confirmation": true, "elicitation": true, "message_edit": true,
			"external_session_catalog": false, "external_session_transcript": false}})
	return nil
}

func (s *Server) version(w http.ResponseWriter, _ *http.Request, _ params) error {
	w.Header().Set("X-API-Version", "2")
	writeJSON(w, http.StatusOK, VersionResponse{APIVersion: APIVersion, ContractRevision: ContractRevision})
	return nil
}

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, _ params) error {
	if s.opt.Token == "" && !s.srv.VerifiesJWT() {
		writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "No token is configured: requests need no credentials"})
		return nil
	}
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if !strings.HasPrefix(strings.ToLower(h), "bearer ") {
		return fault.New(fault.Unauthorized, "Missing authentication credentials: send Authorization: Bearer <token> to set the cookie")
	}
	// The cookie holds the credential the request was authorized with:
	// a JWT's holder gets its JWT back, never the shared token.
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: strings.TrimSpace(h[len("bearer "):]), Path: "/api/", MaxAge: 86400, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "Auth cookie set"})
	return nil
}

func (s *Server) clearCookie(w http.ResponseWriter, r *http.Request, _ params) error {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/api/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "Auth cookie cleared"})
	return nil
}

// catalog is a model source that also knows the models it cannot use
// now, and why (the registry).
type catalog interface {
	All() []registry.Entry
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, _ params) error {
	out := ModelsResponse{Models: []ModelInfo{}, Recommended: []string{}, Favorites: []string{}}
	info := func(m *llm.Model) ModelInfo {
		return ModelInfo{ID: modelName(m), Provider: m.Provider, Model: m.ID, Name: m.Name,
			Context: m.ContextWindow, MaxOutput: m.MaxTokens, SupportsStreaming: true, SupportsVision: m.SupportsImages(),
			SupportsReasoning: m.Reasoning, PriceInput: m.Cost.Input, PriceOutput: m.Cost.Output, Available: true}
	}
	all := r.URL.Query().Get("all")
	if all != "" && all != "true" && all != "false" {
		return fault.New(fault.Invalid, "all must be true or false")
	}
	if c, ok := s.opt.Models.(catalog); ok && all == "true" {
		for _, e := range c.All() {
			mi := info(e.Model)
			mi.Available, mi.UnavailableReason = e.Available, e.Reason
			out.Models = append(out.Models, mi)
		}
	} else {
		for _, m := range s.opt.Models.Available() {
			out.Models = append(out.Models, info(m))
		}
	}
	if d := s.opt.DefaultModel; d != nil {
		name := modelName(d)
		out.Default = &name
		out.Recommended = append(out.Recommended, name)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ---- attachments ----

func (s *Server) sessions(w http.ResponseWriter, r *http.Request, _ params) error {
	loaded := map[string]*server.Hosted{}
	for _, h := range s.srv.Sessions() {
		loaded[h.ID()] = h
	}
	out := []SessionInfo{}
	for _, a := range s.att.list() {
		if !s.sees(r.Context(), a.conv) {
			continue
		}
		info := SessionInfo{ID: a.id, ConversationID: a.conv, CreatedAt: a.created.UTC().Format(time.RFC3339Nano),
			LastActivity: a.last.UTC().Format(time.RFC3339Nano), Streams: a.streams}
		if h := loaded[a.conv]; h != nil {
			sess := h.Session()
			name := modelName(sess.Model())
			info.Model, info.MessageCount, info.Generating = &name, len(sess.Messages()), sess.Running()
		}
		out = append(out, info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) serverHealth(w http.ResponseWriter, r *http.Request, _ params) error {
	running := map[string]bool{}
	for _, h := range s.srv.Sessions() {
		running[h.ID()] = h.Session().Running()
	}
	out := ServerHealth{Slots: []HealthSlot{}, Health: "green"}
	for _, a := range s.att.list() {
		if !s.sees(r.Context(), a.conv) {
			continue
		}
		gen := running[a.conv]
		out.SessionCount++
		if gen {
			out.GeneratingCount++
		}
		out.Slots = append(out.Slots, HealthSlot{ID: a.id[:min(8, len(a.id))], Generating: gen})
	}
	out.IdleCount = out.SessionCount - out.GeneratingCount
	switch {
	case out.GeneratingCount == 0:
	case out.GeneratingCount < out.SessionCount:
		out.Health = "yellow"
	default:
		out.Health = "red"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, p params) error {
	if at, ok := s.att.get(p.sid); ok && !s.sees(r.Context(), at.conv) {
		return fault.New(fault.NotFound, "Session not found: "+p.sid)
	}
	streams, ok := s.att.remove(p.sid)
	if !ok {
		return fault.New(fault.NotFound, "Session not found: "+p.sid)
	}
	for _, c := range streams {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Session deleted"})
	}
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ok", Message: "Session " + p.sid + " deleted"})
	return nil
}

// ---- conversations: reads ----

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request, p params) error {
	q := r.URL.Query()
	limit, before := -1, -1
	if v, ok := q["limit"]; ok {
		n, err := atoi(v[0])
		if err != nil || n <= 0 {
			return fault.New(fault.Invalid, "limit must be a positive integer")
		}
		limit = min(n, 10000)
	}
	if v, ok := q["before"]; ok {
		n, err := atoi(v[0])
		if err != nil || n < 0 {
			return fault.New(fault.Invalid, "before must be a non-negative integer")
		}
		before = n
		if limit < 0 {
			return fault.New(fault.Invalid, "before requires limit to be set")
		}
	}
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	// A weak validator of what this answer shows: the conversation's last
	// seq (every change is an event) and the page asked for.
	etag := fmt.Sprintf(`W/"%s-%d-%d-%d"`, sha(h.ID()+"\x00"+h.Session().File()), h.Session().Seq(), limit, before)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	c := s.conversationOf(h)
	if limit > 0 {
		total := len(c.Log)
		end := total
		if before >= 0 {
			end = min(before, total)
		}
		start := max(0, end-limit)
		c.Log = c.Log[start:end]
		more := start > 0
		c.TotalMessages, c.HasMore = &total, &more
		if more {
			c.Before = &start
		}
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// conversationOf is a conversation as GET answers it. Its seq is read
// before its messages, so events after that seq cover anything newer.
func (s *Server) conversationOf(h *server.Hosted) Conversation {
	sess := h.Session()
	seq := sess.Seq()
	msgs := sess.Messages()
	log := wireLog(msgs)
	file := sess.File()
	c := Conversation{ID: h.ID(), Name: sess.Name(), Log: log, Logfile: file, Branches: map[string][]Message{"main": log}, Seq: seq}
	if file != "" {
		c.Logdir = filepath.Dir(file)
	}
	if c.Name == "" {
		c.Name = h.ID()
	}
	if a, ok := s.att.latest(h.ID()); ok {
		c.Session = &ConversationSession{ID: a.id, Generating: sess.Running(), LastError: lastError(msgs)}
	}
	return c
}

// ---- conversations: commands ----

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

func (s *Server) appendMessage(w http.ResponseWriter, r *http.Request, p params) error {
	var branch string
	var tools []string
	return s.answerCommand(w, r, p, commandRequest{name: "rest.append", rate: server.RateData, body: true, empty: "No JSON data provided",
		decode: func(o object) (any, string, error) {
			in, b, t, err := decodeAppend(o)
			branch, tools = b, t
			return in, "", err
		},
		check: func(h *server.Hosted, _ *attachment) error {
			if err := checkBranch(branch); err != nil {
				return err
			}
			return checkTools(h.Session(), tools)
		}})
}

// decodeAppend reads the body of POST .../{id}: the message, the branch
// and the tools named.
func decodeAppend(o object) (inputPayload, string, []string, error) {
	if !o.present("role") || !o.present("content") {
		return inputPayload{}, "", nil, fault.New(fault.Invalid, "Missing required fields (role, content)")
	}
	if _, _, err := o.str("content"); err != nil {
		return inputPayload{}, "", nil, err
	}
	in, err := inputOf(o, false)
	if err != nil {
		return in, "", nil, err
	}
	branch, err := branchOf(o)
	if err != nil {
		return in, "", nil, err
	}
	tools, _, err := o.strings("tools")
	return in, branch, tools, err
}

// branchOf reads a branch name with gptme's rule (one safe path
// component; at most 249 bytes, room for ".jsonl"). agentd names one
// branch, main: another valid name is "not found" once the conversation
// is known to exist (see checkBranch).
func branchOf(o object) (string, error) {
	if !o.present("branch") {
		return "main", nil
	}
	b, _, err := o.str("branch")
	switch {
	case err != nil, b == "":
		return "", fault.New(fault.Invalid, "Invalid branch name")
	case len(b) > maxIDBytes-len(".jsonl"):
		return "", fault.New(fault.Invalid, "branch name too long")
	case strings.Contains(b, "..") || strings.ContainsAny(b, "/\\\x00"):
		return "", fault.New(fault.Invalid, "Invalid branch name")
	}
	return b, nil
}

// checkBranch answers a branch other than main.
func checkBranch(b string) error {
	if b != "main" {
		return fault.New(fault.NotFound, "Branch not found: "+clip(b, 100))
	}
	return nil
}

// checkTools refuses a tool name the conversation does not have.
func checkTools(sess *session.Session, names []string) error {
	avail := sess.AvailableTools()
	for _, n := range names {
		if !slices.Contains(avail, n) {
			return fault.New(fault.Invalid, fmt.Sprintf("Tool '%s' not found (this conversation's tools: %s)", clip(n, 100), strings.Join(avail, ", ")))
		}
	}
	return nil
}

func (s *Server) runAppend(ctx context.Context, c *call) (any, error) {
	var in inputPayload
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if out, ok, err := runBuiltin(ctx, c.h.Session(), in); ok {
		return out, err
	}
	m, err := in.messageIn(c.h)
	if err != nil {
		return nil, err
	}
	if err := c.h.Session().Append(m); err != nil {
		if fault.CodeOf(err) == fault.Busy {
			return nil, fault.New(fault.Conflict, "Cannot add message while generation is in progress")
		}
		return nil, err
	}
	return StatusResponse{Status: "ok"}, nil
}

func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request, p params) error {
	if _, _, err := s.command(w, r, p, commandRequest{name: "rest.delete", rate: server.RateControl}); err != nil {
		return err
	}
	for _, c := range s.att.removeConversation(p.conv) {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Conversation deleted"})
	}
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ok"})
	return nil
}

func (s *Server) runDelete(ctx context.Context, c *call) (any, error) {
	id := c.cmd.SessionID
	h, err := s.conversation(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.Session().Running() {
		return nil, fault.New(fault.Conflict, "Cannot delete while generation is in progress")
	}
	if err := s.srv.Delete(ctx, id); err != nil {
		if fault.CodeOf(err) == fault.NotFound {
			return nil, fault.New(fault.NotFound, "Conversation not found: "+id)
		}
		if fault.CodeOf(err) != fault.Internal {
			return nil, err
		}
		// The conversation is gone; only closing its file failed.
		s.srv.Logger().Warn("closing a deleted conversation", "session", id, "err", err)
	}
	return StatusResponse{Status: "ok"}, nil
}

// ---- step ----

// stepPayload is rest.step's payload.
type stepPayload struct {
	SessionID  string `json:"sessionId,omitempty"`
	Model      string `json:"model,omitempty"`
	AutoAlways bool   `json:"autoAlways,omitempty"`
	AutoNext   int    `json:"autoNext,omitempty"`
}

// stepAnswer is rest.step's answer: the HTTP body, and the seq the step
// started after, for the wait for its first token.
type stepAnswer struct {
	StepResponse
	Seq uint64 `json:"seq"`
}

func (s *Server) step(w http.ResponseWriter, r *http.Request, p params) error {
	var pl stepPayload
	var branch string
	sub, h, err := s.command(w, r, p, commandRequest{name: "rest.step", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			var err error
			pl, branch, err = s.decodeStep(o, designPath(r))
			return &pl, pl.SessionID, err
		},
		check: func(_ *server.Hosted, at *attachment) error {
			if err := checkBranch(branch); err != nil {
				return err
			}
			if at != nil {
				// PUT's auto_confirm: always for this attachment, or a
				// count given once.
				s.att.update(at.id, func(a *attachment) {
					if a.autoAlways {
						pl.AutoAlways = true
					}
					if a.autoNext > 0 && pl.AutoNext == 0 {
						pl.AutoNext, a.autoNext = a.autoNext, 0
					}
				})
			}
			return nil
		}})
	if err != nil {
		return err
	}
	var ans stepAnswer
	if err := unmarshalInto(sub.data, &ans); err != nil {
		return err
	}
	if !sub.replayed {
		if msg, failed := s.awaitStart(r.Context(), h.Session(), ans.Seq); failed {
			return withFields(fault.New(fault.Failed, msg), map[string]any{"status": "error", "session_id": pl.SessionID})
		}
	}
	writeJSON(w, http.StatusOK, ans.StepResponse)
	return nil
}

// designPath reports whether a request came by the design document's
// /api/conversations paths rather than the shipped /api/v2 wire.
func designPath(r *http.Request) bool {
	return !strings.HasPrefix(r.URL.Path, "/api/v2/")
}

// sessionID reads the session_id that step, interrupt and rerun name.
// gptme's clients always send it, and gptme answers 400 "session_id is
// required" without it, so the /api/v2 wire requires it; the design
// document's requests have none, so on its paths it may be left out.
func sessionID(o object, design bool) (string, error) {
	if design {
		return o.optionalStrRequired("session_id")
	}
	return o.requiredStr("session_id")
}

// attachmentNamed reads the body of interrupt and rerun, whose only
// field is the attachment they name (see sessionID); request is its
// wire type.
func attachmentNamed(o object, design bool, request any) (string, error) {
	if err := o.only(fieldNames(request)...); err != nil {
		return "", err
	}
	return sessionID(o, design)
}

// decodeStep reads step's body; design tells whether the request came
// by the design document's paths (see sessionID).
func (s *Server) decodeStep(o object, design bool) (stepPayload, string, error) {
	var pl stepPayload
	if err := o.only(fieldNames(StepRequest{})...); err != nil {
		return pl, "", err
	}
	sid, err := sessionID(o, design)
	if err != nil {
		return pl, "", err
	}
	pl.SessionID = sid
	if m, _, err := o.str("model"); err != nil {
		return pl, "", err
	} else if m != "" {
		if _, err := s.findModel(m); err != nil {
			return pl, "", err
		}
		pl.Model = m
	}
	if _, _, err := o.boolean("stream"); err != nil {
		return pl, "", err
	}
	if acp, _, err := o.boolean("use_acp"); err != nil {
		return pl, "", err
	} else if acp {
		return pl, "", fault.New(fault.Invalid, "use_acp is not supported: agentd runs its own agent")
	}
	if _, _, err := o.integer("max_tokens"); err != nil {
		return pl, "", err
	}
	for _, k := range []string{"temperature", "top_p"} {
		if _, _, err := o.number(k); err != nil {
			return pl, "", err
		}
	}
	branch, err := branchOf(o)
	if err != nil {
		return pl, "", err
	}
	pl.AutoAlways, pl.AutoNext, err = o.autoConfirm()
	return pl, branch, err
}

// awaitStart waits, up to StepWait, for a step's run to show it started
// (its first token, a tool call, a question, its end) or failed early (a
// refused request, a bad key): a client learns of an early failure in the
// step's answer, as gptme's clients expect.
func (s *Server) awaitStart(ctx context.Context, sess *session.Session, after uint64) (string, bool) {
	type verdict struct {
		failed bool
		msg    string
	}
	ch := make(chan verdict, 1)
	decide := func(ev session.Event) {
		var v *verdict
		if a := ev.Agent; a != nil {
			switch {
			case a.Type == "message_update" && a.Update != nil && a.Update.Type == llm.EventTextDelta:
				v = &verdict{}
			case a.Type == "message_end" && a.Message != nil && a.Message.Role == llm.RoleAssistant:
				if a.Message.StopReason == llm.StopError {
					v = &verdict{true, a.Message.ErrorMessage}
				} else {
					v = &verdict{}
				}
			case a.Type == "tool_execution_start":
				v = &verdict{}
			}
		} else {
			switch {
			case ev.Type == session.EventInteractionRequested:
				v = &verdict{}
			case ev.Type == session.EventStateChanged && ev.State == session.StateIdle:
				if ev.Outcome == session.OutcomeFailed {
					v = &verdict{true, "Generation failed"}
				} else {
					v = &verdict{}
				}
			}
		}
		if v != nil {
			select {
			case ch <- *v:
			default:
			}
		}
	}
	missed, _, unsubscribe := sess.SubscribeAfter(after, decide)
	defer unsubscribe()
	for _, ev := range missed {
		decide(ev)
	}
	t := time.NewTimer(s.opt.StepWait)
	defer t.Stop()
	select {
	case v := <-ch:
		if v.failed && v.msg == "" {
			v.msg = "Generation failed"
		}
		return v.msg, v.failed
	case <-t.C:
	case <-ctx.Done():
	}
	return "", false
}

func (s *Server) runStep(_ context.Context, c *call) (any, error) {
	var p stepPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Generation already in progress")
	}
	if p.Model != "" {
		m, err := s.findModel(p.Model)
		if err != nil {
			return nil, err
		}
		if cur := sess.Model(); cur == nil || cur.Provider != m.Provider || cur.ID != m.ID {
			if err := sess.SetModel(m); err != nil {
				return nil, stepError(err)
			}
		}
	}
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Unavailable, "Circuit breaker open for provider %s; retry later", sess.Model().Provider)
	}
	if !sess.ConfirmAll() {
		if err := sess.SetConfirmAll(true); err != nil {
			return nil, stepError(err)
		}
	}
	seq := sess.Seq()
	if err := sess.Step(session.StepOptions{AutoConfirm: p.AutoAlways, AutoConfirmNext: p.AutoNext}); err != nil {
		return nil, stepError(err)
	}
	return stepAnswer{StepResponse{Status: "ok", Message: "Step started", SessionID: p.SessionID}, seq}, nil
}

func stepError(err error) error {
	if fault.CodeOf(err) == fault.Busy {
		return fault.New(fault.Conflict, "Generation already in progress")
	}
	return err
}

// ---- tool confirmation ----

// confirmPayload is rest.confirm's payload.
type confirmPayload struct {
	ToolID   string `json:"toolId"`
	Action   string `json:"action"`
	Content  string `json:"content,omitempty"`
	Count    int    `json:"count,omitempty"`
	Feedback string `json:"feedback,omitempty"`
	AllTools bool   `json:"allTools,omitempty"`
	// BySession: the client named its attachment (the 404 text differs).
	BySession bool `json:"bySession,omitempty"`
}

var confirmActions = map[string]string{
	"confirm": "Tool confirmed", "edit": "Tool edited", "skip": "Tool skipped", "auto": "Tool confirmed",
	"reject": "Tool rejected", "always": "Tool confirmed",
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.confirm", rate: server.RateUIResponse, body: true,
		decode: func(o object) (any, string, error) { return decodeConfirm(o) }})
}

// decodeConfirm reads tool/confirm's body, and the session_id it names.
func decodeConfirm(o object) (confirmPayload, string, error) {
	var pl confirmPayload
	if err := o.only(fieldNames(ConfirmRequest{})...); err != nil {
		return pl, "", err
	}
	sid, err := o.optionalStr("session_id")
	if err != nil {
		return pl, "", err
	}
	idField := "tool_id"
	if !o.present("tool_id") && o.present("id") {
		idField = "id" // the design document's name
	}
	if pl.ToolID, err = o.requiredStr(idField); err != nil {
		return pl, "", err
	}
	if pl.Action, err = o.requiredStr("action"); err != nil {
		return pl, "", err
	}
	if _, ok := confirmActions[pl.Action]; !ok {
		return pl, "", fault.New(fault.Invalid, "Unknown action: "+clip(pl.Action, 100)+" (want confirm, edit, skip, auto, reject or always)")
	}
	switch pl.Action {
	case "edit":
		content, _, err := o.str("content")
		if err != nil || content == "" {
			return pl, "", fault.New(fault.Invalid, "content must be a non-empty string for edit action")
		}
		pl.Content = content
	case "auto":
		pl.Count = 1
		if o.present("count") {
			n, isInt := jsonInt(o["count"])
			if !isInt || n <= 0 || n > 1<<31 || string(o["count"]) == "true" {
				return pl, "", fault.New(fault.Invalid, "count must be a positive integer")
			}
			pl.Count = int(n)
		}
	case "reject":
		fb, _, err := o.str("feedback")
		if err != nil {
			return pl, "", err
		}
		if fb == "" {
			if fb, _, err = o.str("content"); err != nil {
				return pl, "", err
			}
		}
		pl.Feedback = fb
	case "always":
		if pl.AllTools, _, err = o.boolean("all_tools"); err != nil {
			return pl, "", err
		}
	}
	pl.BySession = sid != ""
	return pl, sid, nil
}

// pendingTool shows a pending approval.
func pendingTool(req interaction.Request) (PendingTool, bool) {
	if req.Kind != interaction.KindApproval || req.Tool == nil {
		return PendingTool{}, false
	}
	return PendingTool{ToolID: toolID(req.Tool.ToolCallID), ToolUse: toolUseOf(req.Tool.ToolName, req.Tool.Args)}, true
}

// findRequest finds the pending request a client names: by the id
// clients see (tool_id, elicit_id) or the engine's request id.
func findRequest(sess *session.Session, id string, kind func(interaction.Kind) bool) (interaction.Request, bool) {
	for _, req := range sess.Interactions() {
		if !kind(req.Kind) {
			continue
		}
		if req.ID == id || (req.Tool != nil && req.Kind == interaction.KindApproval && toolID(req.Tool.ToolCallID) == id) {
			return req, true
		}
	}
	return interaction.Request{}, false
}

func isApproval(k interaction.Kind) bool { return k == interaction.KindApproval }

// settled says how a request that is no longer pending ended, and false
// when it knows of no such request: a probe with an answer no request
// accepts, so a request that has just become pending is left alone.
func settled(sess *session.Session, requestID string) (string, bool) {
	err := sess.Answer(requestID, interaction.Response{Value: "\x00"})
	var re *interaction.ResolvedError
	if errors.As(err, &re) {
		how := "answered by another client"
		switch re.By {
		case interaction.ResolvedTimeout:
			how = "timed out: nobody answered in time"
		case interaction.ResolvedCancelled:
			how = "cancelled (interrupted, or the conversation moved on)"
		}
		return how, true
	}
	return "", false
}

func (s *Server) runConfirm(_ context.Context, c *call) (any, error) {
	var p confirmPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	notFound := func() error {
		if p.BySession {
			return fault.New(fault.NotFound, "Tool not found: "+p.ToolID)
		}
		return fault.New(fault.NotFound, "Tool not found in any session for conversation: "+p.ToolID)
	}
	req, ok := findRequest(sess, p.ToolID, isApproval)
	if !ok {
		rid := p.ToolID
		if mapped, ok := s.codec.requests.get(p.ToolID); ok {
			rid = mapped
		}
		if how, ok := settled(sess, rid); ok {
			return nil, fault.New(fault.Conflict, "Tool "+p.ToolID+" was "+how)
		}
		return nil, notFound()
	}
	resp := interaction.Response{Verdict: interaction.VerdictApprove}
	switch p.Action {
	case "edit":
		args, err := editedArgs(req.Tool.ToolName, req.Tool.Args, p.Content)
		if err != nil {
			return nil, err
		}
		resp = interaction.Response{Verdict: interaction.VerdictEdit, Args: args}
	case "skip":
		resp = interaction.Response{Verdict: interaction.VerdictSkip}
	case "auto":
		resp = interaction.Response{Verdict: interaction.VerdictApproveNext, Count: p.Count}
	case "reject":
		resp = interaction.Response{Verdict: interaction.VerdictReject, Feedback: p.Feedback}
	case "always":
		resp = interaction.Response{Verdict: interaction.VerdictAlways, AllTools: p.AllTools}
	}
	if err := sess.Answer(req.ID, resp); err != nil {
		var re *interaction.ResolvedError
		var ve *interaction.ValidationError
		switch {
		case errors.As(err, &re):
			if how, ok := settled(sess, req.ID); ok {
				return nil, fault.New(fault.Conflict, "Tool "+p.ToolID+" was "+how)
			}
			return nil, notFound()
		case errors.Is(err, interaction.ErrNotFound):
			return nil, notFound()
		case errors.As(err, &ve):
			return nil, fault.New(fault.Invalid, "Invalid answer: "+ve.Error())
		}
		return nil, err
	}
	msg := confirmActions[p.Action]
	switch p.Action {
	case "auto":
		msg = fmt.Sprintf("Tool confirmed; the next %d tool calls run without asking", p.Count)
	case "always":
		msg = "Tool confirmed; " + req.Tool.ToolName + " runs without asking for the rest of the conversation"
		if p.AllTools {
			msg = "Tool confirmed; every tool runs without asking for the rest of the conversation"
		}
	}
	return StatusResponse{Status: "ok", Message: msg}, nil
}

// ---- interrupt ----

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.interrupt", rate: server.RateControl, body: true,
		decode: func(o object) (any, string, error) {
			sid, err := attachmentNamed(o, designPath(r), InterruptRequest{})
			return nil, sid, err
		}})
}

func (s *Server) runInterrupt(ctx context.Context, c *call) (any, error) {
	sess := c.h.Session()
	active := sess.Running()
	for _, req := range sess.Interactions() {
		if req.Kind == interaction.KindApproval {
			active = true
		}
	}
	if !active {
		return StatusResponse{Status: "ok", Message: "Already interrupted or not generating"}, nil
	}
	// Abort returns once the run has ended: nothing of it runs after the
	// answer.
	sess.Abort()
	if err := sess.Wait(ctx); err != nil {
		return nil, fault.New(fault.Timeout, "Interrupt requested; the run has not stopped yet")
	}
	return StatusResponse{Status: "ok", Message: "Interrupted"}, nil
}

// ---- config ----

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

// ---- edits ----

// editPayload is the payload of rest.edit and rest.delete_message.
type editPayload struct {
	Index    int     `json:"index"`
	Content  *string `json:"content,omitempty"`
	Truncate bool    `json:"truncate,omitempty"`
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.edit", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			pl, err := decodeEdit(o, p.index, r.URL.Query().Get("truncate") == "1")
			return pl, "", err
		}})
}

// decodeEdit reads the body of PATCH .../messages/{index}.
func decodeEdit(o object, index int, truncate bool) (editPayload, error) {
	if err := o.only(fieldNames(EditRequest{})...); err != nil {
		return editPayload{}, err
	}
	pl := editPayload{Index: index, Truncate: truncate}
	if v, ok, err := o.str("content"); err != nil {
		return pl, err
	} else if ok {
		pl.Content = &v
	}
	files, hasFiles, err := o.strings("files")
	if err != nil {
		return pl, err
	}
	if len(files) > 0 {
		return pl, fault.New(fault.Invalid, "files are not taken by an edit: add a new message with them")
	}
	if !pl.Truncate && !hasFiles && (pl.Content == nil || strings.TrimSpace(*pl.Content) == "") {
		return pl, fault.New(fault.Invalid, "content or files is required")
	}
	return pl, nil
}

func outOfRange(i, n int) error {
	return fault.New(fault.NotFound, fmt.Sprintf("Message index %d out of range (0-%d)", i, n-1))
}

func editBusy(err error, what string) error {
	if fault.CodeOf(err) == fault.Busy {
		return fault.New(fault.Conflict, "Cannot "+what+" while generation is in progress")
	}
	return err
}

// reappendable reports whether msgs can be added again after an edit
// branched the conversation (gptme keeps the messages after an edited
// one): plain user, assistant and custom messages can, a tool call and
// its result cannot (a call added again would wait for confirmation
// rather than carry its result).
func reappendable(msgs []*llm.Message) bool {
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser, llm.RoleCustom:
		case llm.RoleAssistant:
			if len(m.ToolCalls()) > 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// errKeepAfter refuses an edit that would have to carry tool calls onto
// the new branch.
var errKeepAfter = fault.New(fault.Conflict, "The messages after this one include tool calls and their results, which cannot be carried onto the edited branch: edit with ?truncate=1 (the old branch keeps them in the session file)")

// reappend adds msgs again after an edit branched the conversation; the
// old branch keeps them too.
func reappend(sess *session.Session, msgs []*llm.Message) error {
	for _, m := range msgs {
		if err := sess.Append(m.Clone()); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) runEdit(_ context.Context, c *call) (any, error) {
	var p editPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot edit while generation is in progress")
	}
	msgs := sess.Messages()
	if p.Index >= len(msgs) {
		return nil, outOfRange(p.Index, len(msgs))
	}
	m := msgs[p.Index]
	changed := p.Content != nil && *p.Content != contentText(m.Content)
	switch {
	case changed && m.Role != llm.RoleUser:
		return nil, fault.New(fault.Invalid, "Can only edit user messages")
	case changed:
		if !p.Truncate && !reappendable(msgs[p.Index+1:]) {
			return nil, errKeepAfter
		}
		content := []llm.Content{llm.Text(*p.Content)}
		for _, b := range m.Content {
			if b.Type == llm.ContentImage {
				content = append(content, b)
			}
		}
		if err := sess.EditMessage(p.Index, content); err != nil {
			return nil, editBusy(err, "edit")
		}
		if !p.Truncate {
			if err := reappend(sess, msgs[p.Index+1:]); err != nil {
				return nil, editBusy(err, "edit")
			}
		}
	case p.Truncate:
		if p.Index+1 < len(msgs) {
			if err := sess.TruncateAt(p.Index + 1); err != nil {
				return nil, editBusy(err, "edit")
			}
		}
	default:
		return nil, fault.New(fault.Invalid, "No changes requested")
	}
	return s.conversationOf(c.h), nil
}

func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.delete_message", rate: server.RateData,
		decode: func(object) (any, string, error) { return editPayload{Index: p.index}, "", nil }})
}

// gptmeRole is a message's role as gptme's role rules see it.
func gptmeRole(m *llm.Message) string {
	switch m.Role {
	case llm.RoleUser:
		return "user"
	case llm.RoleAssistant:
		return "assistant"
	}
	return "system"
}

func (s *Server) runDeleteMessage(_ context.Context, c *call) (any, error) {
	var p editPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot delete while generation is in progress")
	}
	msgs := sess.Messages()
	if p.Index >= len(msgs) {
		return nil, outOfRange(p.Index, len(msgs))
	}
	m := msgs[p.Index]
	if m.Role == llm.RoleToolResult || (m.Role == llm.RoleAssistant && len(m.ToolCalls()) > 0) {
		return nil, fault.New(fault.Invalid, "Cannot delete a tool call or a tool result on its own: the model needs both (edit the user message before them instead)")
	}
	if gptmeRole(m) == "system" {
		// gptme's rule, on what clients see as role "system".
		return nil, fault.New(fault.Invalid, "Cannot delete system messages")
	}
	var prev, next string
	for i := p.Index - 1; i >= 0 && prev == ""; i-- {
		if r := gptmeRole(msgs[i]); r != "system" {
			prev = r
		}
	}
	for i := p.Index + 1; i < len(msgs) && next == ""; i++ {
		if r := gptmeRole(msgs[i]); r != "system" {
			next = r
		}
	}
	if !reappendable(msgs[p.Index+1:]) {
		return nil, errKeepAfter
	}
	if prev != "" && prev == next {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("Deleting this message would create consecutive '%s' messages, which is not supported by LLM APIs", next))
	}
	if err := sess.TruncateAt(p.Index); err != nil {
		return nil, editBusy(err, "delete")
	}
	if err := reappend(sess, msgs[p.Index+1:]); err != nil {
		return nil, editBusy(err, "delete")
	}
	return s.conversationOf(c.h), nil
}

// ---- fork ----

// forkPayload is rest.fork's payload.
type forkPayload struct {
	After int `json:"after"`
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.fork", rate: server.RateData,
		decode: func(object) (any, string, error) {
			pl, err := decodeFork(r)
			return pl, "", err
		}})
}

// decodeFork reads fork's query: the message to copy up to and the
// branch (main).
func decodeFork(r *http.Request) (forkPayload, error) {
	q := r.URL.Query()
	v, ok := q["after_message"]
	if !ok {
		return forkPayload{}, fault.New(fault.Invalid, "after_message query parameter is required")
	}
	n, err := atoi(v[0])
	if err != nil {
		return forkPayload{}, fault.New(fault.Invalid, "after_message must be an integer")
	}
	if b, ok := q["branch"]; ok && b[0] != "main" {
		return forkPayload{}, fault.New(fault.NotFound, "Branch not found: "+clip(b[0], 100))
	}
	return forkPayload{After: n}, nil
}

func (s *Server) runFork(ctx context.Context, c *call) (any, error) {
	var p forkPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	src := c.h.Session()
	if src.Running() {
		return nil, fault.New(fault.Conflict, "Cannot fork while generation is in progress")
	}
	msgs := src.Messages()
	if p.After < 0 || p.After >= len(msgs) {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("Message index %d out of range (0-%d)", p.After, len(msgs)-1))
	}
	// A copy of the session file's current branch becomes a session of
	// its own, cut after the message asked for: tool calls, results and
	// settings come along as they are.
	file := src.File()
	if file == "" {
		return nil, fault.New(fault.Conflict, "This conversation is kept in memory only and cannot be forked")
	}
	f, err := transcript.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the conversation to fork: %w", err)
	}
	nf, err := f.Clone(s.srv.SessionsDir())
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("copying the conversation: %w", err)
	}
	path := nf.Path()
	if err := nf.Close(); err != nil {
		return nil, fmt.Errorf("copying the conversation: %w", err)
	}
	id := server.NewID()
	// The fork's tools run in the mode its source's do.
	h, err := s.srv.Load(ctx, server.LoadRequest{ID: id, Path: path, Who: principalOf(ctx), Sandbox: c.h.Sandbox()})
	if err != nil {
		return nil, err
	}
	name := src.Name()
	if name == "" {
		name = c.h.ID()
	}
	err = func() error {
		sess := h.Session()
		if n := len(sess.Messages()); p.After+1 < n {
			if err := sess.TruncateAt(p.After + 1); err != nil {
				return err
			}
		}
		if err := sess.SetConfirmAll(true); err != nil {
			return err
		}
		return sess.SetName(fmt.Sprintf("Fork of %s @ msg %d", name, p.After+1))
	}()
	if err != nil {
		s.discard(ctx, id, "a fork that failed")
		return nil, err
	}
	at := s.att.create(id)
	return CreatedResponse{Status: "ok", ConversationID: id, SessionID: at.id}, nil
}

// ---- rerun ----

func (s *Server) rerun(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.rerun", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			sid, err := attachmentNamed(o, designPath(r), RerunRequest{})
			return nil, sid, err
		}})
}

func (s *Server) runRerun(_ context.Context, c *call) (any, error) {
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot rerun while generation is in progress")
	}
	msgs := sess.Messages()
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		// An answer an interrupt or a failure cut off before it said
		// anything is not the one to run again.
		cutOff := m.StopReason == llm.StopAborted || m.StopReason == llm.StopError
		if m.Role == llm.RoleAssistant && (len(m.Content) > 0 || !cutOff) {
			last = i
			break
		}
	}
	if last < 0 {
		return nil, fault.New(fault.Invalid, "No assistant message found")
	}
	calls := msgs[last].ToolCalls()
	if len(calls) == 0 {
		return nil, fault.New(fault.Invalid, "No tool uses found in the last assistant message")
	}
	var ids []string
	if last == len(msgs)-1 {
		// Its calls have no results yet (a restart, an interrupt): the
		// step runs them, each through confirmation.
		for _, tc := range calls {
			ids = append(ids, toolID(tc.ID))
		}
	} else {
		// The calls ran: a copy of them, with new call ids, runs again.
		am := msgs[last]
		cp := &llm.Message{Role: llm.RoleAssistant, API: am.API, Provider: am.Provider, Model: am.Model,
			StopReason: llm.StopToolUse, Timestamp: time.Now().UnixMilli()}
		suffix := "-rerun-" + newAttachmentID()[:8]
		for _, tc := range calls {
			id := tc.ID + suffix
			cp.Content = append(cp.Content, llm.ToolCall(id, tc.Name, append([]byte(nil), tc.Arguments...)))
			ids = append(ids, toolID(id))
		}
		if err := sess.Append(cp); err != nil {
			return nil, editBusy(err, "rerun")
		}
	}
	if !sess.ConfirmAll() {
		if err := sess.SetConfirmAll(true); err != nil {
			return nil, err
		}
	}
	if err := sess.Step(session.StepOptions{}); err != nil {
		return nil, editBusy(err, "rerun")
	}
	return RerunResponse{Status: "ok", Message: fmt.Sprintf("Re-running %d tool(s)", len(ids)), ToolIDs: ids}, nil
}

// ---- elicitation ----

// elicitPayload is rest.elicit's payload.
type elicitPayload struct {
	ElicitID string         `json:"elicitId"`
	Action   string         `json:"action"`
	Value    any            `json:"value,omitempty"`
	Values   map[string]any `json:"values,omitempty"`
}

func (s *Server) elicit(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.elicit", rate: server.RateUIResponse, body: true,
		decode: func(o object) (any, string, error) { return decodeElicit(o) }})
}

// decodeElicit reads elicit/respond's body, and the session_id it names.
func decodeElicit(o object) (elicitPayload, string, error) {
	var pl elicitPayload
	if err := o.only(fieldNames(ElicitRequest{})...); err != nil {
		return pl, "", err
	}
	if !o.present("elicit_id") || !o.present("action") {
		return pl, "", fault.New(fault.Invalid, "elicit_id and action are required")
	}
	id, _, err := o.str("elicit_id")
	if err != nil {
		return pl, "", err
	}
	switch {
	case strings.TrimSpace(id) == "":
		return pl, "", fault.New(fault.Invalid, "elicit_id must not be blank")
	case strings.TrimSpace(id) != id:
		return pl, "", fault.New(fault.Invalid, "elicit_id must not contain leading or trailing whitespace")
	}
	pl.ElicitID = id
	if pl.Action, _, err = o.str("action"); err != nil {
		return pl, "", err
	}
	if pl.Action != "accept" && pl.Action != "decline" && pl.Action != "cancel" {
		return pl, "", fault.New(fault.Invalid, "Unknown action: "+clip(pl.Action, 100)+". Must be accept, decline, or cancel")
	}
	if o.present("value") {
		if err := unmarshalInto(o["value"], &pl.Value); err != nil {
			return pl, "", fault.New(fault.Invalid, "value must be JSON")
		}
	}
	if vals, ok, err := o.obj("values", "values must be an object"); err != nil {
		return pl, "", err
	} else if ok {
		pl.Values = map[string]any{}
		for k, raw := range vals {
			var v any
			if err := unmarshalInto(raw, &v); err != nil {
				return pl, "", fault.New(fault.Invalid, "values must be an object")
			}
			pl.Values[k] = v
		}
	}
	sid, err := o.optionalStr("session_id")
	if err != nil {
		return pl, "", err
	}
	return pl, sid, nil
}

func (s *Server) runElicit(_ context.Context, c *call) (any, error) {
	var p elicitPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	req, ok := findRequest(sess, p.ElicitID, func(k interaction.Kind) bool { return true })
	if !ok {
		if how, ok := settled(sess, p.ElicitID); ok {
			return nil, fault.New(fault.Conflict, "Elicitation "+p.ElicitID+" was "+how)
		}
		return nil, fault.New(fault.NotFound, "Elicitation not found: "+p.ElicitID)
	}
	if req.Kind == interaction.KindApproval {
		return nil, fault.New(fault.Invalid, p.ElicitID+" is a tool call waiting for confirmation: answer it with tool/confirm")
	}
	resp := interaction.Response{Cancelled: true}
	if p.Action == "accept" {
		var err error
		if resp, err = answerOf(req, p); err != nil {
			return nil, err
		}
	}
	if err := sess.Answer(req.ID, resp); err != nil {
		var ve *interaction.ValidationError
		switch {
		case errors.As(err, &ve):
			return nil, fault.New(fault.Invalid, "Invalid answer: "+ve.Error())
		case errors.Is(err, interaction.ErrAlreadyResolved):
			return nil, fault.New(fault.Conflict, "Elicitation "+p.ElicitID+" was already settled")
		case errors.Is(err, interaction.ErrNotFound):
			return nil, fault.New(fault.NotFound, "Elicitation not found: "+p.ElicitID)
		}
		return nil, err
	}
	done := map[string]string{"accept": "Elicitation accepted", "decline": "Elicitation declined", "cancel": "Elicitation cancelled"}
	return StatusResponse{Status: "ok", Message: done[p.Action]}, nil
}

// answerOf turns an accepted elicitation into the answer the question's
// kind takes.
func answerOf(req interaction.Request, p elicitPayload) (interaction.Response, error) {
	bad := func(msg string) (interaction.Response, error) {
		return interaction.Response{}, fault.New(fault.Invalid, msg)
	}
	switch req.Kind {
	case interaction.KindConfirm:
		switch v := p.Value.(type) {
		case bool:
			return interaction.Response{Confirmed: v}, nil
		case string:
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "yes", "true", "y", "1":
				return interaction.Response{Confirmed: true}, nil
			case "no", "false", "n", "0":
				return interaction.Response{Confirmed: false}, nil
			}
		}
		return bad("value must be true or false (or \"yes\"/\"no\") for a confirmation")
	case interaction.KindForm:
		values := p.Values
		if values == nil {
			if m, ok := p.Value.(map[string]any); ok {
				values = m
			}
		}
		if values == nil {
			return bad("values must be an object of the form's fields")
		}
		return interaction.Response{Values: values}, nil
	}
	v, ok := p.Value.(string)
	if !ok {
		if list, isList := p.Value.([]any); isList && len(list) == 1 {
			v, ok = list[0].(string)
		}
	}
	if !ok {
		return bad("value must be a string")
	}
	return interaction.Response{Value: v}, nil
}
