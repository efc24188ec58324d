package session

import (
	"context"
	"slices"

	"github.com/agentd-dev/agentd/internal/tool"
)

// ToolSource is a set of tools that can change while the session lives:
// the MCP servers of a session or of the whole server, which say when
// their list changed.
type ToolSource interface {
	// Tools are the source's tools now.
	Tools() []tool.Tool
	// Watch calls changed after each change of Tools until stop is
	// called; changed must not be called with a lock the session's
	// listeners may wait for.
	Watch(changed func()) (stop func())
	// Unavailable are the parts of the source that give no tools, and
	// why (an MCP server that failed to start).
	Unavailable() []tool.Unavailable
}

// A Preparer is a ToolSource that gets its tools only when a run needs
// them (MCP servers that start at a conversation's first run rather than
// when it loads). The session prepares each before every run, ahead of
// the first model request; Prepare returns at once once the tools are
// there, and tells the source's watchers when it brought new ones. ctx
// ends when the run is aborted.
type Preparer interface {
	Prepare(ctx context.Context)
}

// prepareSources prepares the sources that are Preparers, for the run
// that is starting.
func (s *Session) prepareSources(ctx context.Context) {
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	for _, ts := range sources {
		if p, ok := ts.src.(Preparer); ok {
			p.Prepare(ctx)
		}
	}
}

type toolSource struct {
	src     ToolSource
	stop    func()
	unwatch func()
}

// AddToolSource gives the session the tools of src, after its own
// (those of Config.Tools) and before ask_user and todo. The next run
// offers them, and whenever src says its tools changed the session takes
// the new list for the runs after (a run in progress keeps its tools, as
// with SetTools) and announces it with config_changed. stop, when not
// nil, is called when the source is removed or the session closes: the
// session then owns the source (its per-session MCP servers); a shared
// source is added with a nil stop. Adding to a closed session calls stop
// at once. remove takes the source's tools away again (and calls stop).
func (s *Session) AddToolSource(src ToolSource, stop func()) (remove func()) {
	ts := &toolSource{src: src, stop: stop}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if stop != nil {
			stop()
		}
		return func() {}
	}
	s.sources = append(s.sources, ts)
	s.mu.Unlock()
	ts.unwatch = src.Watch(s.refreshTools)
	s.refreshTools()
	return func() {
		s.mu.Lock()
		i := slices.Index(s.sources, ts)
		if i >= 0 {
			s.sources = slices.Delete(s.sources, i, i+1)
		}
		s.mu.Unlock()
		if i < 0 {
			return // closed with the session, or removed already
		}
		ts.unwatch()
		if ts.stop != nil {
			ts.stop()
		}
		s.refreshTools()
	}
}

// refreshTools rebuilds the session's tools from its own and its
// sources', and gives the agent the enabled ones.
func (s *Session) refreshTools() {
	// One at a time, so an older list never replaces a newer one.
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	var extra []tool.Tool
	for _, ts := range sources {
		extra = append(extra, ts.src.Tools()...)
	}
	// Config.Tools first, then the sources', then ask_user and todo,
	// which New put last.
	base := s.cfg.Tools
	s.mu.Lock()
	own := s.tools[len(s.tools)-2:]
	tools := make([]tool.Tool, 0, len(base)+len(extra)+len(own))
	tools = append(append(append(tools, base...), extra...), own...)
	same := len(tools) == len(s.tools)
	for i := 0; same && i < len(tools); i++ {
		same = tools[i].Spec().Name == s.tools[i].Spec().Name
	}
	s.tools = tools
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	// Applied even when the names are the same: a tool's description or
	// schema may have changed.
	s.applyTools()
	if !same {
		s.configChanged("tools")
	}
}

// UnavailableTools are the tool sources of the session that give no
// tools, each with its cause: an MCP server that failed to start.
func (s *Session) UnavailableTools() []tool.Unavailable {
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	out := []tool.Unavailable{}
	for _, ts := range sources {
		out = append(out, ts.src.Unavailable()...)
	}
	return out
}
