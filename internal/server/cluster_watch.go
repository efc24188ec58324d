package server

import (
	"context"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// A face's event stream for a session another node runs.
//
// A client of a node that does not run its session was passed on to the
// owner (ClusterProxy), and lost its stream when the owner died. A face
// that serves its stream here instead (as pi-server's subscriptions are)
// keeps the client across the owner's death or handover: the stream is
// fed from the cluster's event stream on this node, and the node that
// takes the session over (this one, when its clients follow it) goes on
// where the last owner stopped.
//
// What the stream needs beyond the events (the session's visibility to
// the client's principal, the face's opening snapshot, the seq it stands
// at) only the owner knows: the face asks it with one read command of its
// own, submitted with a WatchOrigin through the pipeline, which routes it
// to the owner (or runs it here when this node hosts the session, or
// takes it over meanwhile). The command's handler looks the session up
// for the principal, as for any command, and subscribes the client with
// SubscribeOrigin; its answer carries the snapshot and the seq it was
// read at, from which the client's node subscribes it to the stream
// (cluster_send.go): every event after that seq, once.

// RunsElsewhere reports whether session id's lease is held by another
// node of the cluster (live, or dead and not taken over yet): a face
// serves its event stream for it with a WatchOrigin command rather than
// looking the session up here, which would find it held. False without a
// cluster, for a session hosted here, or one nobody holds (opened here
// when looked up). An error reading the lease says false: the lookup
// that follows reports it.
func (s *Server) RunsElsewhere(ctx context.Context, id string) bool {
	cs := s.cl
	if cs == nil || id == "" || cs.hostsOrMakes(id) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	owner, _, held, err := cs.node.LeaseOwner(ctx, id)
	return err == nil && held && owner != cs.node.ID()
}

// WatchOrigin is the Origin of a face's command that opens an event
// stream: the principal the command runs for, and the client to
// subscribe, with the face's codec and the hold that keeps the events
// back until the face has sent its snapshot. Run on another node, the
// command's answer subscribes Client on this node from the stream.
type WatchOrigin struct {
	Who    Principal
	Client *Client
	Codec  Codec
	Hold   *Hold
}

// Principal is who the stream is opened for.
func (o *WatchOrigin) Principal() Principal { return o.Who }

// SubscribeTarget implements SubscribeTarget.
func (o *WatchOrigin) SubscribeTarget() (*Client, Codec, *Hold) { return o.Client, o.Codec, o.Hold }

// SubscribeOrigin subscribes the client behind a command's origin to h
// from after (from now when nil), as Subscribe does: a client of this
// node (a WatchOrigin, or any SubscribeTarget) directly, one of another
// node (Remote) through the stream on its own node once the answer is
// back there. It is what a face's stream-opening command does wherever it
// runs; an origin with no client to subscribe is an internal error.
func (s *Server) SubscribeOrigin(origin any, h *Hosted, after *uint64) (Subscribed, error) {
	switch o := origin.(type) {
	case *Remote:
		return o.Subscribe(h, after), nil
	case SubscribeTarget:
		c, codec, hold := o.SubscribeTarget()
		if c != nil && codec != nil {
			return s.Subscribe(c, h, codec, after, hold), nil
		}
	}
	return Subscribed{}, fault.New(fault.Internal, "The command has no client to subscribe")
}

// SubmitWatch submits a face's stream-opening command (its Origin a
// *WatchOrigin) and waits for its answer, or for ctx (the client went
// away: the answer, when it comes, subscribes a client that is closing,
// which the face closes anyway).
func (s *Server) SubmitWatch(ctx context.Context, cmd pipeline.Command) (pipeline.Response, error) {
	ch := make(chan pipeline.Response, 1)
	s.Submit(cmd, func(r pipeline.Response) { ch <- r })
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return pipeline.Response{}, fault.New(fault.Failed, "The client went away")
	}
}
