// Package sessionws is the per-session WebSocket face: a client connects
// to /api/v1/ws/sessions/{id}, subscribes, and follows that one session's
// progress (progress_update at most once per second, status_change on
// every transition, completed and error with what a person needs), answers
// the questions that suspend it (input_required → provide_input), and
// resumes after a drop or a restart with after_seq. It speaks
// ../shared/specs/session-websocket-protocol.md, translated onto the
// shared session layer (package server): a session started over any face
// can be watched and answered here.
package sessionws

import (
	"context"
	_ "embed"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// face names this face's clients in the layer.
const face = "session-ws"

// Paths the face serves; Conversions is the spec's own spelling.
const (
	SessionsPath    = "/api/v1/ws/sessions/"
	ConversionsPath = "/api/v1/ws/conversions/"
	SchemaPath      = "/api/v1/ws/schema.json"
)

// Close codes of the spec.
const (
	closeNormal       = 1000
	closeGoingAway    = 1001
	closeServerError  = 1011
	closeUnauthorized = 4001
	closeNotFound     = 4004
	closeTooMany      = 4429
)

//go:embed schema.json
var schemaJSON []byte

// Options configure the face. Zero values take the spec's defaults.
type Options struct {
	// Token is the server's shared token, accepted when RequireJWT is
	// off (a loopback server without JWT keys).
	Token string
	// RequireJWT accepts only JWTs: the face authorizes per session,
	// which needs a subject.
	RequireJWT bool
	// OriginPatterns are browser origins allowed besides the server's own.
	OriginPatterns []string
	// Heartbeat is how often the server pings (default 30 s); a client
	// silent for two intervals is closed with 1001.
	Heartbeat time.Duration
	// ProgressInterval is the least time between two progress_updates of
	// a session (default 1 s).
	ProgressInterval time.Duration
	// MaxConnectionsPerSubject bounds one subject's connections (default
	// 100).
	MaxConnectionsPerSubject int
	// MessageRate is how many messages a connection may send per second
	// (default 10); over it the connection is closed with 4429.
	MessageRate int
	// MaxMessageBytes bounds one client message (default 1 MiB).
	MaxMessageBytes int
	// MaxQueuedBytes bounds what may wait for one client (default 8 MiB):
	// past it a client that stopped reading is closed with 1011.
	MaxQueuedBytes int
	// KeyHint names the environment variable that holds a provider's
	// key, for the advice of an authentication error.
	KeyHint func(provider string) string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) fill() {
	if o.Heartbeat == 0 {
		o.Heartbeat = 30 * time.Second
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.MaxConnectionsPerSubject <= 0 {
		o.MaxConnectionsPerSubject = 100
	}
	if o.MessageRate <= 0 {
		o.MessageRate = 10
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 1 << 20
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = 8 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Face serves the protocol.
type Face struct {
	srv *server.Server
	opt Options
	// schema is resolved on the first client message, not at start: its
	// resolved schemas are about 1.5 MB that a server whose per-session
	// WebSocket nobody uses would hold for nothing.
	schema func() (*validator, error)

	mu       sync.Mutex
	watches  map[*server.Hosted]*watch
	aways    map[*watch]struct{}  // watches of sessions other nodes run (cluster.go)
	subjects server.SubjectCounts // connections per subject
	closing  bool
	wg       sync.WaitGroup // watches' goroutines
}

// New builds the face on srv.
func New(srv *server.Server, o Options) (*Face, error) {
	o.fill()
	v := sync.OnceValues(func() (*validator, error) { return newValidator(schemaJSON) })
	f := &Face{srv: srv, opt: o, schema: v, watches: map[*server.Hosted]*watch{}, aways: map[*watch]struct{}{}, subjects: server.SubjectCounts{Max: o.MaxConnectionsPerSubject}}
	if err := srv.Register(f.registry()); err != nil {
		return nil, err
	}
	srv.OnLifecycle(f.deletedElsewhere) // cluster.go
	srv.OnShutdown(func(time.Duration) { f.shutdown() })
	return f, nil
}

// Schema is the JSON Schema of every message, as served.
func Schema() []byte { return schemaJSON }

// Mount registers the face's paths on mux.
func (f *Face) Mount(mux *http.ServeMux) {
	mux.Handle(SessionsPath, f.Handler())
	mux.Handle(ConversionsPath, f.Handler())
	mux.HandleFunc(SchemaPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/schema+json")
		_, _ = w.Write(schemaJSON)
	})
}

// Handler serves connections on both paths; the session id is the path's
// last segment.
func (f *Face) Handler() http.Handler {
	return http.HandlerFunc(f.serve)
}

// sessionIDOf reads the id from /api/v1/ws/{sessions,conversions}/{id}.
func sessionIDOf(path string) string {
	for _, p := range []string{SessionsPath, ConversionsPath} {
		if rest, ok := strings.CutPrefix(path, p); ok {
			return strings.TrimSuffix(rest, "/")
		}
	}
	return ""
}

func (f *Face) serve(w http.ResponseWriter, r *http.Request) {
	id := sessionIDOf(r.URL.Path)
	if id == "" || strings.Contains(id, "/") {
		http.Error(w, "Not found: connect to "+SessionsPath+"{session_id}", http.StatusNotFound)
		return
	}
	ws, err := server.AcceptWebSocket(w, r, server.WebSocketOptions{OriginPatterns: f.opt.OriginPatterns, Buffers: f.srv.WriteBuffers()})
	if err != nil {
		f.srv.Logger().Debug("websocket handshake failed", "face", face, "remote", r.RemoteAddr, "err", err)
		return
	}
	defer ws.Drop()
	ctx := f.srv.Context()
	who, err := f.srv.Identify(ctx, r, server.IdentifyOptions{Token: f.opt.Token, RequireJWT: f.opt.RequireJWT, Transport: "websocket"})
	if err != nil {
		f.refuse(ws, closeUnauthorized, protocolError("unauthorized", "Invalid or expired token", map[string]any{"reason": err.Error()}, f.opt.Now()))
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var h *server.Hosted
	if f.srv.RunsElsewhere(lctx, id) {
		// Served here from the cluster's stream; the session's node says
		// whether who may watch it (cluster.go), within askTimeout: a
		// node that died holds the session until its lease expires.
		err = f.visibleElsewhere(ctx, id, who)
		if err != nil {
			f.srv.Logger().Debug("sessionws: the session's node refused a watch", "session", id, "err", err)
		}
	} else {
		h, err = f.srv.SessionFor(lctx, id, who)
	}
	cancel()
	if err != nil {
		e := protocolError("session_not_found", "Session "+id+" does not exist", nil, f.opt.Now())
		e.SessionID = id
		f.refuse(ws, closeNotFound, e)
		return
	}
	if !f.subjects.Admit(who.Subject) {
		f.refuse(ws, closeTooMany, protocolError("too_many_connections", "Too many connections for this user (at most "+strconv.Itoa(f.opt.MaxConnectionsPerSubject)+")", nil, f.opt.Now()))
		return
	}
	defer f.subjects.Leave(who.Subject)
	c := &conn{f: f, ws: ws, h: h, id: id, who: who, remote: r.RemoteAddr}
	cl, err := f.srv.Attach(c, server.ClientOptions{Face: face, Transport: "websocket", Value: c, MaxQueuedBytes: f.opt.MaxQueuedBytes})
	if err != nil {
		if fault.CodeOf(err) == fault.ShuttingDown {
			f.refuse(ws, closeGoingAway, protocolError("server_shutting_down", err.Error(), nil, f.opt.Now()))
			return
		}
		f.refuse(ws, closeTooMany, protocolError("too_many_connections", err.Error(), nil, f.opt.Now()))
		return
	}
	c.client = cl
	c.run()
}

// refuse sends one error and closes with code, then waits briefly for
// the peer's close.
func (f *Face) refuse(ws *server.WebSocket, code int, e *errorMsg) {
	_ = ws.WriteText([][]byte{encode(e)})
	ws.Close(code, server.ClipCloseReason(e.Message))
	var buf []byte
	for {
		if _, err := ws.Read(&buf, 0); err != nil {
			return
		}
		buf = buf[:0]
	}
}

// watchFor returns the session's watch, starting it for the first
// subscriber; release undoes it.
func (f *Face) watchFor(h *server.Hosted) *watch {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.watches[h]
	if w == nil {
		w = newWatch(f, h)
		if f.closing {
			// The server is going: a watch that sends nothing.
			w.refs++
			return w
		}
		f.watches[h] = w
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			w.loop()
		}()
	}
	w.refs++
	return w
}

func (f *Face) release(w *watch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.refs--; w.refs > 0 {
		return
	}
	if f.watches[w.h] == w {
		delete(f.watches, w.h)
	}
	w.stopOnce.Do(func() { close(w.stop) })
}

// shutdown stops every watch's goroutine; the layer closes the clients.
func (f *Face) shutdown() {
	f.mu.Lock()
	f.closing = true
	for h, w := range f.watches {
		delete(f.watches, h)
		w.stopOnce.Do(func() { close(w.stop) })
	}
	for w := range f.aways {
		delete(f.aways, w)
		w.stopOnce.Do(func() { close(w.stop) })
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// Close stops the face's goroutines (the server's shutdown does this
// too).
func (f *Face) Close() { f.shutdown() }
