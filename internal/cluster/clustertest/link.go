package clustertest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link is one node's TCP link to NATS, which a test cuts (every
// connection through it closed, new ones refused) and heals, to play a
// partition of that node alone.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewLink listens on a free loopback port and passes what connects there
// on to target, until the test ends.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(func() {
		ln.Close()
		l.SetCut(true)
		l.wg.Wait()
	})
	return l
}

// Addr is the link's own address, host:port, for the node to dial.
func (l *Link) Addr() string { return l.ln.Addr().String() }

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns = append(l.conns, c, up)
		l.wg.Add(2)
		l.mu.Unlock()
		go func() { defer l.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
		go func() { defer l.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
	}
}

// SetCut cuts the link (closing every connection through it and refusing
// new ones) or heals it.
func (l *Link) SetCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}
