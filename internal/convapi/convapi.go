// Package convapi is the conversation API as an agentd face: REST with
// Server-Sent Events, in the wire gptme's v2 server ships and its clients
// (gptme-webui, gptme's own tests) speak, over the shared session layer.
//
// A conversation is a layer session: one created here is in pi-server's
// list_sessions, and a pi-server session is a conversation here. Commands
// that change a conversation go through the layer's pipeline (their names
// start with "rest."), so they are ordered in the session's lane with
// every other face's commands, journaled, rate-limited and replayed by an
// Idempotency-Key header; reads look the session up directly. Events are
// the layer's subscriptions with a Codec of this face (codec.go) and an
// SSE Link (sse.go), so a client that reconnects with Last-Event-ID gets
// every event it missed.
//
// gptme's ephemeral "sessions" are attachments here (attach.go): a
// client's handle on a conversation, cleaned up after an idle time, that
// owns nothing of the conversation.
package convapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
)

// APIVersion and ContractRevision are what GET /api/v2 reports; clients
// check api_version. gptme's revision 2 (gptme/server/openapi_docs.py)
// changes one endpoint, POST /api/v2/user/api-key (save a provider key
// into the server's config): 200 with a "warning" when the provider is
// unreachable, where revision 1 answered 502. agentd has no such
// endpoint (keys are the operator's, in models.json or the environment,
// never set by a client), so it does not claim revision 2.
const (
	APIVersion       = 2
	ContractRevision = 1
)

// Models is what the face needs of the model registry.
type Models interface {
	// Available lists the models that can be used now, in a stable order.
	Available() []*llm.Model
}

// Options configure the face.
type Options struct {
	Models Models
	// DefaultModel is the model of new conversations (the engine's
	// default; the offline model when no key is configured).
	DefaultModel *llm.Model
	Version      string
	// Token, when set, is required of every request but the public ones
	// (GET /api/v2, /api/v2/version, /api/v2/openapi.json): as
	// "Authorization: Bearer", the cookie POST /api/v2/auth/cookie sets,
	// or ?token= (EventSource cannot send headers).
	Token string
	// OriginPatterns are the browser origins allowed besides the server's
	// own host (host patterns, as for the WebSocket).
	OriginPatterns []string
	// SessionIdle is how long an attachment (gptme's session) with no
	// stream and no request stays: 0 takes 30 minutes.
	SessionIdle time.Duration
	// Ping is the heartbeat interval of event streams: 0 takes 15 s.
	Ping time.Duration
	// StepWait is how long step waits for the first token or an early
	// error before answering: 0 takes 5 s.
	StepWait time.Duration
	// MCP starts the MCP servers a conversation's configuration names
	// (its mcp section); nil refuses such a configuration.
	MCP MCPStarter
	// MaxStreamsPerSubject bounds the event streams one JWT subject
	// holds on this node at once: 0 takes 100.
	MaxStreamsPerSubject int
}

// Server is the conversation API face of a server.Server.
type Server struct {
	srv   *server.Server
	opt   Options
	codec *codec
	att   *attachments
	table []route
	doc   openapiCache
	mcp   mcpServers
	// streams counts event streams per subject.
	streams server.SubjectCounts
}

// New adds the face to srv: its commands and its shutdown. Call it
// before srv.Start.
func New(srv *server.Server, opt Options) (*Server, error) {
	if opt.Models == nil {
		return nil, errors.New("convapi: Models is required")
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.SessionIdle == 0 {
		opt.SessionIdle = 30 * time.Minute
	}
	if opt.Ping <= 0 {
		opt.Ping = 15 * time.Second
	}
	if opt.StepWait <= 0 {
		opt.StepWait = 5 * time.Second
	}
	if opt.MaxStreamsPerSubject <= 0 {
		opt.MaxStreamsPerSubject = 100
	}
	s := &Server{srv: srv, opt: opt, codec: &codec{requests: &requestIDs{}}, att: newAttachments(opt.SessionIdle),
		streams: server.SubjectCounts{Max: opt.MaxStreamsPerSubject}}
	s.codec.messages = func(id string) []*llm.Message {
		// Only a loaded session emits: the lookup never loads one. nil
		// is a session not loaded here (one another cluster node runs,
		// whose events reach this node's streams from the cluster's).
		for _, h := range srv.Sessions() {
			if h.ID() == id {
				if m := h.Session().Messages(); m != nil {
					return m
				}
				return []*llm.Message{}
			}
		}
		return nil
	}
	s.table = s.routes()
	srv.OnOpen(s.restoreMCP)
	srv.OnLifecycle(s.deletedElsewhere) // sse_cluster.go
	// An attachment deleted on another node (sse_cluster.go).
	srv.OnNote(face, s.attachmentDeleted)
	if err := srv.Register(s.registry()); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler serves the API, /api/v2 and the design document's
// /api/conversations paths, and hands every other request to next. It
// goes in front of the mux rather than on it: ServeMux answers a path
// with a "." or ".." segment with a redirect to the cleaned path, where
// this API answers 400 "Invalid conversation_id", as gptme's does.
func (s *Server) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := relative(r.URL.EscapedPath()); ok {
			s.serveHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
