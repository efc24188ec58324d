package mcp

import (
	"fmt"
	"strconv"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// ProgressDetails are the details of a tool update made from an MCP
// server's notifications/progress for the call: what clients get on
// every face as the tool's partial result (pi's tool_execution_update,
// ACP's tool_call_update, convapi's tool_output).
type ProgressDetails struct {
	Progress float64 `json:"progress"`
	// Total is 0 when the server does not know it.
	Total   float64 `json:"total,omitempty"`
	Message string  `json:"message,omitempty"`
}

// maxProgressMessage bounds the message of one update: a server's
// progress is shown to people, not a channel for output.
const maxProgressMessage = 1024

// progressSink holds the newest progress of one call. The SDK calls
// put on its handler goroutine, which must not wait for the session to
// take an update, so an update not yet taken is replaced by a newer
// one: progress supersedes itself.
type progressSink struct {
	ready chan struct{} // one slot: an update is waiting

	mu     sync.Mutex
	latest *sdk.ProgressNotificationParams
}

func (p *progressSink) put(n *sdk.ProgressNotificationParams) {
	p.mu.Lock()
	p.latest = n
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

func (p *progressSink) take() *sdk.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.latest
	p.latest = nil
	return n
}

// watchProgress gives a call a progress token of its own and the sink
// its notifications go to; unwatch when the call is over, after which
// the token's notifications are dropped.
func (s *server) watchProgress() (token string, sink *progressSink, unwatch func()) {
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	s.nextToken++
	token = "agentd-" + strconv.FormatUint(s.nextToken, 10)
	sink = &progressSink{ready: make(chan struct{}, 1)}
	if s.progress == nil {
		s.progress = map[string]*progressSink{}
	}
	s.progress[token] = sink
	return token, sink, func() {
		s.progressMu.Lock()
		delete(s.progress, token)
		s.progressMu.Unlock()
	}
}

// onProgress routes a progress notification to its call; one for no
// call under way (late, or a token the server made up) is dropped.
func (s *server) onProgress(n *sdk.ProgressNotificationParams) {
	if n == nil {
		return
	}
	token, ok := n.ProgressToken.(string)
	if !ok {
		return
	}
	s.progressMu.Lock()
	sink := s.progress[token]
	s.progressMu.Unlock()
	if sink != nil {
		sink.put(n)
	}
}

// progressResult is the tool update of a progress notification:
// "Progress 2/3: message" for the model-free eyes of clients, and the
// numbers in the details.
func progressResult(n *sdk.ProgressNotificationParams) tool.Result {
	msg := n.Message
	if len(msg) > maxProgressMessage {
		cut := maxProgressMessage
		for cut > 0 && msg[cut]&0xC0 == 0x80 {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	line := "Progress " + num(n.Progress)
	if n.Total > 0 {
		line += "/" + num(n.Total)
	}
	if msg != "" {
		line = fmt.Sprintf("%s: %s", line, msg)
	}
	return tool.Result{Content: []llm.Content{llm.Text(line)}, Details: ProgressDetails{Progress: n.Progress, Total: n.Total, Message: msg}}
}
