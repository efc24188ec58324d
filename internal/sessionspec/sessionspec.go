// Package sessionspec says which session to build: the spec a server
// hands to its session builder (the engine), and what makes a session a
// subagent's. It is its own package so that the server, which builds
// specs, and the engine, which builds sessions from them, need not
// import each other.
package sessionspec

import (
	"context"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Spec says which session to build.
type Spec struct {
	// Cwd is the directory the tools work in.
	Cwd string
	// SessionsDir is where the transcript is created; "" keeps it in
	// memory.
	SessionsDir string
	// Open loads this transcript instead of creating one.
	Open string
	// Tools names the built-in tools to enable; nil enables all of them,
	// an empty non-nil list none.
	Tools []string
	// Sandbox, when set, is a mode stricter than the engine's for this
	// session (a client's choice); a looser one is refused.
	Sandbox sandbox.Mode
	// Extra are tools from elsewhere (an editor's file access, MCP
	// servers). One named like an enabled built-in takes its place;
	// the others are added.
	Extra []tool.Tool
	// Mode is the mode of a session whose transcript records none ("" for
	// build); one the session's cwd does not define is refused.
	Mode string
	// Seq continues a session's event numbering (see session.Config).
	FirstSeq   uint64
	ReserveSeq func(next uint64) uint64
	// TranscriptOptions go to every transcript file of the session (see
	// session.Config): a cluster node's mirror of it in JetStream.
	TranscriptOptions []transcript.Option
	// Child says what a subagent's session is (its type, depth, parent);
	// nil for a session a client made (see ChildSpec).
	Child *ChildSpec
	// Children hosts the sessions this session's task tool starts (the
	// server lists them with the others); nil builds them here, known
	// only by their transcripts.
	Children ChildHost
}

// ChildSpec is what makes a session a subagent's.
type ChildSpec struct {
	Type *subagent.Type
	// Depth is the session's depth: 1 for a child of a session a client
	// made.
	Depth int
	// ParentFile is the parent's transcript, written as the child's
	// header's parentSession (pi's field).
	ParentFile string
	// Model and Thinking are what the child starts with.
	Model    *llm.Model
	Thinking llm.ThinkingLevel
}

// ChildHost starts a child session from spec (see Spec.Children).
type ChildHost func(ctx context.Context, spec Spec) (subagent.Child, error)
