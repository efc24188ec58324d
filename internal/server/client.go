package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// CloseKind says why the server closes a client; each transport maps it
// to its wire (a WebSocket close code, the end of an event stream).
type CloseKind int

// Close kinds.
const (
	// CloseNormal: the client went away or the exchange is over.
	CloseNormal CloseKind = iota
	// CloseGoingAway: the server is shutting down, or the transport lost
	// the client (a missed heartbeat).
	CloseGoingAway
	// CloseOverloaded: the client fell too far behind, or a write failed;
	// it may reconnect and resume from the last seq it saw.
	CloseOverloaded
)

// Close is why a client is closed, with a reason a person can read.
type Close struct {
	Kind   CloseKind
	Reason string
	// Code, when set, is the face's own close code (a WebSocket close
	// code such as 4429), in place of the one Kind maps to.
	Code int
}

// Link is what a transport provides to a client: writing frames, and
// closing with a reason. Write is called from the client's writer
// goroutine only, with every frame that was waiting (up to a batch): a
// transport that can, sends them in one go under one deadline. Write
// must not keep the frames slice after it returns (the writer lends it
// to the next batch, see scratchPool). Close may be called from any
// goroutine, more than once.
type Link interface {
	Write(ctx context.Context, frames [][]byte) error
	Close(c Close)
}

// Frame is an event for a client, encoded or to be encoded, with what its
// queue needs to coalesce it. A frame with a Key that finds the frame
// queued just before it (not yet being written) with the same Key takes
// that frame's place, once the client is behind (see mergeAfter): without
// Merge the new frame supersedes the old one (it says everything the old
// one said); with Merge the two frames' Text is joined (the joined frame's
// Text is every Text it replaces, in order) and the frame is encoded from
// it, with the newest frame's Seq and State, by Merge when the writer
// takes it. Frames without a Key are never merged, dropped or reordered.
//
// A frame with Merge may come without Data: it is encoded only when a
// writer takes it, after any joining, so a client that falls behind costs
// the encoding of what it is sent, not of every event. Size estimates its
// bytes meanwhile.
type Frame struct {
	Data []byte
	// Key names what the frame continues, such as the deltas of one
	// content block of one message of one session.
	Key FrameKey
	// Seq is the event's seq, for Merge.
	Seq uint64
	// Text is the part that accumulates (a delta), with Merge.
	Text string
	// Merge encodes the frame of the event seq with text in place of its
	// Text. It runs later, on a client's writer goroutine (several, when
	// several clients share the frame), so it reads nothing but its
	// arguments: key says which block, state is the frame's State. A
	// function, not a closure over the event, so that a delta costs no
	// allocation for it.
	Merge func(key FrameKey, seq uint64, text string, state any) []byte
	// State is what Merge needs besides the text, such as the partial
	// message as it was at the event: a value that stays valid and
	// unchanged once the frame is made, read concurrently.
	State any
	// Size is about how many bytes Merge makes of a frame without Data,
	// counted against the client's limits until it is encoded.
	Size int
	// Replace makes the frame take the place of any frame with its Key
	// still waiting anywhere in the queue, however far behind the client
	// is: the waiting one is dropped and this one goes at the end. For a
	// reading that makes older ones worthless (a progress report).
	Replace bool
	// More are further messages for the same event, queued right after
	// Data and never merged.
	More [][]byte
	// Linger lets the frame wait up to that long for company before the
	// writer sends it, so that many frames go out in one write: for
	// frames that come in quick succession and need not go alone, such
	// as a stream's deltas (StreamLinger) or the lifecycle events of other
	// clients' commands (BroadcastLinger). It keeps its place in the queue
	// and is never dropped; the next frame without Linger takes it along
	// at once. 0 sends at once.
	Linger time.Duration
}

// size is what the frame counts against a client's limits while queued.
func (f *Frame) size() int {
	if f.Data != nil {
		return len(f.Data)
	}
	return f.Size
}

// Encoded returns the frame with its Data, encoding a frame that has none
// yet; what the frame needs for merging is dropped, so it goes as it is:
// for a frame that must never merge, such as a replayed one.
func (f Frame) Encoded() Frame {
	if f.Data == nil && f.Merge != nil {
		f.Data = f.Merge(f.Key, f.Seq, f.Text, f.State)
	}
	f.Key, f.Merge, f.State, f.Text, f.Size = FrameKey{}, nil, nil, "", 0
	return f
}

