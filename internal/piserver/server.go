// Package piserver is the pi-server protocol 1.0.0 as an agentd face: many
// sessions, many clients, over WebSocket and stdio. It is a translation
// table over the shared session layer (package server): frames become
// pipeline commands, handlers call the layer and the engine, results and
// session events become pi-server's frames.
package piserver

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
)

// ProtocolVersion is the pi-server protocol version this face speaks.
const ProtocolVersion = "1.0.0"

// face is this face's name among the server's clients.
const face = "pi-server"

// Models is what the face needs of the model registry.
type Models interface {
	// Available lists the models that can be used now, in a stable order.
	Available() []*llm.Model
}

// Options configure the face.
type Options struct {
	Models Models
	// Delta makes message_update events carry only the delta.
	Delta   bool
	Version string
	// Heartbeat is the WebSocket ping interval; a client that does not
	// answer within the next interval is disconnected. 0 takes 30 s, a
	// negative value disables it.
	Heartbeat time.Duration
	// StdioToken, when set, must be presented by a stdio client before it
	// may send commands (see ServeStdio).
	StdioToken string
}

// Server is the pi-server face of a server.Server.
type Server struct {
	srv          *server.Server
	opt          Options
	commandSpecs map[string]*commandSpec
	codec        *codec
	// handshakes counts WebSocket connections accepted but not yet
	// attached (upgrading, authenticating).
	handshakes atomic.Int64
}

// New adds the pi-server face to srv: its commands, its lifecycle
// broadcasts and its shutdown notice. Call it before srv.Start.
func New(srv *server.Server, opt Options) (*Server, error) {
	if opt.Models == nil {
		return nil, errors.New("piserver: Models is required")
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.Heartbeat == 0 {
		opt.Heartbeat = 30 * time.Second
	}
	s := &Server{srv: srv, opt: opt}
	s.codec = &codec{delta: opt.Delta}
	if err := srv.Register(s.registry()); err != nil {
		return nil, err
	}
	srv.OnLifecycle(s.onLifecycle)
	srv.OnShutdown(func(drain time.Duration) {
		// This server's clients only: in a cluster the other nodes go on
		// (Broadcast would tell their clients too).
		f := shutdownFrame(drain)
		srv.EachClient(face, func(c *server.Client) { c.Send(f) })
	})
	return s, nil
}

// onLifecycle broadcasts the pipeline's lifecycle events (spec §6.2) to
// this face's connections. A connection that asked for its own lifecycle
// events only does not get the others': with N clients each sending
// commands, global broadcast costs N frames per event.
func (s *Server) onLifecycle(ev pipeline.Event) {
	if s.commandSpecs[ev.Command] == nil {
		return // another face's command: its clients have their own answer
	}
	f := lifecycleFrame(ev)
	o, _ := ev.Origin.(*origin)
	s.srv.EachClient(face, func(c *server.Client) {
		pc, _ := c.Value.(*conn)
		switch {
		case o != nil && o.c == pc:
			c.Send(f)
		case pc == nil || !(pc.ownLifecycle || pc.who.Scoped):
			// Another client's command: it may wait a little for company
			// in the queue (one write for many), never be dropped.
			c.SendFrame(server.Frame{Data: f, Linger: server.BroadcastLinger})
		}
	})
}
