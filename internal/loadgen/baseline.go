package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/piclient"
)

// BaselineServerCommand, as the argument after `agentd bench`, runs the
// baseline's server (ServeBaseline) instead of a bench. Baseline starts
// it; people have no reason to.
const BaselineServerCommand = "__baseline-server"

// BaselineOptions say what Baseline measures.
type BaselineOptions struct {
	// Binary is the agentd executable that runs the server, as
	// `agentd bench __baseline-server`; empty means this process's own.
	Binary string
	// Connections is how many connections the server writes to at once.
	Connections int
	// Messages is how many messages the server writes to each connection
	// (default 1,000), Size how many bytes each has (default 200).
	Messages int
	Size     int
	// DialConcurrency bounds connections being opened at once (default 64).
	DialConcurrency int
	// Timeout bounds the whole measure once connected (default 10 minutes);
	// StartTimeout the wait for the server to listen (default 30 s).
	Timeout      time.Duration
	StartTimeout time.Duration
	// Logger gets progress messages; nil discards them.
	Logger *slog.Logger
}

// BaselineReport is coder/websocket's own rate: one server process writing
// messages as fast as the library lets it to connections read by clients
// in this process, as agentd serve's clients read.
type BaselineReport struct {
	Connections     int           `json:"connections"`
	MessagesPerConn int           `json:"messages_per_connection"`
	Size            int           `json:"message_bytes"`
	Messages        int64         `json:"messages"`
	Duration        time.Duration `json:"duration_ns"`
	MessagesPerSec  float64       `json:"messages_per_sec"`
	// CPU is the CPU time of the measure: the server's, the clients' and
	// the rest of the machine's.
	CPU CPUUse `json:"cpu"`
	// Errors counts connections that failed; their messages are missing
	// from Messages.
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// Baseline measures the rate at which coder/websocket alone moves messages
// from one process to o.Connections connections: what agentd serve's
// events per second are a fraction of. The server is a child process, as
// agentd serve is, so that both are measured the same way; its handler
// does nothing but write the same prepared message o.Messages times with
// the library's Write. The clock runs from the moment every client has
// asked for its messages until the last one has them all.
func Baseline(ctx context.Context, o BaselineOptions) (BaselineReport, error) {
	if o.Connections < 1 {
		return BaselineReport{}, fmt.Errorf("baseline connections %d: must be at least 1", o.Connections)
	}
	if o.Messages <= 0 {
		o.Messages = 1000
	}
	if o.Size <= 0 {
		o.Size = 200
	}
	if o.DialConcurrency <= 0 {
		o.DialConcurrency = 64
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return BaselineReport{}, fmt.Errorf("baseline binary: %w", err)
		}
		o.Binary = exe
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	rep := BaselineReport{Connections: o.Connections, MessagesPerConn: o.Messages, Size: o.Size}
	srv, err := startServer(ctx, o.Binary, []string{"bench", BaselineServerCommand}, "", nil, nil, o.StartTimeout)
	if err != nil {
		return rep, fmt.Errorf("baseline server: %w", err)
	}
	defer srv.stop(10 * time.Second)
	o.Logger.Info("baseline server ready", "addr", srv.addr, "connections", o.Connections, "messages", o.Messages, "size", o.Size)

	probs := tally{log: o.Logger}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	url := "ws://" + srv.addr + "/"

	// Connect everyone first: the clock measures writing, not dialing.
	conns := make([]*websocket.Conn, o.Connections)
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
			defer cancel()
			c, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: hc})
			if err != nil {
				probs.add("connect", fmt.Sprintf("baseline connection %d: %v", i, err))
				return
			}
			c.SetReadLimit(64 << 20)
			conns[i] = c
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				wg.Go(func() { _ = c.Close(websocket.StatusNormalClosure, "baseline done") })
			}
		}
		wg.Wait()
	}()

	mctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var received atomic.Int64
	ask := []byte(fmt.Sprintf("%d %d", o.Messages, o.Size))
	begin := make(chan struct{})
	for i, c := range conns {
		if c == nil {
			continue
		}
		wg.Go(func() {
			<-begin
			if err := c.Write(mctx, websocket.MessageText, ask); err != nil {
				probs.add("send", fmt.Sprintf("baseline connection %d: %v", i, err))
				return
			}
			// Read as the bench's clients do (piclient.ReadMessage); the end of
			// mctx closes the connection.
			stop := context.AfterFunc(mctx, func() { _ = c.CloseNow() })
			defer stop()
			var buf bytes.Buffer
			for n := 0; n < o.Messages; n++ {
				if err := piclient.ReadMessage(c, &buf); err != nil {
					probs.add("read", fmt.Sprintf("baseline connection %d: after %d of %d messages: %v", i, n, o.Messages, err))
					return
				}
				received.Add(1)
			}
		})
	}
	cpu0, cpuErr := readCPU(srv.pid())
	start := time.Now()
	close(begin)
	wg.Wait()
	rep.Duration = time.Since(start)
	if cpuErr == nil {
		var cpu1 cpuMark
		if cpu1, cpuErr = readCPU(srv.pid()); cpuErr == nil {
			rep.CPU = cpu1.since(cpu0)
		}
	}
	if cpuErr != nil {
		o.Logger.Warn("cpu times", "err", cpuErr)
	}
	rep.Messages = received.Load()
	if s := rep.Duration.Seconds(); s > 0 {
		rep.MessagesPerSec = float64(rep.Messages) / s
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("baseline: %w", err)
	}
	rep.Errors, _, rep.ErrorSamples = probs.result()
	o.Logger.Info("baseline done", "messages", rep.Messages, "took", rep.Duration.Round(time.Millisecond))
	return rep, nil
}

