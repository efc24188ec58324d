package acp

import (
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/session"
)

// The options of the question whether to trust a project's MCP servers.
const (
	trustRemember = "trust-always"
	trustOnce     = "trust-once"
	trustRefuse   = "trust-refuse"
)

var trustOptions = []permissionOption{
	{OptionID: trustRemember, Name: "Trust this project's MCP servers (remembered until the file changes)", Kind: AllowAlways},
	{OptionID: trustOnce, Name: "Start them for this session only", Kind: AllowOnce},
	{OptionID: trustRefuse, Name: "Do not start them", Kind: RejectOnce},
}

// askTrust asks the editor, once the session is open, whether to start
// the MCP servers of a project file nobody trusted as it is (a model
// working in the project could have written it). The session works
// without them meanwhile. Without a trust store (Options.Trust nil)
// nothing is asked and the file is never used. Trusting records a grant for exactly the
// content that was shown, and what starts is what was shown.
func (ss *acpSession) askTrust() {
	p := ss.untrusted
	if p == nil || ss.local == nil || ss.a.opt.MCP == nil || ss.a.opt.Trust == nil {
		return
	}
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	ss.wg.Add(1)
	ss.mu.Unlock()
	go func() {
		defer ss.wg.Done()
		var b strings.Builder
		fmt.Fprintf(&b, "%s asks agentd to start these commands as MCP servers, with network access, under this session's sandbox. A model working in the project could have written it: start them only if you know the file.\n", p.Path)
		for _, c := range p.Servers {
			if c.URL != "" {
				fmt.Fprintf(&b, "\n- %s: %s", c.Name, c.URL)
				continue
			}
			fmt.Fprintf(&b, "\n- %s: %s", c.Name, strings.Join(append([]string{c.Command}, c.Args...), " "))
		}
		tc := toolCall{ToolCallID: "trust-project-mcp", Title: "Start the MCP servers of " + p.Path + "?", Kind: "execute",
			Content: []toolCallContent{{Type: "content", Content: &contentBlock{Type: "text", Text: b.String()}}}}
		var res permissionResult
		if err := ss.a.conn.call(ss.ctx, "session/request_permission", permissionParams{SessionID: ss.id, ToolCall: tc, Options: trustOptions}, &res); err != nil {
			if ss.ctx.Err() == nil {
				ss.a.log.Warn("asking to trust the project's MCP servers", "session", ss.id, "err", err)
			}
			return
		}
		if res.Outcome.Outcome != "selected" || (res.Outcome.OptionID != trustRemember && res.Outcome.OptionID != trustOnce) {
			ss.a.log.Info("project MCP servers not trusted by the editor's user", "file", p.Path)
			return
		}
		if res.Outcome.OptionID == trustRemember && ss.a.opt.Trust != nil {
			if err := ss.a.opt.Trust.Grant(p.Dir, mcp.ProjectFile, p.Data); err != nil {
				ss.a.log.Warn("recording trust in the project's MCP servers", "file", p.Path, "err", err)
			}
		}
		ss.startProject(p)
	}()
}

// startProject starts the servers of a project file the person trusted
// and gives their tools to the session.
func (ss *acpSession) startProject(p *mcp.Project) {
	set := ss.a.opt.MCP.Open(ss.ctx, p.Servers, ss.cwd)
	if err := set.Err(); err != nil {
		ss.a.log.Warn("MCP servers", "cwd", ss.cwd, "err", err)
	}
	// A session closed meanwhile stops them at once.
	ss.local.AddToolSource(set, set.Close)
}

var _ interface {
	AddToolSource(session.ToolSource, func()) func()
} = (*session.Session)(nil)
