package server

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
)

// ownerSeen is a session's owner as a lease read found it.
type ownerSeen struct {
	node string
	at   time.Time
}

// destination is the node that runs session id: its lease's live holder,
// else its home among the live nodes; for a session the cluster does not
// know (a create), this node unless SpreadSessions. orphan says the
// session exists and nobody runs it: the destination takes it over. An
// owner read less than a third of a lease TTL ago is used again: a node
// that no longer runs the session passes the command on, and one that is
// gone is forgotten.
//
// A command another node passed on (passedOn) for a session no lease
// holds runs here: that node chose this one, and placing it again by this
// node's member list, which may differ from the sender's just after the
// cluster starts or a node joins or leaves, could send it back and forth
// until its hops ran out.
func (cs *clusterState) destination(id string, passedOn bool) (dest string, orphan bool, err error) {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	// A command passed on means the session may be moving: its owner
	// is read, not taken from what this node saw a moment ago, or the
	// command goes back to where it came from.
	owner, held, err := cs.leaseHolder(ctx, id, passedOn)
	if err != nil {
		return "", false, err
	}
	if held {
		return owner, false, nil
	}
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return "", false, err
	}
	exists := found && !rec.Deleted
	if passedOn && !cs.isDraining() {
		return cs.node.ID(), exists, nil
	}
	if !exists && !cs.s.cfg.SpreadSessions {
		// New: it lives where it is created, so a client that stays on
		// one node never waits on another.
		return cs.node.ID(), false, nil
	}
	members, err := cs.liveMembers(ctx)
	if err != nil {
		return "", false, err
	}
	return PlaceSession(id, members), exists, nil
}

// ownersMax bounds the owners cache: a cache, not a record, emptied
// when it is full.
const ownersMax = 10000

// leaseHolder is the live holder of session id's lease (held false for
// none), for a session this node does not run. A holder read less than a
// third of a lease TTL ago is used again, unless fresh: a node that no
// longer runs the session passes what it gets on, and one that is gone is
// forgotten (forgetMembers). A cached holder that is this node is read
// again: this node let the session go since.
func (cs *clusterState) leaseHolder(ctx context.Context, id string, fresh bool) (node string, held bool, err error) {
	if !fresh {
		cs.mu.Lock()
		seen, ok := cs.owners[id]
		cs.mu.Unlock()
		if ok && seen.node != cs.node.ID() && time.Since(seen.at) < cs.node.LeaseTTL()/3 {
			return seen.node, true, nil
		}
	}
	owner, live, held, err := cs.node.LeaseOwner(ctx, id)
	if err != nil || !held || !live {
		return "", false, err
	}
	cs.rememberOwner(id, owner)
	return owner, true, nil
}

// rememberOwner caches the owner of session id.
func (cs *clusterState) rememberOwner(id, owner string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.owners) >= ownersMax {
		clear(cs.owners)
	}
	cs.owners[id] = ownerSeen{node: owner, at: time.Now()}
}

// PlaceSession picks the home of a session among the live nodes by
// rendezvous hashing: every node computes the same answer from the same
// list, sessions spread evenly, and when a node leaves only its own
// sessions move. It is exported for tests and operators who want to know
// where a new session with a given id will live.
func PlaceSession(id string, nodes []string) string {
	var best string
	var bestScore uint64
	for _, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(id))
		if sc := mix64(h.Sum64()); best == "" || sc > bestScore {
			best, bestScore = n, sc
		}
	}
	return best
}

// mix64 spreads FNV's bits (splitmix64's finalizer): FNV-1a alone barely
// changes its high bits for ids that differ only at the end, which put
// bench-000000 to bench-000029 all on one of three nodes.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// liveMembers is the list of live nodes, read at most every lease TTL/3.
func (cs *clusterState) liveMembers(ctx context.Context) ([]string, error) {
	cs.mu.Lock()
	if time.Since(cs.nodesAt) < cs.node.LeaseTTL()/3 && len(cs.members) > 0 {
		m := cs.members
		cs.mu.Unlock()
		return m, nil
	}
	cs.mu.Unlock()
	all, err := cs.node.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return cs.rememberNodes(all), nil
}

// rememberNodes keeps a node list just read: its members for
// liveMembers, which it returns, and its addresses for nodeAddr.
func (cs *clusterState) rememberNodes(all map[string]cluster.NodeInfo) []string {
	m := cluster.MembersOf(all)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining {
		// This node left; it must not place anything on itself.
		out := m[:0:0]
		for _, n := range m {
			if n != cs.node.ID() {
				out = append(out, n)
			}
		}
		m = out
	}
	cs.nodes, cs.members, cs.nodesAt = all, m, time.Now()
	return m
}

func (cs *clusterState) forgetMembers() {
	cs.mu.Lock()
	cs.nodesAt = time.Time{}
	clear(cs.owners)
	cs.mu.Unlock()
}
