package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Where a session's durable state lives, so that the node taking it over
// loses nothing: its transcript lines and its command outcomes in streams
// (one subject per session, each append fenced by the subject's last
// sequence) and its index record in a KV bucket.
const (
	// StateStream keeps every session's transcript, on agentd.tx.<id>.
	StateStream = "AGENTD_STATE"
	// JournalStream keeps command outcomes for replay by id: a session's on
	// agentd.journal.<id>, a node's server-level ones on
	// agentd.journal.node.<node id>.
	JournalStream = "AGENTD_JOURNAL"
	// SessionBucket is the KV bucket of session index records.
	SessionBucket = "AGENTD_SESSIONS"

	// MaxStateMsg is the largest message the state and journal streams
	// take. It is NATS's default max_payload: a transcript write larger
	// than a message goes as several parts (see TranscriptMirror), and a
	// journal record larger than one loses its data (see Journal).
	MaxStateMsg = 1 << 20
	// MaxTranscriptWrite bounds one transcript write (a line, or the whole
	// file a migration rewrites); above it the append fails with
	// *TooLargeError. Tool output reaches the transcript truncated, so only
	// something like a huge inline image gets near it.
	MaxTranscriptWrite = 256 << 20

	txPrefix          = "agentd.tx."
	journalPrefix     = "agentd.journal."
	nodeJournalPrefix = "agentd.journal.node."

	hdrKind = "Agentd-Kind"
	hdrPart = "Agentd-Part"
	// kindStart marks a transcript write that begins with the session
	// header: it replaces everything before it (a new file, or a
	// migration's rewrite). kindFence marks the write a new owner makes
	// right after reading a session's state: it carries no data, and any
	// write expecting the subject as it was before (a stale owner's) is
	// refused by the stream.
	kindStart = "start"
	kindFence = "fence"

	// partHeadroom is what a part leaves of a message for its headers.
	partHeadroom = 4 << 10
)

// TooLargeError says a write is larger than the store takes.
type TooLargeError struct {
	SessionID string
	Size      int
	Max       int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("cluster: a transcript write of %d bytes for session %s is larger than the %d bytes the cluster keeps per write", e.Size, e.SessionID, e.Max)
}

// store is a node's handle on the state streams and the index bucket.
type store struct {
	state   jetstream.Stream
	journal jetstream.Stream
	index   jetstream.KeyValue
	part    int // bytes of data per message
	// maxWrite is MaxTranscriptWrite; a test lowers it.
	maxWrite int
	// directBatch is how many messages a direct get asks for at once, and
	// directRequests how many such requests a read makes before it goes
	// on with a consumer: 0 for no limit, -1 for none (directget.go).
	// Tests change them to read through both, and through the handover.
	directBatch, directRequests int
}

func (n *Node) ensureStore(ctx context.Context) error {
	journalAge := n.cfg.JournalMaxAge
	if journalAge <= 0 {
		journalAge = 25 * time.Hour
	}
	state, err := n.ensureStream(ctx, jetstream.StreamConfig{
		Name:        StateStream,
		Description: "agentd session transcripts, by session",
		Subjects:    []string{txPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
		MaxMsgSize:  MaxStateMsg,
		Duplicates:  dedupeWindow,
		AllowDirect: true,
	})
	if err != nil {
		return err
	}
	journal, err := n.ensureStream(ctx, jetstream.StreamConfig{
		Name:        JournalStream,
		Description: "agentd command outcomes for replay by id, by session",
		Subjects:    []string{journalPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
		MaxMsgSize:  MaxStateMsg,
		MaxAge:      journalAge,
		// Two records per command (begun, finished) for the 2,000 outcomes
		// a pipeline keeps, and room for fences; older ones would be
		// dropped by Recover anyway.
		MaxMsgsPerSubject: 2*2000 + 64,
		Duplicates:        dedupeWindow,
		AllowDirect:       true,
	})
	if err != nil {
		return err
	}
	index, err := n.keyValue(ctx, jetstream.KeyValueConfig{Bucket: SessionBucket, Description: "agentd session index", History: 1})
	if err != nil {
		return err
	}
	part := MaxStateMsg
	if mp := int(n.nc.MaxPayload()); mp > 0 && mp < part {
		part = mp
	}
	n.st = store{state: state, journal: journal, index: index, part: part - partHeadroom, maxWrite: MaxTranscriptWrite, directBatch: directBatch}
	return nil
}

func (n *Node) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := n.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = n.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = n.js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	return st, nil
}

// fencedLog is what an owner knows of one of its session's subjects in a
// state stream: the stream position of the subject's last message, which
// its next write expects. Held across a write, so a session's writes to
// one subject go one at a time.
type fencedLog struct {
	// mu is held across one write's round trip; Lease.mu may be taken
	// under it, never the reverse (lock order in lease.go).
	mu    sync.Mutex
	known bool
	pos   uint64
	// restored describes the transcript this owner read at position pos
	// (RestoreTranscript), so that the file written from it, sent whole
	// again on its first append, need not be stored twice.
	restored struct {
		pos  uint64
		size int
		sum  [sha256.Size]byte
	}
}

// lastMsg is a subject's last message as the stream reports it.
type lastMsg struct {
	pos   uint64 // 0: the subject is empty
	epoch uint64
	node  string
}

func readLast(ctx context.Context, st jetstream.Stream, subject string) (lastMsg, error) {
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return lastMsg{}, nil
	}
	if err != nil {
		return lastMsg{}, fmt.Errorf("reading the last message on %s: %w", subject, err)
	}
	epoch, _ := strconv.ParseUint(m.Header.Get(hdrEpoch), 10, 64)
	return lastMsg{pos: m.Sequence, epoch: epoch, node: m.Header.Get(hdrNode)}, nil
}

