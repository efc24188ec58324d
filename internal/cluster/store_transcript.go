package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/agentd-dev/agentd/internal/atomicfile"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sessionHeader is how every session file's first line starts (pi's
// format, as package transcript writes it).
var sessionHeader = []byte(`{"type":"session"`)

// TranscriptMirror returns the function package transcript calls with
// each write of the session's file (transcript.WithMirror): it appends
// the bytes to the session's subject agentd.tx.<id> in StateStream before
// the file is written, and returns once the stream has stored them.
//
// The stream fences the write: it expects the subject's last position
// this owner knows, so once another owner has taken the session over and
// read its transcript (RestoreTranscript writes a fence), this owner's
// append is refused, the lease ends, and the append fails with
// *StaleError. An append after the lease ended for any other reason
// fails with why it ended (ErrReleased, ErrNodeClosed, *StaleError).
//
// A write larger than a message (MaxStateMsg, less room for headers) is
// sent as several messages, each naming its part; RestoreTranscript only
// uses a write whose parts all arrived. A write above MaxTranscriptWrite
// fails with *TooLargeError. Each append waits at most
// Config.RequestTimeout.
func (l *Lease) TranscriptMirror() func(lines []byte) error {
	return func(lines []byte) error {
		ctx, cancel := context.WithTimeout(l.ctx, l.node.cfg.RequestTimeout)
		defer cancel()
		return l.appendTranscript(ctx, lines)
	}
}

func (l *Lease) appendTranscript(ctx context.Context, lines []byte) error {
	if max := l.node.st.maxWrite; len(lines) > max {
		return &TooLargeError{SessionID: l.sessionID, Size: len(lines), Max: max}
	}
	if len(lines) == 0 {
		return nil
	}
	start := bytes.HasPrefix(lines, sessionHeader)
	if n := l.restoredPrefix(lines); start && n > 0 {
		// The file RestoreTranscript wrote, sent whole on its first
		// append (transcript.WithMirror): only what follows it is new.
		lines, start = lines[n:], false
		if len(lines) == 0 {
			return nil
		}
	}
	part := l.node.st.part
	n := (len(lines) + part - 1) / part
	msgs := make([]*nats.Msg, 0, n)
	for i := range n {
		m := nats.NewMsg("")
		m.Data = lines[i*part : min((i+1)*part, len(lines))]
		if i == 0 && start {
			m.Header.Set(hdrKind, kindStart)
		}
		if n > 1 {
			m.Header.Set(hdrPart, strconv.Itoa(i+1)+"/"+strconv.Itoa(n))
		}
		msgs = append(msgs, m)
	}
	subject := txPrefix + l.sessionID
	first, err := l.appendFenced(ctx, &l.txLog, l.node.st.state, subject, msgs, nil)
	if err != nil || !start || first <= 1 {
		return err
	}
	// What came before a whole file is of no use to a restore any more:
	// drop it, so the subject holds one copy of the session. A failure
	// costs only space.
	if err := l.node.st.state.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(first)); err != nil {
		l.node.log.Warn("cluster: dropping a session's superseded transcript", "session", l.sessionID, "err", err)
	}
	return nil
}

// restoredPrefix is the length of the transcript this owner restored if
// lines begin with it and the subject has not moved since, else 0.
func (l *Lease) restoredPrefix(lines []byte) int {
	fl := &l.txLog
	fl.mu.Lock()
	r := fl.restored
	moved := !fl.known || fl.pos != r.pos
	fl.mu.Unlock()
	if r.size == 0 || moved || len(lines) < r.size || sha256.Sum256(lines[:r.size]) != r.sum {
		return 0
	}
	return r.size
}

// SeedTranscript mirrors a session file that exists only on this node (a
// session from before the cluster, or a fork, which package transcript
// writes whole without its parent's mirror) as one write that replaces
// whatever the stream held for the session. The file must start with a
// session header; a torn last line (no '\n') is left out.
func (l *Lease) SeedTranscript(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cluster: seeding the transcript of session %s: %w", l.sessionID, err)
	}
	if !bytes.HasPrefix(data, sessionHeader) {
		return fmt.Errorf("cluster: seeding the transcript of session %s: %s does not start with a session header", l.sessionID, path)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	return l.appendTranscript(ctx, data)
}