// FrameKey names what a frame continues (Frame.Key); the zero key is
// none. A struct rather than one string, so that naming a delta's block
// costs nothing.
type FrameKey struct {
	Scope string // whose: a session's id
	Name  string // what in it: a kind of delta, a tool call
	Index int    // which of them: a content block's index
}

// How long a frame may wait for company (Frame.Linger). Each is a trade of
// latency for CPU: a frame sent alone costs a write(2) on the server and a
// read(2) and a wake-up on the client, about what the frame's own work
// costs; frames gathered for a few milliseconds share them.
const (
	// StreamLinger is for a stream's deltas. A model writes a token
	// every 10–50 ms to a person, so 5 ms adds at most a fraction of a
	// token's interval to what a reader sees (and nothing to when the
	// message ends: its end goes at once and takes the deltas along),
	// while a fast model, or many streams on a busy server, sends
	// several deltas in that time. BenchmarkStreamLinger, a delta per
	// millisecond: 1 write per frame at once, 0.36 at 2 ms, 0.18 at
	// 5 ms, 0.11 at 10 ms; agentd bench with 1,000 delta streams could
	// not tell 2, 5 and 10 ms apart (its writers are behind anyway).
	StreamLinger = 5 * time.Millisecond
	// BroadcastLinger is for what concerns the client little and comes
	// to every client at once, such as the lifecycle events of other
	// clients' commands: under a global lifecycle broadcast every client
	// gets three frames per command of every client.
	BroadcastLinger = 25 * time.Millisecond
)

// Client is one connection of any face: its outbound queue, drained by
// one writer goroutine so that no session or command ever waits on a slow
// client; its subscriptions; and its commands in flight. Producers
// (session fan-out, lifecycle broadcasts, responses) only append.
//
// A client that reads slower than events come gets the latest state, not
// every intermediate frame: once it is mergeAfter behind, consecutive
// deltas of one content block merge in its queue (see Frame). A client
// that keeps up sees every frame.
type Client struct {
	srv  *Server
	face string
	link Link
	// Value is the face's own state for the connection.
	Value any

	// mu (and cond) guard the queue and the fields below. Lock order:
	// a leaf, taken under Hosted.subMu when frames are queued; the
	// shared budget under it is atomic.
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []queued
	box      *[]queued    // where queue's array goes back to the server's spares
	queued   atomic.Int64 // bytes in queue, read by the budget without mu
	closing  bool
	cl       Close
	watching map[string]struct{}
	detached bool // detach took watching: watch adds no more
	maxQueue int64
	pending  int
	dropped  bool // cut off: the queue was discarded and uncounted
	merged   atomic.Int64
	// urgent: the queue holds a frame without Linger, so the writer
	// sends at once; otherwise it lingers until flushAt, the earliest
	// time a waiting frame's Linger allows, which shortest set.
	urgent    bool
	flushAt   time.Time
	shortest  time.Duration
	lingerMax int64         // queued bytes that go at once, lingering or not
	lingering bool          // the writer waits on kick, not on cond
	kick      chan struct{} // ends a lingering writer's wait

	done chan struct{} // closed when the writer has stopped
}

// mergeAfter is how far behind a client must be before its deltas merge:
// below it every frame goes out as it came (a client that keeps up sees
// every frame, even of a burst); above it the queue holds the latest
// state rather than history.
const mergeAfter = 64 << 10

// spareQueue is the size of a new queue array: what a client that keeps
// up has waiting at a time.
const spareQueue = 16

// maxSpareQueue bounds the arrays kept as spares: one grown by a client
// that fell far behind is let go.
const maxSpareQueue = 1024

// lingerBytes is how much lingering frames may gather before they go at
// once: half the WebSocket write buffer, one write(2) however many frames.
const lingerBytes = 32 << 10

// queued is a frame waiting to be written. A merged frame, and one that
// came without data, has no data until the writer takes it: text gathers
// the deltas, encode makes the frame of them with the newest state, size
// estimates its bytes meanwhile.
type queued struct {
	data   []byte
	key    FrameKey
	seq    uint64 // of the newest frame merged in
	first  string // the text of an unmerged frame
	text   []byte // the joined text, once merged
	joined bool   // text holds the joined text
	encode func(FrameKey, uint64, string, any) []byte
	state  any
	size   int
}

// encoded is q's frame, encoding it if it has no data yet.
func (q *queued) encoded() []byte {
	if q.data != nil {
		return q.data
	}
	text := q.first
	if q.joined {
		text = string(q.text)
	}
	return q.encode(q.key, q.seq, text, q.state)
}