// errMoved says a fence found the subject past the position it expected:
// something was written after the caller read it, so read again.
var errMoved = errors.New("cluster: the session's state changed while it was read")

// appendFenced appends msgs to subject, in order and contiguously, as this
// lease's owner. Each message expects the subject's last position this
// owner knows, so the stream refuses it once anyone else has written
// there; if the writer was a newer owner, the lease is stale and ends
// (*StaleError). Each message has an id unique to this write, so a publish
// retried after a lost acknowledgement is not stored twice. It returns
// the stream position of the first message.
//
// With expect set, the write expects the subject to be at that position
// (the caller has just read up to it) and fails with errMoved if it is
// not, unless a newer owner moved it; otherwise a write goes after
// whatever this owner's earlier writes left there.
func (l *Lease) appendFenced(ctx context.Context, fl *fencedLog, st jetstream.Stream, subject string, msgs []*nats.Msg, expect *uint64) (uint64, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if expect != nil {
		fl.pos, fl.known = *expect, true
	}
	if err := l.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	if time.Now().After(deadline) {
		return 0, l.lose("it was not renewed in time", "", 0)
	}
	if !fl.known {
		last, err := readLast(ctx, st, subject)
		if err != nil {
			return 0, l.writeErr(subject, err)
		}
		if last.epoch > l.epoch {
			return 0, l.lose(fmt.Sprintf("node %s wrote %s at epoch %d", last.node, subject, last.epoch), last.node, last.epoch)
		}
		fl.pos, fl.known = last.pos, true
	}
	write := l.writes.Add(1)
	var first uint64
	for i, m := range msgs {
		m.Subject = subject
		m.Header.Set(hdrEpoch, strconv.FormatUint(l.epoch, 10))
		m.Header.Set(hdrNode, l.node.cfg.NodeID)
		id := subject + ":" + strconv.FormatUint(l.epoch, 10) + ":" + strconv.FormatUint(write, 10) + ":" + strconv.Itoa(i)
		refused := 0
		for attempt := 0; ; attempt++ {
			ack, err := publishAttempt(ctx, l.node.js, m, jetstream.WithMsgID(id), jetstream.WithExpectLastSequencePerSubject(fl.pos))
			if err == nil {
				fl.pos = ack.Sequence
				if i == 0 {
					first = ack.Sequence
				}
				break
			}
			if lerr := l.Err(); lerr != nil {
				return 0, lerr
			}
			var apiErr *jetstream.APIError
			if refused >= 3 || ctx.Err() != nil || errors.As(err, &apiErr) && !isWrongLastSeq(err) {
				return 0, l.writeErr(subject, err)
			}
			if !isWrongLastSeq(err) {
				// NATS away, or a lost acknowledgement: the id makes the
				// retry safe, and the write waits for NATS for as long as
				// the lease and ctx last, in order, rather than failing
				// a run over a restart of NATS.
				if err := l.pauseRetry(ctx, attempt); err != nil {
					return 0, l.writeErr(subject, err)
				}
				continue
			}
			refused++
			last, rerr := readLast(ctx, st, subject)
			if rerr != nil {
				return 0, l.writeErr(subject, rerr)
			}
			switch {
			case last.epoch > l.epoch:
				return 0, l.lose(fmt.Sprintf("node %s wrote %s at epoch %d", last.node, subject, last.epoch), last.node, last.epoch)
			case expect != nil:
				fl.pos = last.pos
				return 0, errMoved
			case last.pos != 0 && (last.epoch != l.epoch || last.node != l.node.cfg.NodeID):
				// An older owner wrote before it noticed it had lost the
				// session, and this owner did not fence it out (it did not
				// read the session's state first). Its write stays; this
				// one goes after it.
				l.node.log.Warn("cluster: a previous owner wrote after this node took the session", "subject", subject, "node", last.node, "epoch", last.epoch)
			}
			// Otherwise this owner's own earlier write landed although its
			// publish reported failure, or the subject was purged.
			fl.pos = last.pos
		}
	}
	return first, nil
}

