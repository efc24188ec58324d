package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// asker is the part of a session escalations use.
type asker interface {
	Ask(ctx context.Context, r interaction.Request) (interaction.Response, error)
}

// escalations puts a session's sandbox escalations to its people as
// tool approvals, so every face shows them as it shows any approval. The
// tools are built before the session that asks exists, hence bind.
type escalations struct {
	log *slog.Logger

	mu sync.Mutex
	s  asker
}

func (x *escalations) bind(s asker) {
	x.mu.Lock()
	x.s = s
	x.mu.Unlock()
}

var errNoSession = errors.New("no session to ask")

func (x *escalations) ask(ctx context.Context, r sandbox.Request) (sandbox.Answer, error) {
	x.mu.Lock()
	s := x.s
	x.mu.Unlock()
	if s == nil {
		return sandbox.Deny, errNoSession
	}
	resp, err := s.Ask(ctx, EscalationRequest(r))
	answer := sandbox.Deny
	switch {
	case err != nil, resp.Cancelled:
	case resp.Verdict == interaction.VerdictApprove, resp.Verdict == interaction.VerdictApproveNext:
		answer = sandbox.Once
	case resp.Verdict == interaction.VerdictAlways:
		answer = sandbox.Always
	}
	x.log.Info("sandbox escalation", "tool", r.ToolName, "need", r.Need.Describe(r.Policy), "mode", r.Policy.Mode,
		"answer", answerNames[answer], "err", err)
	return answer, err
}

var answerNames = map[sandbox.Answer]string{sandbox.Deny: "deny", sandbox.Once: "once", sandbox.Always: "always"}

// EscalationRequest is the approval a person sees for a command the
// sandbox refused: approve reruns it once with the access it needs,
// always gives that access for the rest of the session, reject or skip
// leaves it refused.
func EscalationRequest(r sandbox.Request) interaction.Request {
	var b strings.Builder
	fmt.Fprintf(&b, "The sandbox (%s) refused this command:\n\n%s\n", r.Policy.Describe(), r.Command)
	if out := strings.TrimSpace(r.Output); out != "" {
		fmt.Fprintf(&b, "\nIt printed:\n%s\n", out)
	}
	// The rerun starts the command from the beginning: whatever it did
	// before the refusal (files it wrote, requests it sent) it does a
	// second time, which the person must know before approving.
	fmt.Fprintf(&b, "\nAllow it to %s? Approve runs the whole command again, from the start, with that access and no other: what it did before it was refused happens a second time. Always also allows that for the rest of this session; reject leaves it refused.", r.Need.Describe(r.Policy))
	return interaction.Request{
		Kind:    interaction.KindApproval,
		Title:   r.ToolName + " wants to " + r.Need.Describe(r.Policy) + " (approving runs the command again)",
		Message: b.String(),
		Tool:    &interaction.ToolApproval{ToolCallID: r.ToolCallID, ToolName: r.ToolName, Args: r.Args},
	}
}