// RestoreTranscript writes the session's transcript, as the stream holds
// it, to path (through a temporary file and a rename, so a reader never
// sees part of it): the pi-format JSONL file transcript.Open reads. found
// is false, and nothing is written, when the stream holds no transcript
// for the session.
//
// The node taking a session over calls it after Takeover and before
// opening the session. When this node holds the session's lease, the read
// ends with a fence: from then on a write by the previous owner is refused
// by the stream, so nothing it still appends can be missing from the file
// (if it wrote while the transcript was read, the read starts again). The
// lease's TranscriptMirror then appends after what was read.
func (n *Node) RestoreTranscript(ctx context.Context, sessionID, path string) (found bool, err error) {
	if err := CheckSessionID(sessionID); err != nil {
		return false, err
	}
	if path == "" {
		return false, fmt.Errorf("cluster: restoring the transcript of session %s: no path to write it to", sessionID)
	}
	subject := txPrefix + sessionID
	l := n.Lease(sessionID)
	for attempt := 0; ; attempt++ {
		data, pos, err := n.readTranscript(ctx, sessionID)
		if err != nil {
			return false, err
		}
		if l != nil {
			err := l.fence(ctx, &l.txLog, n.st.state, subject, pos)
			if errors.Is(err, errMoved) && attempt < 10 {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("cluster: restoring the transcript of session %s: %w", sessionID, err)
			}
			l.txLog.mu.Lock()
			l.txLog.restored.pos, l.txLog.restored.size, l.txLog.restored.sum = l.txLog.pos, len(data), sha256.Sum256(data)
			l.txLog.mu.Unlock()
		}
		if data == nil {
			return false, nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return false, fmt.Errorf("cluster: restoring the transcript of session %s to %s: %w", sessionID, path, err)
		}
		if err := atomicfile.Write(path, data, true); err != nil {
			return false, fmt.Errorf("cluster: restoring the transcript of session %s to %s: %w", sessionID, path, err)
		}
		return true, nil
	}
}

// readTranscript assembles the session's file from its subject: the
// content of the last write that started with the header, followed by
// every complete write after it. A write whose parts did not all arrive
// (its append failed, so the owner's file does not have it either) is
// left out. pos is the stream position read up to.
func (n *Node) readTranscript(ctx context.Context, sessionID string) (data []byte, pos uint64, err error) {
	subject := txPrefix + sessionID
	last, err := readLast(ctx, n.st.state, subject)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: restoring the transcript of session %s: %w", sessionID, err)
	}
	if last.pos == 0 {
		return nil, 0, nil
	}
	var (
		out     []byte
		started bool
		parts   [][]byte // the write being assembled
		start   bool     // it begins with the header
		want    int      // its number of parts; 0 when none is under way
		dropped int
	)
	err = n.readSubject(ctx, StateStream, subject, last.pos, func(m subjectMsg) error {
		kind := m.hdr.Get(hdrKind)
		if kind == kindFence {
			return nil
		}
		i, total, err := parsePart(m.hdr.Get(hdrPart))
		if err != nil {
			return fmt.Errorf("message at stream position %d: %w", m.pos, err)
		}
		if i == 1 {
			if want != 0 {
				dropped++
			}
			parts, start, want = parts[:0], kind == kindStart, total
		} else if want == 0 || i != len(parts)+1 || total != want {
			// A part of a write whose beginning was left out.
			if want != 0 {
				dropped++
			}
			parts, want = parts[:0], 0
			return nil
		}
		parts = append(parts, m.data)
		if len(parts) < want {
			return nil
		}
		if start {
			out, started = out[:0], true
		}
		for _, p := range parts {
			out = append(out, p...)
		}
		parts, want = parts[:0], 0
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: restoring the transcript of session %s: %w", sessionID, err)
	}
	if want != 0 {
		dropped++
	}
	if dropped > 0 {
		n.log.Warn("cluster: transcript writes left out of a restore because not all their parts were stored", "session", sessionID, "writes", dropped)
	}
	if !started {
		if len(out) == 0 {
			return nil, last.pos, nil
		}
		return nil, 0, fmt.Errorf("cluster: restoring the transcript of session %s: the stream holds %d bytes of entries but no session header", sessionID, len(out))
	}
	return out, last.pos, nil
}

// parsePart reads an Agentd-Part header, "i/n"; none means a write of one
// message.
func parsePart(h string) (i, n int, err error) {
	if h == "" {
		return 1, 1, nil
	}
	a, b, ok := bytes.Cut([]byte(h), []byte("/"))
	if ok {
		i, err = strconv.Atoi(string(a))
		if err == nil {
			n, err = strconv.Atoi(string(b))
		}
	}
	if !ok || err != nil || i < 1 || n < i {
		return 0, 0, fmt.Errorf("bad %s header %q", hdrPart, h)
	}
	return i, n, nil
}
