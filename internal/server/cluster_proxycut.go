package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// What a client of a node that passes its requests on (ClusterProxy)
// meets when the session's owner dies.
//
//   - An event stream (SSE) passed on ends cleanly, after the last whole
//     event, with a comment saying why: the client (an EventSource,
//     anything that resumes with Last-Event-ID) reconnects, where before
//     its stream broke off mid-chunk.
//   - A bodiless request (a GET: the event stream's reconnection, a
//     per-session WebSocket's upgrade) for a session whose owner does
//     not answer waits for the session's next owner, within two lease
//     TTLs, and is passed on to it or served here (this node takes the
//     session over once its owner's lease has run out, as a node whose
//     clients follow it does) instead of failing with 502, which an
//     EventSource takes as the end.

// sseCut passes an event stream on by whole events (each ends with a
// blank line), and ends it with a reason when the stream breaks.
type sseCut struct {
	body  io.ReadCloser
	id    string
	buf   []byte // read, not yet a whole event
	out   []byte // whole events (or the final reason) to give out
	ended bool
}

func (c *sseCut) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.ended {
			return 0, io.EOF
		}
		chunk := make([]byte, 32<<10)
		n, err := c.body.Read(chunk)
		c.buf = append(c.buf, chunk[:n]...)
		if i := lastEventEnd(c.buf); i > 0 {
			c.out = append(c.out, c.buf[:i]...)
			c.buf = append(c.buf[:0], c.buf[i:]...)
		}
		if err == io.EOF {
			c.out = append(c.out, c.buf...) // the owner ended it: as it is
			c.buf, c.ended = nil, true
		} else if err != nil {
			// The owner went away mid-stream: what is left is not a
			// whole event, and is dropped; the client resumes from the
			// last one it got.
			c.out = append(c.out, []byte(": the node running session "+c.id+" stopped; reconnect and resume with Last-Event-ID\n\n")...)
			c.buf, c.ended = nil, true
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

func (c *sseCut) Close() error { return c.body.Close() }

// lastEventEnd is the length of b's whole events: up to the end of its
// last blank line, 0 when it has none.
func lastEventEnd(b []byte) int {
	i := max(bytes.LastIndex(b, []byte("\n\n")), bytes.LastIndex(b, []byte("\r\n\r\n")))
	switch {
	case i < 0:
		return 0
	case bytes.HasPrefix(b[i:], []byte("\r\n\r\n")):
		return i + 4
	default:
		return i + 2
	}
}

// cutStreams makes an event stream or a WebSocket passed on end cleanly
// (sseCut, wsCut).
func cutStreams(res *http.Response) error {
	t, _ := res.Request.Context().Value(proxyTargetKey{}).(*proxyTarget)
	id := ""
	if t != nil {
		id = t.id
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		return cutWebSocket(res, id)
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		res.Body = &sseCut{body: res.Body, id: id}
	}
	return nil
}

// errOwnerGone is what a request passed on to a node that did not
// answer records (proxyTarget.failed) instead of answering 502, so that
// ClusterProxy may wait for the session's next owner.
var errOwnerGone = errors.New("the node running the session did not answer")

// awaitOwner waits, for a bodiless request whose session's owner did not
// answer, until the session has a live owner other than this node (its
// client address) or none (""; served here, which takes it over), or
// ctx ends or two lease TTLs pass (ok false).
func (cs *clusterState) awaitOwner(ctx context.Context, id, dead string) (addr string, ok bool) {
	ttl := cs.node.LeaseTTL()
	limit := time.NewTimer(2 * ttl)
	defer limit.Stop()
	for {
		cs.forgetMembers()
		rctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
		owner, live, held, err := cs.node.LeaseOwner(rctx, id)
		if err == nil {
			switch {
			case !held || owner == cs.node.ID():
				cancel()
				return "", true
			case live:
				if a := cs.nodeAddr(rctx, owner); a != "" && a != dead {
					cancel()
					return a, true
				}
			default:
				// Its owner is gone: this node, whose client waits for
				// the session, takes it over (as a node whose clients
				// follow it would); another node may be first.
				if _, err := cs.s.Session(rctx, id); err == nil {
					cancel()
					return "", true
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return "", false
		case <-limit.C:
			return "", false
		case <-time.After(ttl / 8):
		}
	}
}
