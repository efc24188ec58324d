package config

// FlagGroup is one heading of `agentd serve -h` and the flags under it,
// by name, in the order shown.
type FlagGroup struct {
	Title string
	Names []string
}

// ServeFlagGroups sorts serve's flags for its help, which as one
// alphabetical list of well over a hundred was of no use to a person
// looking for "how do I set the port". A flag named in no group is shown
// under the last one, so a new flag is never hidden; the cli tests check
// that every name here is a flag serve has, and that every flag serve has
// is named here (so a new flag gets its heading, not "other").
func ServeFlagGroups() []FlagGroup {
	return []FlagGroup{
		{"Network", []string{"host", "port", "stdio", "allowed-host", "allow-origin", "session-ws",
			"heartbeat", "ws-heartbeat", "ws-progress-interval"}},
		{"Authentication", []string{"token", "auth-command", "jwt-secret-file", "jwt-keys", "jwt-issuer", "jwt-audience"}},
		{"Sessions and models", []string{"model", "policy", "stream-format", "sessions-dir", "allow-session-dir",
			"approval-timeout", "ui-timeout", "rest-session-idle", "max-turns", "max-tool-failures", "bash-timeout"}},
		{"Context files, skills, prompt templates and subagents", []string{"no-context-files", "nc",
			"no-skills", "no-prompt-templates", "no-subagents"}},
		{"Limits", []string{"max-sessions", "max-connections", "max-frame-bytes", "rate-limit", "global-rate-limit",
			"control-rate-limit", "max-pending", "max-queued-bytes", "max-queued-bytes-total", "max-queued-messages",
			"max-queued-message-bytes", "command-timeout", "ws-max-connections-per-subject", "ws-message-rate",
			"ws-max-message-bytes", "ws-max-queued-bytes", "rest-max-streams-per-subject", "tool-max-procs", "tool-max-memory", "tool-cpu-time"}},
		{"Sandbox (what the model's tools may touch)", []string{"sandbox", "sandbox-network", "sandbox-allow-write",
			"sandbox-fallback", "sandbox-env-allow", "sandbox-hide"}},
		{"Cluster", []string{"cluster", "cluster-listen", "node-id", "cluster-lease-ttl", "cluster-spread",
			"cluster-replicas", "cluster-route-listen", "cluster-routes", "cluster-key", "cluster-tls-cert", "cluster-tls-key", "cluster-tls-ca", "nats-user", "nats-password-file",
			"nats-token-file", "nats-nkey", "nats-creds", "nats-tls-ca", "nats-tls-cert", "nats-tls-key"}},
		{"MCP servers", []string{"mcp-config", "mcp-start-timeout", "mcp-call-timeout"}},
		{"Configuration and logging", []string{"config-dir", "data-dir", "pi-models", "log-level", "log-format",
			"stream-idle-timeout"}},
		{"Performance and other", []string{"gc-percent", "memory-limit", "pprof-addr", "event-log-size",
			"event-log-bytes", "shutdown-timeout", "dependency-timeout", "idempotency-ttl"}},
	}
}
