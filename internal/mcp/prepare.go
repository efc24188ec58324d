package mcp

import "context"

// Prepare waits, for a Set of OpenBackground, until the start under way
// is over (each server ready or failed, a server that never answers
// given up on after the start timeout) or ctx ends, and returns at once
// when it is over or the Set was opened otherwise. A session whose run
// is starting prepares its sources (session.Preparer): a prompt sent
// right after agentd serve came up then runs with the tools of the
// servers still starting, as the user who configured them expects,
// rather than the model being told "Tool x not found" for a server that
// is ready a moment later. The watchers were told of the tools before
// Prepare returns: startBackground notifies before the start counts as
// over.
func (set *Set) Prepare(ctx context.Context) {
	if set.background == nil {
		return
	}
	select {
	case <-set.background:
	case <-ctx.Done():
	}
}
