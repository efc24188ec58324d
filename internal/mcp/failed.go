package mcp

import "github.com/agentd-dev/agentd/internal/tool"

// Failed names the servers that failed to start, each with its cause;
// unlike Unavailable it leaves out those still starting, so an owner
// that reports failures as they happen (agentd serve's health) says
// each only once it is so.
func (set *Set) Failed() []tool.Unavailable {
	set.mu.Lock()
	defer set.mu.Unlock()
	var out []tool.Unavailable
	for _, s := range set.servers {
		if s.startErr != nil {
			out = append(out, tool.Unavailable{Source: "mcp:" + s.cfg.Name, Error: s.startErr.Error()})
		}
	}
	return out
}
