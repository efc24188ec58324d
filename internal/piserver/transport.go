package piserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
)

// WebSocketOptions configure the WebSocket transport.
type WebSocketOptions struct {
	// Token, when set, must be presented as "Authorization: Bearer <token>"
	// or "?token=<token>".
	Token string
	// OriginPatterns are the browser origins allowed besides the server's
	// own host (websocket.AcceptOptions); clients that send no Origin, such
	// as programs, are always allowed.
	OriginPatterns []string
}

// WebSocketHandler serves the protocol on every path it is mounted on.
func (s *Server) WebSocketHandler(o WebSocketOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handshakes.Add(1)
		pending := true
		done := func() {
			if pending {
				pending = false
				s.handshakes.Add(-1)
			}
		}
		defer done()
		ws, err := server.AcceptWebSocket(w, r, server.WebSocketOptions{OriginPatterns: o.OriginPatterns, Buffers: s.srv.WriteBuffers()})
		if err != nil {
			s.srv.Logger().Debug("websocket handshake failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		defer ws.Drop()
		who, err := s.srv.Identify(s.srv.Context(), r, server.IdentifyOptions{Token: o.Token, Transport: "websocket"})
		if err != nil {
			s.srv.Logger().Info("websocket refused", "remote", r.RemoteAddr, "reason", err.Error())
			refuse(ws, closePolicy, err.Error())
			return
		}
		l := &wsLink{ws: ws}
		c := newConn(s, "websocket", l)
		c.remote = r.RemoteAddr
		c.who = who
		// The spec broadcasts lifecycle events globally; a client that only
		// wants its own opts out of the rest with ?lifecycle=own.
		c.ownLifecycle = r.URL.Query().Get("lifecycle") == "own"
		if err := c.start(); err != nil {
			code, reason := closeOverloaded, err.Error()
			var rf *refusal
			if errors.As(err, &rf) {
				code, reason = rf.code, rf.reason
			}
			refuse(ws, code, reason)
			return
		}
		done()
		s.srv.Logger().Debug("websocket connected", "remote", r.RemoteAddr)
		ctx, cancel := context.WithCancel(s.srv.Context())
		var hb sync.WaitGroup
		if s.opt.Heartbeat > 0 {
			hb.Add(1)
			go func() {
				defer hb.Done()
				s.heartbeat(ctx, ws, c)
			}()
		}
		// Shutting the server down unblocks the reader.
		stop := context.AfterFunc(ctx, func() { ws.Close(closeGoingAway, "Server shutting down") })
		s.readFrames(ws, c)
		stop()
		c.closed()
		cancel()
		hb.Wait()
		<-c.done()
	})
}

// refuse closes a connection turned away before it was attached, after
// the peer answers the close or a few seconds.
func refuse(ws *server.WebSocket, code int, reason string) {
	ws.Close(code, reason)
	var buf []byte
	for {
		if _, err := ws.Read(&buf, 0); err != nil {
			return
		}
		buf = buf[:0]
	}
}

func (s *Server) readFrames(ws *server.WebSocket, c *conn) {
	max := s.srv.Limits().MaxFrameBytes
	buf := make([]byte, 0, 4096)
	for {
		buf = buf[:0]
		n, err := ws.Read(&buf, max)
		if err != nil {
			return
		}
		if n > max {
			c.oversize(n)
			continue
		}
		c.handle(buf)
		if cap(buf) > 1<<20 {
			buf = make([]byte, 0, 4096) // do not keep a large frame's buffer
		}
	}
}

// heartbeat pings the client; one that has not answered a ping by the
// next one is disconnected.
func (s *Server) heartbeat(ctx context.Context, ws *server.WebSocket, c *conn) {
	t := time.NewTicker(s.opt.Heartbeat)
	defer t.Stop()
	var sent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !sent.IsZero() && !ws.PongSince(sent) {
			c.client.Close(server.Close{Kind: server.CloseGoingAway, Reason: "Heartbeat timeout"})
			return
		}
		sent = time.Now()
		if err := ws.Ping(); err != nil {
			return
		}
	}
}

type wsLink struct {
	ws *server.WebSocket
}

func (l *wsLink) write(_ context.Context, f []byte) error { return l.ws.WriteText([][]byte{f}) }

// writeBatch writes frames under one deadline and one flush.
func (l *wsLink) writeBatch(_ context.Context, frames [][]byte) error { return l.ws.WriteText(frames) }

func (l *wsLink) close(code int, reason string) {
	if code == 0 {
		code = closeNormal
	}
	l.ws.Close(code, reason)
}

