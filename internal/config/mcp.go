package config

import (
	"flag"
	"fmt"
	"time"
)

// Default MCP timeouts: a server that has not listed its tools by then
// is given up (the session goes on without it); a tool call that has not
// answered by then fails.
const (
	DefaultMCPStartTimeout = 30 * time.Second
	DefaultMCPCallTimeout  = 2 * time.Minute
)

// MCPTimeouts bound the MCP servers sessions use as tool sources. Zero
// takes the default.
type MCPTimeouts struct {
	// Start bounds starting a server and listing its tools.
	Start time.Duration
	// Call bounds one tool call.
	Call time.Duration
}

// Register adds the MCP timeout flags to fs.
func (m *MCPTimeouts) Register(fs *flag.FlagSet) {
	fs.DurationVar(&m.Start, "mcp-start-timeout", m.Start, fmt.Sprintf("how long an MCP server may take to start and list its tools (0: the default, %v); a first npx -y downloads its package and may need minutes", DefaultMCPStartTimeout))
	fs.DurationVar(&m.Call, "mcp-call-timeout", m.Call, fmt.Sprintf("how long one MCP tool call may take (0: the default, %v)", DefaultMCPCallTimeout))
}

// Check validates m, naming the flag that is wrong.
func (m MCPTimeouts) Check() error {
	if m.Start < 0 {
		return fmt.Errorf("--mcp-start-timeout %v: must not be negative (0 takes the default, %v)", m.Start, DefaultMCPStartTimeout)
	}
	if m.Call < 0 {
		return fmt.Errorf("--mcp-call-timeout %v: must not be negative (0 takes the default, %v)", m.Call, DefaultMCPCallTimeout)
	}
	return nil
}

// Durations are the timeouts, defaults filled in.
func (m MCPTimeouts) Durations() (start, call time.Duration) {
	start, call = m.Start, m.Call
	if start == 0 {
		start = DefaultMCPStartTimeout
	}
	if call == 0 {
		call = DefaultMCPCallTimeout
	}
	return start, call
}
