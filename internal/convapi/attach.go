package convapi

import (
	"crypto/rand"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/server"
)

// An attachment is gptme's "session": a client's ephemeral handle on a
// conversation, announced in the connected event and named by step,
// interrupt and tool/confirm. It owns nothing of the conversation: a
// client that goes away costs an entry here until it has been idle (no
// stream attached, no request naming it) for the configured time, and the
// conversation's runs and pending confirmations carry on without it.
type attachment struct {
	id      string
	conv    string
	created time.Time
	last    time.Time
	// streams are the event streams attached now, closed when the
	// attachment or its conversation is deleted.
	streams map[*server.Client]struct{}
	// elsewhere: a stream of it was opened on another cluster node
	// (rest.watch), which this node's streams do not count; it is
	// evicted after those that were never streamed anywhere else.
	elsewhere bool
	// autoAlways and autoNext are PUT's auto_confirm: every step from this
	// attachment confirms its calls, or its first step confirms the next
	// autoNext calls.
	autoAlways bool
	autoNext   int
}

// maxAttachments bounds the table; beyond it the attachments idle the
// longest go first.
const maxAttachments = 10000

type attachments struct {
	idle time.Duration

	mu   sync.Mutex
	byID map[string]*attachment
}

func newAttachments(idle time.Duration) *attachments {
	return &attachments{idle: idle, byID: map[string]*attachment{}}
}

func newAttachmentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // a version 4 UUID, the form gptme's clients see
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// create makes an attachment to conversation conv.
func (a *attachments) create(conv string) *attachment {
	now := time.Now()
	at := &attachment{id: newAttachmentID(), conv: conv, created: now, last: now, streams: map[*server.Client]struct{}{}}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(now)
	if len(a.byID) >= maxAttachments {
		a.evictLocked(len(a.byID) - maxAttachments + 1)
	}
	a.byID[at.id] = at
	return at
}

// get finds attachment id and marks it used.
func (a *attachments) get(id string) (*attachment, bool) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(now)
	at, ok := a.byID[id]
	if ok {
		at.last = now
	}
	return at, ok
}

// update runs fn on attachment id under the lock.
func (a *attachments) update(id string, fn func(*attachment)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.byID[id]; ok {
		fn(at)
	}
}

// attach records a stream of attachment id; it reports false when the
// attachment is gone.
func (a *attachments) attach(id string, c *server.Client) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.byID[id]
	if ok {
		at.streams[c] = struct{}{}
		at.last = time.Now()
	}
	return ok
}

// detach forgets a stream; the attachment's idle time starts now.
func (a *attachments) detach(id string, c *server.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.byID[id]; ok {
		delete(at.streams, c)
		at.last = time.Now()
	}
}

// remove deletes attachment id and returns its streams to close.
func (a *attachments) remove(id string) ([]*server.Client, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.byID[id]
	if !ok {
		return nil, false
	}
	delete(a.byID, id)
	return streamsOf(at), true
}

// removeConversation deletes the attachments of conv and returns their
// streams to close.
func (a *attachments) removeConversation(conv string) []*server.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*server.Client
	for id, at := range a.byID {
		if at.conv == conv {
			out = append(out, streamsOf(at)...)
			delete(a.byID, id)
		}
	}
	return out
}

func streamsOf(at *attachment) []*server.Client {
	out := make([]*server.Client, 0, len(at.streams))
	for c := range at.streams {
		out = append(out, c)
	}
	return out
}

// snapshot is a copy of one attachment's fields.
type attachmentInfo struct {
	id, conv      string
	created, last time.Time
	streams       int
}

// list returns the attachments, oldest first.
func (a *attachments) list() []attachmentInfo {
	now := time.Now()
	a.mu.Lock()
	a.sweepLocked(now)
	out := make([]attachmentInfo, 0, len(a.byID))
	for _, at := range a.byID {
		out = append(out, attachmentInfo{at.id, at.conv, at.created, at.last, len(at.streams)})
	}
	a.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.Before(out[j].created)
		}
		return out[i].id < out[j].id
	})
	return out
}

// latest is the most recently used attachment of conv.
func (a *attachments) latest(conv string) (attachmentInfo, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best *attachment
	for _, at := range a.byID {
		if at.conv == conv && (best == nil || at.last.After(best.last)) {
			best = at
		}
	}
	if best == nil {
		return attachmentInfo{}, false
	}
	return attachmentInfo{best.id, best.conv, best.created, best.last, len(best.streams)}, true
}

// sweepLocked drops the attachments idle longer than the idle time:
// checked on every use of the table, so an idle server holds them until
// its next request, which costs an entry each and nothing else.
func (a *attachments) sweepLocked(now time.Time) {
	if a.idle <= 0 {
		return
	}
	for id, at := range a.byID {
		if len(at.streams) == 0 && now.Sub(at.last) > a.idle {
			delete(a.byID, id)
		}
	}
}

// evictLocked drops the n attachments without streams idle the longest,
// those streamed on another node last: their streams are not counted
// here, and a client opening and closing streams here must not push out
// the attachment another node streams now.
func (a *attachments) evictLocked(n int) {
	var idle []*attachment
	for _, at := range a.byID {
		if len(at.streams) == 0 {
			idle = append(idle, at)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		if idle[i].elsewhere != idle[j].elsewhere {
			return !idle[i].elsewhere
		}
		return idle[i].last.Before(idle[j].last)
	})
	for i := 0; i < n && i < len(idle); i++ {
		delete(a.byID, idle[i].id)
	}
}