// ServeStdio serves one client on in/out (newline-delimited JSON) until in
// ends, ctx ends or out fails. The caller then shuts the server down, which
// drains the commands in flight and writes their responses.
//
// With Options.StdioToken set (stdio exposed beyond the process that
// started agentd, through ssh or socat), the client must first send
// {"type":"authenticate","token":"..."}: until then it gets no broadcasts,
// and every command is refused with the reason.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	l := &stdioLink{w: out}
	c := newConn(s, "stdio", l)
	// An authenticator that refuses stdio refuses it for good: every
	// command gets the reason, as pi-server does.
	denied := ""
	if res := s.srv.Authenticate(ctx, server.AuthRequest{Transport: "stdio"}); !res.Allowed {
		denied = res.Reason
	}
	authed := s.opt.StdioToken == "" && denied == ""
	if authed {
		if err := c.start(); err != nil {
			return err
		}
	}
	// A line, or the size of one too long to read (data nil).
	type input struct {
		data    []byte
		skipped int
	}
	lines := make(chan input)
	readDone := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		lr := piwire.NewLineReader(in, s.srv.Limits().MaxFrameBytes)
		for {
			line, err := lr.Next()
			if errors.Is(err, piwire.ErrLineTooLong) {
				select {
				case lines <- input{skipped: lr.Skipped}: // the loop answers: it knows whether c started
				case <-rctx.Done():
					readDone <- rctx.Err()
					return
				}
				continue
			}
			if err != nil {
				readDone <- err
				return
			}
			select {
			case lines <- input{data: append([]byte(nil), line...)}:
			case <-rctx.Done():
				readDone <- rctx.Err()
				return
			}
		}
	}()
	var err error
	var done <-chan struct{}
	if authed {
		done = c.done()
	}
loop:
	for {
		select {
		case in := <-lines:
			line := in.data
			switch {
			case line == nil:
				n := in.skipped
				if authed {
					c.oversize(n)
				} else {
					s.srv.Reject(server.RejectMessageSize)
					_ = l.write(ctx, failureFrame("", "unknown", fmt.Sprintf("Message size %d exceeds limit %d", n, s.srv.Limits().MaxFrameBytes)))
				}
			case len(strings.TrimSpace(string(line))) == 0:
			case authed:
				c.handle(line)
			case denied != "":
				_ = l.write(ctx, refusalOf(line, denied))
			default:
				ok, reply := s.stdioAuthenticate(line)
				_ = l.write(ctx, reply)
				if ok {
					if err := c.start(); err != nil {
						return err
					}
					authed, done = true, c.done()
				}
			}
		case err = <-readDone:
			break loop
		case <-ctx.Done():
			break loop
		case <-done:
			break loop
		}
	}
	// The connection stays registered: commands still in flight answer on
	// it, and Shutdown closes it after the drain. The reader goroutine
	// blocks in Read until the input ends; the caller owns the input.
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	return nil
}

// stdioAuthenticate answers a line from a stdio client that has not
// authenticated: an authenticate command with the right token lets it in;
// anything else is refused with the reason, echoing its id and type.
func (s *Server) stdioAuthenticate(line []byte) (ok bool, reply []byte) {
	var f struct {
		Type  string `json:"type"`
		Token string `json:"token"`
	}
	_ = json.Unmarshal(line, &f)
	reason := "Missing authorization token: send {\"type\":\"authenticate\",\"token\":\"...\"} first"
	if f.Type == "authenticate" && f.Token != "" {
		if subtle.ConstantTimeCompare([]byte(f.Token), []byte(s.opt.StdioToken)) == 1 {
			return true, piwire.Marshal(wireResponse{ID: idOf(line), Type: "response", Command: "authenticate", Success: true})
		}
		reason = "Invalid token"
	}
	s.srv.Logger().Info("stdio command refused", "reason", reason)
	return false, refusalOf(line, reason)
}

// refusalOf answers a command refused before admission with reason,
// echoing its id and type when it has them.
func refusalOf(line []byte, reason string) []byte {
	var f struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(line, &f)
	command := f.Type
	if command == "" {
		command = "unknown"
	}
	return failureFrame(idOf(line), command, reason)
}

// idOf is the command's id, "" when it has none (or no JSON).
func idOf(line []byte) string {
	var f struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(line, &f)
	return f.ID
}

type stdioLink struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *stdioLink) write(_ context.Context, f []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := make([]byte, 0, len(f)+1)
	b = append(append(b, f...), '\n')
	_, err := l.w.Write(b)
	return err
}

// writeBatch writes frames in one write: one syscall for everything that
// was waiting.
func (l *stdioLink) writeBatch(_ context.Context, frames [][]byte) error {
	n := 0
	for _, f := range frames {
		n += len(f) + 1
	}
	b := make([]byte, 0, n)
	for _, f := range frames {
		b = append(append(b, f...), '\n')
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(b)
	return err
}

func (l *stdioLink) close(int, string) {}