// ClientOptions describe a connection being attached.
type ClientOptions struct {
	// Face names the protocol face; Broadcast reaches the clients of one
	// face.
	Face string
	// Transport names the transport, for metrics ("websocket", "stdio").
	Transport string
	// First are queued before anything else can be (server_ready, and
	// what a face sends right after it).
	First [][]byte
	Value any
	// MaxQueuedBytes bounds what may wait for this client, when lower
	// than the server's limit: a face whose messages are few and small
	// cuts off a client that stopped reading sooner.
	MaxQueuedBytes int
}

// Attach registers a connection and starts its writer. An error means the
// connection is refused (the connection limit, shutdown): it is a
// *fault.Error saying which.
func (s *Server) Attach(link Link, o ClientOptions) (*Client, error) {
	c := &Client{srv: s, face: o.Face, link: link, Value: o.Value, watching: map[string]struct{}{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	c.maxQueue = int64(s.lim.MaxQueuedBytes)
	if o.MaxQueuedBytes > 0 && int64(o.MaxQueuedBytes) < c.maxQueue {
		c.maxQueue = int64(o.MaxQueuedBytes)
	}
	// A write of this much costs little more than one of a single frame:
	// there is no reason to wait for more company, and the bytes count
	// against the client's limit meanwhile.
	c.lingerMax = min(lingerBytes, c.maxQueue/2)
	c.cond = sync.NewCond(&c.mu)
	for _, f := range o.First {
		c.Send(f)
	}
	if err := s.addClient(c, o.Transport); err != nil {
		close(c.done)
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.writeLoop(o.Transport)
	}()
	return c, nil
}

// Face is the face the client belongs to.
func (c *Client) Face() string { return c.face }

// Done is closed once the client's writer has stopped and the client is
// detached.
func (c *Client) Done() <-chan struct{} { return c.done }

// Merged counts frames that merged into the one queued before them.
func (c *Client) Merged() int64 { return c.merged.Load() }

// Send queues a frame that is never merged.
func (c *Client) Send(f []byte) { c.SendFrame(Frame{Data: f}) }

// SendFrame queues a frame, merging it with the one queued before it
// when both have the same Key. A client that lets more than its share
// pile up is disconnected rather than letting the server's memory grow
// without bound; it may reconnect and resume from the last seq it saw.
func (c *Client) SendFrame(f Frame) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	if f.Data == nil && f.Merge == nil {
		c.mu.Unlock()
		return
	}
	delta := int64(f.size())
	if f.Replace && f.Key != (FrameKey{}) {
		for i := len(c.queue) - 1; i >= 0; i-- {
			if c.queue[i].key == f.Key {
				delta -= int64(c.queue[i].size)
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				c.queue[:len(c.queue)+1][len(c.queue)] = queued{} // the vacated slot pins nothing
				c.merged.Add(1)
				break
			}
		}
	}
	n := len(c.queue)
	if f.Key != (FrameKey{}) && n > 0 && c.queue[n-1].key == f.Key && c.queued.Load() >= mergeAfter {
		tail := &c.queue[n-1]
		old := tail.size
		if f.Merge == nil || tail.encode == nil {
			// Supersedes: the new frame as it came (it may be one to
			// encode when written).
			*tail = queued{data: f.Data, key: f.Key, seq: f.Seq, first: f.Text, encode: f.Merge, state: f.State, size: f.size()}
		} else {
			if !tail.joined { // the first merge: keep its text, drop its bytes
				tail.data = nil
				tail.text = append(make([]byte, 0, 4*len(tail.first)+len(f.Text)), tail.first...)
				tail.first, tail.joined = "", true
			}
			tail.text = append(tail.text, f.Text...)
			tail.encode, tail.seq, tail.state = f.Merge, f.Seq, f.State
			tail.size = f.size() - len(f.Text) + len(tail.text)
		}
		delta = int64(tail.size - old)
		c.merged.Add(1)
	} else {
		limit := c.maxQueue
		if q := c.queued.Load(); q+delta > limit && q > 0 {
			c.cutLocked(fmt.Sprintf("Client too slow: more than %d bytes waiting to be sent", limit))
			c.mu.Unlock()
			return
		}
		if c.box == nil {
			c.box = c.srv.budget.spare()
			c.queue = (*c.box)[:0]
		}
		c.queue = append(c.queue, queued{data: f.Data, key: f.Key, seq: f.Seq, first: f.Text, encode: f.Merge, state: f.State, size: int(delta)})
	}
	c.queued.Add(delta)
	switch {
	case c.urgent:
	case f.Linger <= 0 || c.queued.Load() >= c.lingerMax:
		c.urgent = true
		c.wakeLocked()
	case c.flushAt.IsZero():
		// The first frame to wait: the writer sleeps on cond.
		c.flushAt, c.shortest = time.Now().Add(f.Linger), f.Linger
		c.cond.Signal()
	case f.Linger < c.shortest:
		// A frame that may wait less than those before it: the writer
		// may have to send sooner than it planned. (A frame that may
		// wait as long or longer cannot: it came later.)
		if at := time.Now().Add(f.Linger); at.Before(c.flushAt) {
			c.flushAt = at
			c.wakeLocked()
		}
		c.shortest = f.Linger
	}
	c.mu.Unlock()
	c.srv.budget.charge(c.srv, delta)
	for _, m := range f.More {
		c.Send(m)
	}
}

// cutLocked drops what is queued and closes the client as overloaded;
// c.mu is held. It reports false when the client was closing already.
func (c *Client) cutLocked(reason string) bool {
	if c.closing {
		return false
	}
	c.closing, c.dropped, c.cl = true, true, Close{Kind: CloseOverloaded, Reason: reason}
	// Logged now: the writer may sit in a blocked write until its
	// deadline, and an operator wants to know which clients fell behind.
	c.srv.log.Warn("connection cut off", "face", c.face, "reason", reason)
	c.srv.budget.release(c.queued.Swap(0))
	c.releaseQueueLocked()
	c.wakeLocked()
	return true
}

// wakeLocked wakes the writer to send what is queued now, or to close;
// c.mu is held.
func (c *Client) wakeLocked() {
	c.cond.Signal()
	if c.lingering {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// releaseQueueLocked empties the queue and gives its array back to the
// spares; c.mu is held.
func (c *Client) releaseQueueLocked() {
	if c.box != nil {
		clear(c.queue)
		*c.box = c.queue[:0]
		c.srv.budget.keep(c.box)
	}
	c.queue, c.box = nil, nil
}

// cut is cutLocked for a caller without the lock.
func (c *Client) cut(reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutLocked(reason)
}

// Close closes the client once what is queued has been written.
func (c *Client) Close(cl Close) {
	c.mu.Lock()
	if !c.closing {
		c.closing, c.cl = true, cl
	}
	c.wakeLocked()
	c.mu.Unlock()
}

// Closing reports whether the client is being closed.
func (c *Client) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Acquire counts one more command in flight, or reports false when the
// client has its limit in flight already.
func (c *Client) Acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending >= c.srv.lim.MaxPending {
		return false
	}
	c.pending++
	return true
}

// Release ends a command Acquire counted.
func (c *Client) Release() {
	c.mu.Lock()
	c.pending--
	c.mu.Unlock()
}

// wait waits up to d for the writer to stop, then closes the link.
func (c *Client) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.link.Close(Close{Kind: CloseGoingAway, Reason: "Server shutting down"})
	}
}