// fence writes a fence at the subject's position pos, which the caller
// has just read up to: from then on a write expecting an older position
// (a previous owner's) is refused. errMoved means the subject moved past
// pos meanwhile and the caller must read again.
func (l *Lease) fence(ctx context.Context, fl *fencedLog, st jetstream.Stream, subject string, pos uint64) error {
	m := nats.NewMsg(subject)
	m.Header.Set(hdrKind, kindFence)
	_, err := l.appendFenced(ctx, fl, st, subject, []*nats.Msg{m}, &pos)
	return err
}

// writeErr wraps a failed state write; a lease that ended meanwhile says
// why instead.
func (l *Lease) writeErr(subject string, err error) error {
	if lerr := l.Err(); lerr != nil {
		return lerr
	}
	return fmt.Errorf("cluster: writing %s: %w", subject, err)
}

// subjectMsg is one message read back from a state stream.
type subjectMsg struct {
	pos  uint64
	hdr  nats.Header
	data []byte
}

// readSubject calls fn with each message on subject, oldest first, up to
// stream position upTo. It reads with batched direct gets and, where
// those cannot finish (directget.go), goes on with an ordered consumer
// that it deletes when done; each fetch has its own context, drained
// before returning, so nothing of the client library outlives the call.
func (n *Node) readSubject(ctx context.Context, stream, subject string, upTo uint64, fn func(subjectMsg) error) error {
	from, done, err := n.readDirect(ctx, stream, subject, 1, upTo, fn)
	if err != nil {
		return fmt.Errorf("reading %s: %w", subject, err)
	}
	if done {
		return nil
	}
	n.consumerReads.Add(1)
	cons, err := n.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subject},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		InactiveThreshold: consumerIdle,
	})
	if err != nil {
		return fmt.Errorf("reading %s: %w", subject, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), consumerDelete)
		defer cancel()
		if info := cons.CachedInfo(); info != nil {
			_ = n.js.DeleteConsumer(dctx, stream, info.Name)
		}
	}()
	retries := 0
	for {
		done, got, err := fetchSubject(ctx, cons, upTo, fn)
		if err != nil {
			// In a cluster the new consumer's interest may not have reached
			// this client's server yet.
			if errors.Is(err, nats.ErrNoResponders) && got == 0 && retries < 50 {
				retries++
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			return fmt.Errorf("reading %s: %w", subject, err)
		}
		if done {
			return nil
		}
	}
}

func fetchSubject(ctx context.Context, cons jetstream.Consumer, upTo uint64, fn func(subjectMsg) error) (done bool, got int, err error) {
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	batch, err := cons.Fetch(64, jetstream.FetchContext(fctx))
	if err != nil {
		cancel()
		return false, 0, err
	}
	defer func() {
		cancel()
		for range batch.Messages() {
		}
	}()
	for m := range batch.Messages() {
		got++
		md, err := m.Metadata()
		if err != nil {
			return false, got, err
		}
		pos := md.Sequence.Stream
		if pos > upTo {
			return true, got, nil
		}
		if err := fn(subjectMsg{pos: pos, hdr: m.Headers(), data: m.Data()}); err != nil {
			return false, got, err
		}
		if pos == upTo {
			return true, got, nil
		}
	}
	if err := batch.Error(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && got > 0 && ctx.Err() == nil {
			return false, got, nil // this fetch's own time ran out; go on
		}
		return false, got, err
	}
	if got == 0 {
		if err := ctx.Err(); err != nil {
			return false, 0, err
		}
		// What was there up to upTo was removed meanwhile (age, purge).
		return true, 0, nil
	}
	return false, got, nil
}
