package acp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/piclient"
	"github.com/agentd-dev/agentd/internal/session"
)

// Remote is a running `agentd serve` reached over its pi-server
// WebSocket: `agentd acp --connect` bridges the editor's sessions to it,
// so an editor and a browser watch and drive the same sessions.
type Remote struct {
	conn *piclient.Conn
	log  *slog.Logger
	// url and token reach the same server's REST face (remote_mcp.go).
	url, token string

	ctx    context.Context // ends with Close
	cancel context.CancelFunc

	// prefix makes the command ids of this connection its own: pi-server
	// remembers ids across connections to replay duplicates.
	prefix string

	mu       sync.Mutex
	nextID   int64
	started  map[string]chan struct{} // prompt ids → closed at command_started
	sessions map[string]*remoteSession
	err      error // why the connection ended
}

// DialRemote connects to the pi-server WebSocket at url (ws:// or
// wss://), with token as a bearer token when it is not "", and waits for
// its server_ready.
func DialRemote(ctx context.Context, url, token string, log *slog.Logger) (*Remote, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	r := &Remote{log: log, url: url, token: token, prefix: "acp-" + hex.EncodeToString(nonce[:]) + "-",
		started: map[string]chan struct{}{}, sessions: map[string]*remoteSession{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	conn, err := piclient.Dial(ctx, url, piclient.Options{Header: h, Timeout: 15 * time.Second, Frame: r.frame, Ended: r.ended})
	if err != nil {
		r.cancel()
		var de *piclient.DialError
		var ce websocket.CloseError
		switch {
		case errors.As(err, &de):
			if de.Status == http.StatusUnauthorized || de.Status == http.StatusForbidden {
				return nil, fmt.Errorf("connecting to agentd serve at %s: %d %s: give the server's token with --token or AGENTD_TOKEN", url, de.Status, http.StatusText(de.Status))
			}
			return nil, fmt.Errorf("connecting to agentd serve at %s: %w (is `agentd serve` running there?)", url, de.Err)
		case errors.Is(err, piclient.ErrNotReady):
			return nil, fmt.Errorf("connecting to agentd serve at %s: the first frame is not server_ready, is this a pi-server WebSocket?", url)
		case errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation:
			if token == "" {
				return nil, fmt.Errorf("connecting to agentd serve at %s: refused: %s: give the server's token with --token or AGENTD_TOKEN", url, ce.Reason)
			}
			return nil, fmt.Errorf("connecting to agentd serve at %s: refused: %s", url, ce.Reason)
		}
		return nil, fmt.Errorf("connecting to agentd serve at %s: %w", url, err)
	}
	r.conn = conn
	return r, nil
}

// Close ends the connection and waits for its reader.
func (r *Remote) Close() error {
	r.cancel()
	// A connection the server already ended has nothing left to close.
	r.conn.Close("")
	return nil
}

// ended is the end of the connection: every call waiting fails, and so
// does every one after, and every session's run ends.
func (r *Remote) ended(err error) {
	if r.ctx.Err() == nil {
		err = fmt.Errorf("the connection to agentd serve ended: %w", err)
		r.log.Error("agentd serve connection", "err", err)
	} else {
		err = errors.New("the connection to agentd serve was closed")
	}
	r.mu.Lock()
	r.err = err
	for _, c := range r.started {
		close(c)
	}
	r.started = map[string]chan struct{}{}
	sessions := make([]*remoteSession, 0, len(r.sessions))
	for _, s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	for _, s := range sessions {
		s.lost(err)
	}
}

// frame takes the frames that are not a response to a command waiting:
// command_started for a prompt, and the sessions' events.
func (r *Remote) frame(pf piclient.Frame) {
	switch string(pf.Type) {
	case "command_started", "event":
	case "":
		r.log.Warn("agentd serve sent a frame that is not JSON or has no type", "frame", string(pf.Data[:min(len(pf.Data), 120)]))
		return
	default:
		return
	}
	var f struct {
		Type      string          `json:"type"`
		SessionID string          `json:"sessionId"`
		Event     json.RawMessage `json:"event"`
		Data      struct {
			CommandID string `json:"commandId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(pf.Data, &f); err != nil {
		r.log.Warn("agentd serve sent a frame that is not JSON", "err", err)
		return
	}
	switch f.Type {
	case "command_started":
		r.mu.Lock()
		if c := r.started[f.Data.CommandID]; c != nil {
			close(c)
			delete(r.started, f.Data.CommandID)
		}
		r.mu.Unlock()
	case "event":
		r.mu.Lock()
		s := r.sessions[f.SessionID]
		r.mu.Unlock()
		if s != nil {
			s.event(f.Event)
		}
	}
}

// send writes cmd with a fresh id and returns the channel its response
// arrives on; started, when not nil, is closed when the command starts.
func (r *Remote) send(ctx context.Context, cmd map[string]any, started chan struct{}) (string, <-chan piclient.Reply, error) {
	r.mu.Lock()
	if r.err != nil {
		err := r.err
		r.mu.Unlock()
		return "", nil, err
	}
	r.nextID++
	id := r.prefix + strconv.FormatInt(r.nextID, 10)
	if started != nil {
		r.started[id] = started
	}
	r.mu.Unlock()
	c, err := r.conn.Send(ctx, id, cmd)
	if err != nil {
		r.mu.Lock()
		delete(r.started, id)
		lost := r.err
		r.mu.Unlock()
		var ce *piclient.CallError
		if errors.As(err, &ce) && ce.Kind == piclient.ErrLost && lost != nil {
			return "", nil, lost
		}
		return "", nil, fmt.Errorf("sending %s to agentd serve: %w", cmd["type"], err)
	}
	return id, c, nil
}

// call runs one command and decodes its data into out (when not nil).
func (r *Remote) call(ctx context.Context, cmd map[string]any, out any) error {
	typ := cmd["type"]
	id, c, err := r.send(ctx, cmd, nil)
	if err != nil {
		return err
	}
	select {
	case rep := <-c:
		return r.decode(rep, typ, out)
	case <-ctx.Done():
		r.conn.Forget(id, false)
		return ctx.Err()
	}
}

// decode is a command's outcome: its data into out (when not nil), the
// server's refusal, or the connection's end.
func (r *Remote) decode(rep piclient.Reply, typ any, out any) error {
	if rep.Lost != nil {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		return fmt.Errorf("agentd serve: %v: %s", typ, err)
	}
	if !rep.Success {
		return fmt.Errorf("agentd serve: %v: %s", typ, rep.Error)
	}
	if out != nil {
		if err := rep.Decode(out); err != nil {
			return fmt.Errorf("agentd serve: %v: reading the response: %w", typ, err)
		}
	}
	return nil
}

// remoteInfo is the part of pi-server's SessionInfo the bridge reads.
type remoteInfo struct {
	SessionID   string `json:"sessionId"`
	SessionName string `json:"sessionName"`
	SessionFile string `json:"sessionFile"`
	Cwd         string `json:"cwd"`
	CreatedAt   string `json:"createdAt"`
	IsStreaming bool   `json:"isStreaming"`
	State       string `json:"state"`
	Model       *struct {
		ContextWindow int64 `json:"contextWindow"`
	} `json:"model"`
}

// beyondAnySeq is a cursor past every session's last event (the largest
// integer a JSON number holds exactly).
const beyondAnySeq = 1<<53 - 1

// open subscribes to a session with cmd (create_session, switch_session,
// load_session) and returns it.
func (r *Remote) open(ctx context.Context, cmd map[string]any, cwd string) (*remoteSession, error) {
	var res struct {
		SessionID   string     `json:"sessionId"`
		SessionInfo remoteInfo `json:"sessionInfo"`
		// Messages come with a switch_session whose cursor the server
		// cannot serve (see Load).
		Messages     []*llm.Message `json:"messages"`
		CursorTooOld bool           `json:"cursorTooOld"`
	}
	// Registered before the command: the events that follow its response
	// must find the session.
	s := newRemoteSession(r, cwd)
	if id, _ := cmd["sessionId"].(string); id != "" {
		s.id = id
		r.register(s)
	}
	if err := r.call(ctx, cmd, &res); err != nil {
		r.unregister(s)
		return nil, err
	}
	if res.SessionID == "" {
		res.SessionID = res.SessionInfo.SessionID
	}
	if s.id == "" {
		s.id = res.SessionID
		r.register(s)
	}
	if res.SessionInfo.Cwd != "" {
		s.cwd = res.SessionInfo.Cwd
	}
	if res.SessionInfo.Model != nil {
		s.window = res.SessionInfo.Model.ContextWindow
	}
	s.mu.Lock()
	s.running = res.SessionInfo.IsStreaming
	s.mu.Unlock()
	msgs := res.Messages
	if !res.CursorTooOld {
		var got struct {
			Messages []*llm.Message `json:"messages"`
		}
		if err := r.call(ctx, map[string]any{"type": "get_messages", "sessionId": s.id}, &got); err != nil {
			r.unregister(s)
			return nil, err
		}
		msgs = got.Messages
	}
	s.mu.Lock()
	s.messages = msgs
	s.seeCallsLocked(msgs)
	s.mu.Unlock()
	return s, nil
}

func (r *Remote) register(s *remoteSession) {
	r.mu.Lock()
	r.sessions[s.id] = s
	r.mu.Unlock()
}

func (r *Remote) unregister(s *remoteSession) {
	r.mu.Lock()
	if r.sessions[s.id] == s {
		delete(r.sessions, s.id)
	}
	r.mu.Unlock()
}

// Create makes a new session on the server in cwd.
func (r *Remote) Create(ctx context.Context, cwd string) (conversation, error) {
	s, err := r.open(ctx, map[string]any{"type": "create_session", "cwd": cwd}, cwd)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Load subscribes to a session the server hosts or knows, or loads it
// from the server's stored sessions.
func (r *Remote) Load(ctx context.Context, id, cwd string) (conversation, error) {
	// A cursor beyond any seq gets the messages in the answer, with the
	// events that follow them: get_messages would wait behind a run in
	// progress (it is ordered with the session's commands), and one
	// waiting for an approval waits for this very editor.
	s, err := r.open(ctx, map[string]any{"type": "switch_session", "sessionId": id, "afterSeq": beyondAnySeq}, cwd)
	if err == nil {
		return s, nil
	}
	stored, lerr := r.stored(ctx)
	if lerr != nil {
		return nil, err
	}
	for _, st := range stored {
		if st.SessionID == id && st.SessionPath != "" {
			return r.open(ctx, map[string]any{"type": "load_session", "sessionPath": st.SessionPath}, cwd)
		}
	}
	return nil, &Error{Code: CodeResourceNotFound, Message: "No session " + id + " on agentd serve: " + err.Error()}
}

type remoteStored struct {
	SessionID   string `json:"sessionId"`
	SessionName string `json:"sessionName"`
	SessionPath string `json:"sessionPath"`
	Cwd         string `json:"cwd"`
	CreatedAt   string `json:"createdAt"`
	ModifiedAt  string `json:"modifiedAt"`
}

func (r *Remote) stored(ctx context.Context) ([]remoteStored, error) {
	var res struct {
		Sessions []remoteStored `json:"sessions"`
	}
	err := r.call(ctx, map[string]any{"type": "list_stored_sessions"}, &res)
	return res.Sessions, err
}

// List is the server's sessions, hosted and stored, in cwd when it is
// not "".
func (r *Remote) List(ctx context.Context, cwd string) ([]sessionInfo, error) {
	var live struct {
		Sessions []remoteInfo `json:"sessions"`
	}
	if err := r.call(ctx, map[string]any{"type": "list_sessions"}, &live); err != nil {
		return nil, err
	}
	stored, err := r.stored(ctx)
	if err != nil {
		// A server without stored sessions still lists its live ones.
		r.log.Warn("list_stored_sessions", "err", err)
	}
	seen := map[string]bool{}
	out := []sessionInfo{}
	add := func(id, dir, name, updated string) {
		if seen[id] || (cwd != "" && dir != cwd) {
			return
		}
		seen[id] = true
		si := sessionInfo{SessionID: id, Cwd: dir}
		if name != "" {
			si.Title = &name
		}
		if updated != "" {
			si.UpdatedAt = &updated
		}
		out = append(out, si)
	}
	for _, s := range live.Sessions {
		add(s.SessionID, s.Cwd, s.SessionName, s.CreatedAt)
	}
	for _, s := range stored {
		up := s.ModifiedAt
		if up == "" {
			up = s.CreatedAt
		}
		add(s.SessionID, s.Cwd, s.SessionName, up)
	}
	return out, nil
}

// prompt starts a prompt and returns once the server started it, or with
// the error it refused it with. The response, at the run's end, is left
// to the session's state_changed event.
func (r *Remote) prompt(ctx context.Context, sid string, m *llm.Message) error {
	var text string
	images := []map[string]string{}
	for _, c := range m.Content {
		switch c.Type {
		case llm.ContentText:
			if text != "" {
				text += "\n"
			}
			text += c.Text
		case llm.ContentImage:
			images = append(images, map[string]string{"type": "image", "data": c.Data, "mimeType": c.MimeType})
		}
	}
	cmd := map[string]any{"type": "prompt", "sessionId": sid, "message": text}
	if len(images) > 0 {
		cmd["images"] = images
	}
	started := make(chan struct{})
	id, c, err := r.send(ctx, cmd, started)
	if err != nil {
		return err
	}
	select {
	case rep := <-c:
		// Answered without starting: a refusal.
		r.mu.Lock()
		delete(r.started, id)
		r.mu.Unlock()
		return r.decode(rep, "prompt", nil)
	case <-started:
		return nil
	case <-ctx.Done():
		r.conn.Forget(id, false)
		return ctx.Err()
	}
}

// sessionState makes a state_changed event.
func sessionState(state session.State, o session.Outcome) session.Event {
	return session.Event{Type: session.EventStateChanged, State: state, Outcome: o}
}