// A batch is what the writer hands the link at once: everything waiting,
// up to these bounds, so a client stuck in a write holds little that a
// cut could otherwise free.
const (
	maxBatchFrames = 256
	maxBatchBytes  = 256 << 10
)

func (c *Client) writeLoop(transport string) {
	defer close(c.done)
	defer c.detach(transport)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.cond.Wait()
		}
		// Only lingering frames wait: give them company until the
		// first of them has waited its Linger. A frame that must go
		// sooner kicks the writer, which looks again.
		for !c.urgent && !c.closing && len(c.queue) > 0 {
			wait := time.Until(c.flushAt)
			if wait <= 0 {
				break
			}
			c.lingering = true
			c.mu.Unlock()
			linger.Reset(wait)
			select {
			case <-linger.C:
			case <-c.kick:
				linger.Stop()
			}
			c.mu.Lock()
			c.lingering = false
		}
		if len(c.queue) == 0 || c.dropped {
			cl := c.cl
			c.mu.Unlock()
			c.srv.log.Debug("closing connection", "face", c.face, "transport", transport, "kind", cl.Kind, "reason", cl.Reason)
			c.link.Close(cl)
			return
		}
		// The batch's scratch is borrowed for this batch only: kept for
		// the connection's life it would hold ~50 KB per idle client
		// (256 queued frames), in a pool the next batch of any client
		// reuses it and an idle server's collections let it go.
		sc := c.srv.scratch.get()
		taken := sc.taken[:0]
		size := 0
		i := 0
		for ; i < len(c.queue) && i < maxBatchFrames && (i == 0 || size+c.queue[i].size <= maxBatchBytes); i++ {
			taken = append(taken, c.queue[i])
			size += c.queue[i].size
			c.queue[i] = queued{}
		}
		if i < len(c.queue) {
			c.queue = c.queue[i:]
		} else {
			// Emptied (its slots are cleared): the array goes back to
			// the spares, for the next frames of this client or another,
			// rather than a new one grown batch after batch; an idle
			// client holds none.
			c.queue = c.queue[:0]
			c.releaseQueueLocked()
		}
		// What a full batch left behind has waited long enough.
		c.urgent = len(c.queue) > 0
		c.flushAt, c.shortest = time.Time{}, 0
		c.mu.Unlock()
		// Frames are encoded here, off the lock, so that producers never
		// wait on an encoding; and once taken, so that a frame merged in
		// the queue is encoded once, not each frame it replaced.
		batch := sc.batch[:0]
		for j := range taken {
			batch = append(batch, taken[j].encoded())
		}
		clear(taken)
		err := c.link.Write(c.srv.ctx, batch)
		clear(batch)
		sc.taken, sc.batch = taken[:0], batch[:0]
		c.srv.scratch.put(sc)
		if err != nil {
			c.srv.log.Debug("connection write failed", "face", c.face, "transport", transport, "err", err)
			c.mu.Lock()
			if !c.dropped {
				c.closing, c.dropped = true, true
				c.srv.budget.release(c.queued.Swap(0))
			}
			c.releaseQueueLocked()
			c.mu.Unlock()
			c.link.Close(Close{Kind: CloseOverloaded, Reason: "write failed"})
			return
		}
		c.mu.Lock()
		if !c.dropped {
			c.queued.Add(-int64(size))
			c.srv.budget.release(int64(size))
		}
		c.mu.Unlock()
	}
}

