package acp

// reportUnavailable tells the editor of each MCP server of the session
// that failed to start, and why, as a message of the agent's: the ACP
// spec has no notification of its own for it, and a server the user
// configured that gives no tools must not go unnoticed. (Its stderr is
// in agentd's log, never here.)
func (ss *acpSession) reportUnavailable() {
	failed := ss.remoteUnavailable
	if ss.local != nil {
		failed = ss.local.UnavailableTools()
	}
	for _, u := range failed {
		ss.update(chunkUpdate{SessionUpdate: "agent_message_chunk",
			Content: contentBlock{Type: "text", Text: "agentd: " + u.Error + ". Its tools are not available in this session.\n\n"}})
	}
}
