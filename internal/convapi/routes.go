package convapi

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// route is one endpoint: how it is matched, who may call it, what it
// takes and answers (for the OpenAPI document, generated from this table)
// and its handler.
type route struct {
	method string
	// path is relative to /api/v2; {conversation_id}, {index} and
	// {session_id} are path parameters.
	path   string
	public bool
	// creates marks a route that makes the conversation it names when
	// that does not exist; its command checks, in the conversation's
	// lane, that the principal may see one that does. Every other route
	// naming a conversation is answered 404 before its handler runs
	// when the principal may not see it (or it does not exist).
	creates bool
	summary string
	// body and resp are the Go types of the request and 200 response
	// bodies (zero values); nil for none.
	body, resp any
	// list marks a response that is a JSON array of resp.
	list bool
	// alt is another 200 body (the paginated conversation list).
	alt      any
	statuses []int
	query    []queryParam
	stream   bool // a text/event-stream of events
	handle   func(s *Server, w http.ResponseWriter, r *http.Request, p params) error
}

type queryParam struct {
	name, typ, desc string
}

// params are a request's path parameters, checked.
type params struct {
	conv  string
	index int
	sid   string
}

// errStatuses are the error statuses most endpoints can answer besides
// their own: bad input, credentials, the Host and Origin checks, limits,
// a server shutting down, and a failure.
var errStatuses = []int{400, 401, 403, 413, 429, 500, 503}

