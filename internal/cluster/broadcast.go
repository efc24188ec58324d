package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// broadcastSubject carries what every node tells every other node's
// clients: notices of the command lifecycle and of sessions created or
// deleted, which one server would send all of its clients.
const broadcastSubject = "agentd.broadcast"

// Broadcast sends payload to the ListenBroadcast handler of every node,
// this one's included. It is core NATS, at most once: for notices a
// client may miss (it can ask again), never for state.
func (n *Node) Broadcast(payload []byte) error {
	m := &nats.Msg{Subject: broadcastSubject, Data: payload}
	n.sig.sign(sigBroadcast, m)
	if err := n.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("cluster: broadcast: %w", err)
	}
	return nil
}

// ListenBroadcast calls h with each payload any node broadcasts (signed
// with the cluster key; anything else is dropped), on the
// connection's delivery goroutine (h must not block), until stop.
func (n *Node) ListenBroadcast(h func(payload []byte)) (stop func(), err error) {
	seen := newNonces()
	return n.listen(broadcastSubject, "listening to broadcasts", func(m *nats.Msg) {
		if err := n.sig.verify(sigBroadcast, m, seen); err != nil {
			n.refused.Add(1)
			n.log.Warn("cluster: dropped a broadcast", "from", m.Header.Get(hdrNode), "err", err)
			return
		}
		h(m.Data)
	})
}

// listen subscribes h to subject, flushed so that it is in place when
// listen returns; stop unsubscribes it, once.
func (n *Node) listen(subject, what string, h nats.MsgHandler) (stop func(), err error) {
	sub, err := n.nc.Subscribe(subject, h)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", what, err)
	}
	if err := n.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("cluster: %s: %w", what, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if sub.Unsubscribe() == nil {
				_ = n.nc.FlushTimeout(time.Second)
			}
		})
	}, nil
}
