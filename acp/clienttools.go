package acp

import "github.com/agentd-dev/agentd/tool"

// clientTools are the tools that go through the editor when it offers
// them; none yet.
func (ss *acpSession) clientTools(caps clientCapabilities) []tool.Tool { return nil }