func (s *Server) routes() []route {
	conv := "/conversations/{conversation_id}"
	return []route{
		{method: "GET", path: "", public: true, summary: "The API's version and capabilities", resp: RootResponse{}, handle: (*Server).root},
		{method: "GET", path: "/version", public: true, summary: "The API version", resp: VersionResponse{}, handle: (*Server).version},
		{method: "GET", path: "/openapi.json", public: true, summary: "This document", handle: (*Server).openapi},
		{method: "POST", path: "/auth/cookie", summary: "Set the HttpOnly auth cookie (needs Authorization: Bearer)", resp: CookieResponse{}, handle: (*Server).setCookie},
		{method: "DELETE", path: "/auth/cookie", public: true, summary: "Clear the auth cookie", resp: CookieResponse{}, handle: (*Server).clearCookie},
		{method: "GET", path: "/models", summary: "The models that can be used now, and the default", resp: ModelsResponse{}, handle: (*Server).models},
		{method: "GET", path: "/server/health", summary: "How busy the attachments' conversations are", resp: ServerHealth{}, handle: (*Server).serverHealth},
		{method: "GET", path: "/sessions", summary: "The attachments (gptme sessions)", resp: SessionInfo{}, list: true, handle: (*Server).sessions},
		{method: "DELETE", path: "/sessions/{session_id}", summary: "Remove an attachment and close its event streams", resp: StatusResponse{}, statuses: []int{404}, handle: (*Server).deleteSession},
		{method: "GET", path: "/conversations", summary: "List conversations, most recently active first", resp: ConversationSummary{}, list: true, alt: ConversationPage{},
			query: []queryParam{{"limit", "integer", "at most this many (default 100, at most 1000)"}, {"q", "string", "only those whose name, id or last message contains this"},
				{"search", "string", "alias of q"}, {"paginated", "boolean", "answer {conversations, next_cursor}"}, {"cursor", "string", "next_cursor of the page before"}, {"detail", "boolean", "accepted"}},
			handle: (*Server).listConversations},
		{method: "GET", path: conv, summary: "A conversation and its messages", resp: Conversation{}, statuses: []int{404},
			query:  []queryParam{{"limit", "integer", "only the last N messages"}, {"before", "integer", "with limit: the N messages before this index"}},
			handle: (*Server).getConversation},
		{method: "PUT", path: conv, creates: true, summary: "Create a conversation (and an attachment)", body: CreateRequest{}, resp: CreatedResponse{}, statuses: []int{409}, handle: (*Server).createConversation},
		{method: "POST", path: conv, summary: "Add a message without running the agent (a built-in command such as /help runs instead and answers its output)", body: AppendRequest{}, resp: StatusResponse{}, alt: CommandResponse{}, statuses: []int{404, 409}, handle: (*Server).appendMessage},
		{method: "DELETE", path: conv, summary: "Delete a conversation (its file stays on disk)", resp: StatusResponse{}, statuses: []int{404, 409}, handle: (*Server).deleteConversation},
		{method: "GET", path: conv + "/events", summary: "The conversation's events (Server-Sent Events)", stream: true, statuses: []int{404},
			query:  []queryParam{{"session_id", "string", "the attachment to use; a new one without"}, {"after", "string", "resume after this frame id, a seq or <seq>.<part> (as Last-Event-ID)"}, {"token", "string", "the token, for EventSource"}},
			handle: (*Server).events},
		{method: "POST", path: conv + "/step", summary: "Run the agent on the conversation as it stands", body: StepRequest{}, resp: StepResponse{}, statuses: []int{404, 409}, handle: (*Server).step},
		{method: "POST", path: conv + "/tool/confirm", summary: "Answer a pending tool call", body: ConfirmRequest{}, resp: StatusResponse{}, statuses: []int{404, 409}, handle: (*Server).confirm},
		{method: "POST", path: conv + "/interrupt", summary: "Stop the run, pending and running tools included", body: InterruptRequest{}, resp: StatusResponse{}, statuses: []int{404}, handle: (*Server).interrupt},
		{method: "GET", path: conv + "/commands", summary: "The slash commands a message can start with: built-ins, prompt templates and skills", resp: CommandsResponse{}, statuses: []int{404}, handle: (*Server).getCommands},
		{method: "GET", path: conv + "/config", summary: "The conversation's configuration", resp: ConversationConfig{}, statuses: []int{404}, handle: (*Server).getConfig},
		{method: "PATCH", path: conv + "/config", summary: "Change the model, tools, thinking level or name", body: ConversationConfig{}, resp: ConfigResponse{}, statuses: []int{404, 409}, handle: (*Server).patchConfig},
		{method: "PATCH", path: conv + "/messages/{index}", summary: "Edit a user message (on a new branch of the session tree)", body: EditRequest{}, resp: Conversation{}, statuses: []int{404, 409},
			query: []queryParam{{"truncate", "string", "1: drop the messages after it"}}, handle: (*Server).editMessage},
		{method: "DELETE", path: conv + "/messages/{index}", summary: "Remove a message (on a new branch of the session tree)", resp: Conversation{}, statuses: []int{404, 409}, handle: (*Server).deleteMessage},
		{method: "POST", path: conv + "/fork", summary: "Copy the conversation up to a message into a new one", resp: CreatedResponse{}, statuses: []int{404, 409},
			query: []queryParam{{"after_message", "integer", "the last message index to copy (required)"}, {"branch", "string", "only main"}}, handle: (*Server).fork},
		{method: "POST", path: conv + "/rerun", summary: "Run the last assistant message's tool calls again, through confirmation", body: RerunRequest{}, resp: RerunResponse{}, statuses: []int{404, 409}, handle: (*Server).rerun},
		{method: "POST", path: conv + "/transcript", creates: true, summary: "Add a voice call's turns (making the conversation if need be)", body: TranscriptRequest{}, resp: TranscriptResponse{}, statuses: []int{404, 409}, handle: (*Server).transcript},
		{method: "GET", path: conv + "/changes", summary: "The turns that changed files (checkpoints), and the revert that can be undone", resp: ChangesResponse{}, statuses: []int{404}, handle: (*Server).changes},
		{method: "GET", path: conv + "/changes/diff", summary: "What a turn did to the files: paths and hunks", resp: TurnDiffResponse{}, statuses: []int{404},
			query: []queryParam{{"turn", "string", "the turn's id (from .../changes); the last turn that changed files without"}}, handle: (*Server).turnDiff},
		{method: "POST", path: conv + "/changes/revert", summary: "Put the files back as they were before a turn, optionally truncating the conversation there", body: RevertRequest{}, resp: RevertResponse{}, statuses: []int{404, 409}, handle: (*Server).revert},
		{method: "POST", path: conv + "/changes/undo", summary: "Undo the last revert (files, and the conversation if it was truncated)", resp: RevertResponse{}, statuses: []int{404, 409}, handle: (*Server).undoRevert},
		{method: "POST", path: conv + "/workspace/upload", summary: "Keep files (multipart/form-data) with the conversation for a message's files (attachments/<name>)", resp: UploadResponse{}, statuses: []int{404, 409}, handle: (*Server).upload},
		{method: "POST", path: conv + "/elicit/respond", summary: "Answer a question of the agent", body: ElicitRequest{}, resp: StatusResponse{}, statuses: []int{404, 409}, handle: (*Server).elicit},
	}
}

// serveHTTP is the face's entry point, behind the layer's Host check.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	log := s.srv.Logger()
	if !s.checkOrigin(w, r) {
		return
	}
	rel, ok := relative(r.URL.EscapedPath())
	if !ok {
		writeError(w, log, r, fault.New(fault.NotFound, "Not found: "+clip(r.URL.Path, 200)))
		return
	}
	rt, p, allow, err := s.match(r.Method, rel)
	if err != nil {
		writeError(w, log, r, err)
		return
	}
	if rt == nil {
		if r.Method == http.MethodOptions && len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(append(allow, "OPTIONS"), ", "))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, log, r, fault.New(codeMethodNotAllowed, "Method "+r.Method+" is not allowed on "+clip(r.URL.Path, 200)+"; use "+strings.Join(allow, " or ")))
			return
		}
		writeError(w, log, r, fault.New(fault.NotFound, "Not found: "+clip(r.URL.Path, 200)))
		return
	}
	if !rt.public {
		who, err := s.authorize(r)
		if err != nil {
			writeError(w, log, r, err)
			return
		}
		r = r.WithContext(withPrincipal(r.Context(), who))
		if p.conv != "" && !rt.creates && !s.sees(r.Context(), p.conv) {
			// The one visibility check every route naming a conversation
			// passes, so a new route cannot forget it: another subject's
			// conversation is answered exactly as one that does not
			// exist. Handlers check again where they load it.
			writeError(w, log, r, fault.New(fault.NotFound, "Conversation not found: "+p.conv))
			return
		}
	}
	if err := rt.handle(s, w, r, p); err != nil {
		writeError(w, log, r, err)
	}
}