// detach unregisters the client and its subscriptions.
func (c *Client) detach(transport string) {
	c.mu.Lock()
	c.detached = true
	ids := make([]string, 0, len(c.watching))
	for id := range c.watching {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	c.srv.unsubscribeAll(c, ids)
	c.srv.removeClient(c, transport)
}

// watch records that c watches session id, so that its detach
// unsubscribes it; false once the client has detached (a command that
// subscribes it was answered after it went): the caller unsubscribes it
// itself (unsubscribeAll), or the subscription outlives the client.
func (c *Client) watch(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detached {
		return false
	}
	c.watching[id] = struct{}{}
	return true
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.watching, id)
	c.mu.Unlock()
}

// budget bounds the bytes queued for all clients together. Each client
// has its own limit too; the budget is what keeps many slow clients, each
// within its own limit, from adding up to more than the server can hold.
// Over budget, the clients furthest behind are cut off first.
//
// It keeps the spare queue arrays too, as what waits for clients: a
// client's queue is emptied at every write, and under load it would
// otherwise grow a new array from nothing each time.
type budget struct {
	max    int64
	total  atomic.Int64
	spares sync.Pool // of *[]queued, empty
}

// spare is an empty queue array, a new one if no spare is left.
func (b *budget) spare() *[]queued {
	if q, ok := b.spares.Get().(*[]queued); ok {
		return q
	}
	q := make([]queued, 0, spareQueue)
	return &q
}

// keep takes back an emptied queue array.
func (b *budget) keep(q *[]queued) {
	if cap(*q) <= maxSpareQueue {
		b.spares.Put(q)
	}
}

func (b *budget) charge(s *Server, n int64) {
	if b.max <= 0 || b.total.Add(n) <= b.max {
		return
	}
	// Cut off the clients with the most queued until under budget again.
	// Rare, so a scan of every client is fine.
	for b.total.Load() > b.max {
		victim := s.furthestBehind()
		if victim == nil {
			return
		}
		if victim.cut(fmt.Sprintf("Server send budget exhausted (%d bytes queued for all clients): this client was furthest behind; reconnect and resume from the last seq you saw", b.max)) {
			s.rejectedBudget.Add(1)
		}
	}
}

func (b *budget) release(n int64) {
	if n != 0 {
		b.total.Add(-n)
	}
}

// QueuedBytes is what waits to be written to the client.
func (c *Client) QueuedBytes() int64 { return c.queued.Load() }
