package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// ToolName is the agent tool name of an MCP server's tool, <server>__<tool>
// (the form other agents use, so policies carry over): providers
// accept letters, digits, _ and - up to 64 characters.
func ToolName(server, name string) string {
	n := safeName(server) + "__" + safeName(name)
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// safeName is s with every byte other than an ASCII letter, digit, _ or -
// replaced by _, as the regexp [^a-zA-Z0-9_-] did per character: a loop,
// so that nothing is compiled at start for it. A multi-byte character
// becomes one _, as the regexp's match of one rune did.
func safeName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// IsToolOf reports whether name may be a tool of the MCP server named
// server: whether it begins as ToolName makes the names of that server's
// tools begin. It holds before the server started, or if it never does.
func IsToolOf(server, name string) bool {
	return strings.HasPrefix(name, ToolName(server, ""))
}

// mcpTool is one tool of an MCP server as an agent tool.
type mcpTool struct {
	s      *server
	remote string
	spec   llm.Tool
}

func (t *mcpTool) Spec() llm.Tool { return t.spec }

func (t *mcpTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	cs, err := t.s.session(ctx)
	if err != nil {
		return tool.Errorf("MCP server %s is not available: %v", t.s.cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.m.opt.CallTimeout)
	defer cancel()
	args := call.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res, err := t.call(ctx, cs, &sdk.CallToolParams{Name: t.remote, Arguments: args}, update)
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// A server that hangs is stopped; the next call starts it again.
		t.s.lost(cs)
		return tool.Errorf("MCP tool %s timed out after %s", t.spec.Name, t.s.m.opt.CallTimeout)
	case ctx.Err() != nil:
		return tool.Errorf("Operation aborted")
	default:
		var answered *jsonrpc.Error
		if errors.As(err, &answered) && answered.Code != clientClosing && answered.Code != serverClosing {
			return tool.Errorf("MCP tool %s failed: %v", t.spec.Name, err)
		}
		t.s.lost(cs)
		return tool.Errorf("MCP server %s stopped during the call (%v); it is restarted for the next call", t.s.cfg.Name, err)
	}
	t.s.healthy()
	return Result(res)
}

// call calls the tool. With update, the call carries a progress token
// and each progress the server notifies is an update, given on this
// goroutine while the call is under way; progress that comes after the
// answer is superseded by it and dropped.
func (t *mcpTool) call(ctx context.Context, cs *sdk.ClientSession, params *sdk.CallToolParams, update func(tool.Result)) (*sdk.CallToolResult, error) {
	if update == nil {
		return cs.CallTool(ctx, params)
	}
	token, sink, unwatch := t.s.watchProgress()
	defer unwatch()
	params.SetProgressToken(token)
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	// Ends with the call, which ends with ctx; waited for below.
	go func() {
		res, err := cs.CallTool(ctx, params)
		done <- answer{res, err}
	}()
	for {
		select {
		case <-sink.ready:
			if n := sink.take(); n != nil {
				update(progressResult(n))
			}
		case a := <-done:
			return a.res, a.err
		}
	}
}

// The SDK's codes of a connection going away, which are not the
// server's answer.
const (
	clientClosing = -32003
	serverClosing = -32004
)

// Result maps an MCP tool result into an agent tool result: text and
// images as they are, other content described, the text cut to the
// limits of the built-in tools.
func Result(res *sdk.CallToolResult) tool.Result {
	var out tool.Result
	out.IsError = res.IsError
	budget := tool.MaxBytes
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			text := c.Text
			if len(text) > budget {
				cut := budget
				for cut > 0 && text[cut]&0xC0 == 0x80 {
					cut--
				}
				text = text[:cut] + fmt.Sprintf("\n[Output truncated: %d of %d bytes shown.]", cut, len(c.Text))
			}
			budget -= min(budget, len(text))
			out.Content = append(out.Content, llm.Text(text))
		case *sdk.ImageContent:
			out.Content = append(out.Content, llm.Image(base64.StdEncoding.EncodeToString(c.Data), c.MIMEType))
		case *sdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				out.Content = append(out.Content, llm.Text(c.Resource.Text))
			} else if c.Resource != nil {
				out.Content = append(out.Content, llm.Text("[resource "+c.Resource.URI+"]"))
			}
		case *sdk.ResourceLink:
			out.Content = append(out.Content, llm.Text("[resource "+c.URI+"]"))
		case *sdk.AudioContent:
			out.Content = append(out.Content, llm.Text("[audio "+c.MIMEType+", not shown]"))
		}
	}
	if len(out.Content) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out.Content = append(out.Content, llm.Text(string(b)))
		}
	}
	if len(out.Content) == 0 {
		out.Content = append(out.Content, llm.Text("(no output)"))
	}
	return out
}