// relative is the path below /api/v2, or below /api for the design
// document's /api/conversations paths.
func relative(escaped string) (string, bool) {
	switch {
	case escaped == "/api/v2" || strings.HasPrefix(escaped, "/api/v2/"):
		return strings.TrimSuffix(escaped[len("/api/v2"):], "/"), true
	case escaped == "/api/conversations" || strings.HasPrefix(escaped, "/api/conversations/"):
		return strings.TrimSuffix(escaped[len("/api"):], "/"), true
	}
	return "", false
}

// match finds the route of a method and path. Without one, allow lists
// the methods the path has.
func (s *Server) match(method, rel string) (*route, params, []string, error) {
	segs := strings.Split(strings.TrimPrefix(rel, "/"), "/")
	if rel == "" {
		segs = nil
	}
	var allow []string
	var perr error
	for _, rt := range s.table {
		p, ok, err := matchPath(rt.path, segs)
		if err != nil {
			perr = err
			continue
		}
		if !ok {
			continue
		}
		if rt.method == method {
			return &rt, p, nil, nil
		}
		allow = append(allow, rt.method)
	}
	if len(allow) > 0 {
		sort.Strings(allow)
		return nil, params{}, allow, nil
	}
	if perr == nil && len(segs) > 2 && segs[0] == "conversations" {
		// A path below a conversation that no route has: a hostile id is
		// still answered as one (400), whatever follows it.
		raw, err := url.PathUnescape(segs[1])
		if err != nil {
			return nil, params{}, nil, fault.New(fault.Invalid, "Invalid conversation_id")
		}
		perr = checkConversationID(raw)
	}
	return nil, params{}, nil, perr
}

// matchPath matches the escaped segments of a path against a route's
// pattern. A conversation id that is not a safe id is an error, so a
// hostile id is answered 400 rather than "not found".
func matchPath(pattern string, segs []string) (params, bool, error) {
	var pat []string
	if pattern != "" {
		pat = strings.Split(strings.TrimPrefix(pattern, "/"), "/")
	}
	if len(pat) != len(segs) {
		return params{}, false, nil
	}
	var p params
	var idErr error
	for i, ps := range pat {
		raw, err := url.PathUnescape(segs[i])
		switch ps {
		case "{conversation_id}":
			if err != nil {
				idErr = fault.New(fault.Invalid, "Invalid conversation_id")
				continue
			}
			if e := checkConversationID(raw); e != nil {
				idErr = e
				continue
			}
			p.conv = raw
		case "{session_id}":
			if err != nil || raw == "" {
				return params{}, false, nil
			}
			p.sid = raw
		case "{index}":
			n, perr := strconv.Atoi(segs[i])
			if perr != nil || n < 0 {
				return params{}, false, nil
			}
			p.index = n
		default:
			if segs[i] != ps {
				return params{}, false, nil
			}
		}
	}
	if idErr != nil {
		return params{}, false, idErr
	}
	return p, true, nil
}

// maxIDBytes is gptme's limit: one path component (NAME_MAX).
const maxIDBytes = 255

// checkConversationID applies gptme's rule (one safe path component, at
// most 255 bytes, with its error texts) and then the layer's session id
// rule, since a conversation is a session.
func checkConversationID(id string) error {
	invalid := fault.New(fault.Invalid, "Invalid conversation_id")
	switch {
	case len(id) > maxIDBytes:
		return fault.New(fault.Invalid, "conversation_id too long")
	case strings.TrimSpace(id) == "", strings.TrimSpace(id) != id, !utf8.ValidString(id):
		return invalid
	case id == ".", strings.Contains(id, ".."), strings.ContainsAny(id, "/\\\x00"):
		return invalid
	case strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return invalid
	}
	if server.CheckID(id) != nil {
		return fault.New(fault.Invalid, "Invalid conversation_id: use only letters, digits, '_', '-' and '.' (at most 255 bytes)")
	}
	return nil
}

// checkOrigin refuses a browser request from an origin that is neither
// the server's own nor allowed, and answers CORS for allowed ones: the
// exact origin, never a wildcard. It reports false when it has answered.
func (s *Server) checkOrigin(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if err := server.CheckOrigin(r, s.opt.OriginPatterns); err != nil {
		writeError(w, s.srv.Logger(), r, fault.New(fault.Forbidden, "Cross-origin request refused: "+err.Error()+" (start agentd with --allow-origin to allow it)"))
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "X-API-Version, ETag, Retry-After")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, If-None-Match")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	return true
}