// ServeBaseline is the baseline's server, run by `agentd bench
// __baseline-server`: it listens on a free loopback port, says so on log
// as agentd serve does (`listening addr=...`), and on each WebSocket
// connection writes what the client asks for ("<messages> <size>") as
// fast as the library allows. It returns when ctx ends, after every
// connection's handler has.
func ServeBaseline(ctx context.Context, log io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("baseline server: listen: %w", err)
	}
	var h baselineHandlers
	hs := &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 30 * time.Second,
		// Hijacked connections outlive Close; ending ctx ends their
		// handlers' reads and writes.
		BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if _, err := fmt.Fprintf(log, "level=INFO msg=\"baseline server listening\" addr=%s\n", ln.Addr()); err != nil {
		hs.Close()
		<-served
		return fmt.Errorf("baseline server: %w", err)
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-served:
		err = fmt.Errorf("baseline server: %w", err)
	}
	hs.Close()
	h.wait()
	if err == nil {
		<-served
	}
	return err
}

// baselineHandlers tracks the baseline server's connection handlers so
// that ServeBaseline returns after them.
type baselineHandlers struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (h *baselineHandlers) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	_, ask, err := c.Read(ctx)
	if err != nil {
		return
	}
	count, size, ok := parseAsk(string(ask))
	if !ok {
		_ = c.Close(websocket.StatusPolicyViolation, "want \"<messages> <size>\"")
		return
	}
	msg := baselineMessage(size)
	for range count {
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			return
		}
	}
	// Until the client hangs up.
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
	}
}

func (h *baselineHandlers) wait() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wg.Wait()
}

// parseAsk parses "<messages> <size>", both positive.
func parseAsk(s string) (count, size int, ok bool) {
	a, b, found := strings.Cut(s, " ")
	if !found {
		return 0, 0, false
	}
	count, err1 := strconv.Atoi(a)
	size, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || count < 1 || size < 1 || size > 64<<20 {
		return 0, 0, false
	}
	return count, size, true
}

// baselineMessage is a JSON object of exactly size bytes (when size allows
// one), shaped like a small event frame.
func baselineMessage(size int) []byte {
	const head, tail = `{"type":"event","pad":"`, `"}`
	if size < len(head)+len(tail) {
		return []byte(strings.Repeat("x", size))
	}
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}
