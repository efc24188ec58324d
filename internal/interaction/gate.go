package interaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// TimeoutAction is what the gate does with a call whose approval nobody
// answered in time.
type TimeoutAction string

// The timeout actions.
const (
	// TimeoutReject does not run the call and tells the model nobody
	// answered; the default, since silence is not consent.
	TimeoutReject TimeoutAction = "reject"
	// TimeoutSkip does not run the call and tells the model it was skipped.
	TimeoutSkip TimeoutAction = "skip"
	// TimeoutApprove runs the call: "auto-confirm after N seconds" for
	// unattended sessions that still want a window to intervene.
	TimeoutApprove TimeoutAction = "approve"
)

// GateOptions configure a Gate.
type GateOptions struct {
	// Timeout bounds each approval: 0 uses the broker's default, negative
	// waits without limit.
	Timeout time.Duration
	// OnTimeout is what an unanswered approval becomes; TimeoutReject
	// when empty.
	OnTimeout TimeoutAction
}

// Outcome is how the gate decided a call, for logs and clients.
type Outcome string

// The outcomes. Allowed, Granted, Approved and Edited run the call; so
// does TimedOut under TimeoutApprove.
const (
	OutcomeAllowed   Outcome = "allowed"   // the policy allows it
	OutcomeGranted   Outcome = "granted"   // an earlier approve_next or always covers it
	OutcomeApproved  Outcome = "approved"  // a person approved it
	OutcomeEdited    Outcome = "edited"    // a person approved it with other arguments
	OutcomeDenied    Outcome = "denied"    // the policy denies it; nobody was asked
	OutcomeSkipped   Outcome = "skipped"   // a person skipped it
	OutcomeRejected  Outcome = "rejected"  // a person rejected or dismissed it
	OutcomeTimedOut  Outcome = "timed_out" // nobody answered in time
	OutcomeCancelled Outcome = "cancelled" // the wait was cancelled (abort, session closed)
)

// Decision is the gate's answer for one call.
type Decision struct {
	// Run says whether to execute the tool.
	Run bool
	// Args are the arguments to run with: the model's, or a person's edit.
	Args json.RawMessage
	// Result is what the model sees instead of running the tool; set
	// exactly when Run is false.
	Result  *tool.Result
	Outcome Outcome
}

// ApprovalDetails are the Details of a Decision.Result, for clients.
type ApprovalDetails struct {
	Outcome  Outcome `json:"outcome"`
	Feedback string  `json:"feedback,omitempty"`
	Reason   string  `json:"reason,omitempty"`
}

// Grants are the approvals a session has given in advance.
type Grants struct {
	// Next is how many more calls that would ask run without asking.
	Next int `json:"next,omitempty"`
	// AllTools runs every call that would ask without asking.
	AllTools bool `json:"allTools,omitempty"`
	// Tools run without asking, sorted.
	Tools []string `json:"tools,omitempty"`
}

// Gate decides whether each tool call runs: the policy first (allow and
// deny never ask), then the session's grants, then a person through the
// broker. It is safe for concurrent use; parallel tool calls may each have
// an approval pending at once.
//
// Grants never override a deny: they stand for "stop asking me", and a
// deny rule is not a question.
type Gate struct {
	broker *Broker
	env    tool.Env
	opts   GateOptions

	mu       sync.Mutex
	policy   Policy
	next     int
	allTools bool
	tools    map[string]bool
	// waiters are the calls blocked in Ask, oldest first, so that a grant
	// given on one of them can release the others it covers.
	waiters []*waiter
}

type waiter struct {
	tool    string
	cancel  context.CancelCauseFunc
	granted bool
	byCount bool
	// fixed: a parked approval, which only a person's answer settles.
	fixed bool
}

// errGranted cancels an approval that a grant given meanwhile made moot.
var errGranted = errors.New("covered by an approval given for another call")

// NewGate returns a gate asking through broker. The policy is validated.
// env is the environment the session's tools were built with: path rules
// are matched against the file a call would open, resolved from its Cwd
// and Home as the tools resolve it (see Rule).
func NewGate(policy Policy, broker *Broker, env tool.Env, opts GateOptions) (*Gate, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	switch opts.OnTimeout {
	case "":
		opts.OnTimeout = TimeoutReject
	case TimeoutReject, TimeoutSkip, TimeoutApprove:
	default:
		return nil, fmt.Errorf("interaction: unknown timeout action %q (want reject, skip or approve)", opts.OnTimeout)
	}
	// Only what path resolution reads: the gate has no use for the rest.
	env = tool.Env{Cwd: env.Cwd, Home: env.Home}
	return &Gate{broker: broker, env: env, opts: opts, policy: policy, tools: make(map[string]bool)}, nil
}

// SetPolicy replaces the policy for calls checked from now on.
func (g *Gate) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	g.mu.Lock()
	g.policy = p
	g.mu.Unlock()
	return nil
}

// Grants returns the session's current grants.
func (g *Gate) Grants() Grants {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := Grants{Next: g.next, AllTools: g.allTools}
	for name := range g.tools {
		gr.Tools = append(gr.Tools, name)
	}
	sort.Strings(gr.Tools)
	return gr
}

// SetGrants replaces the session's grants: restoring a session, a client's
// auto-approve switch (AllTools), or revoking everything (Grants{}).
// Approvals already pending are not released by it.
func (g *Gate) SetGrants(gr Grants) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setLocked(gr)
}

// Grant replaces the session's grants as SetGrants does, and releases the
// pending approvals they cover, as an answer's grant does: a person who
// says "confirm the next 5" while one call waits means that one too.
func (g *Gate) Grant(gr Grants) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setLocked(gr)
	g.releaseLocked()
}

func (g *Gate) setLocked(gr Grants) {
	g.next = max(gr.Next, 0)
	g.allTools = gr.AllTools
	g.tools = make(map[string]bool, len(gr.Tools))
	for _, name := range gr.Tools {
		g.tools[name] = true
	}
}

// CheckOptions adjust one Check.
type CheckOptions struct {
	// ID is the approval's request id; "" lets the broker choose one.
	// When it names a parked request (Broker.Park: an approval a restart
	// interrupted), the check is that request's: only a person's answer
	// to it (or a deny rule) decides, not the policy's allow and not a
	// grant given before.
	ID string
	// Ask puts the call to a person even when the policy allows it (a
	// face where every call is confirmed); a grant still covers it and a
	// deny rule still denies it.
	Ask bool
	// Approved runs the call without asking, as a grant would, unless the
	// policy denies it: the caller approved it in advance (a step that
	// auto-confirms its calls).
	Approved bool
}

// Check decides call, asking a person when the policy says ask and no
// grant covers it. It blocks while the approval is pending; cancelling ctx
// (an abort) ends the wait with OutcomeCancelled.
func (g *Gate) Check(ctx context.Context, call tool.Call) Decision {
	return g.CheckWith(ctx, call, CheckOptions{})
}

// CheckWith is Check adjusted by opts.
func (g *Gate) CheckWith(ctx context.Context, call tool.Call, opts CheckOptions) Decision {
	g.mu.Lock()
	policy := g.policy
	g.mu.Unlock()
	parked := opts.ID != "" && g.broker.Parked(opts.ID)
	action, rule := policy.Evaluate(g.env, call)
	if action == ActionDeny {
		reason := denyReason(call, rule)
		if parked {
			// Nobody needs to answer it any more.
			_ = g.broker.CancelWith(opts.ID, "denied by policy: "+reason)
			g.broker.Forget(opts.ID)
		}
		return refuse(OutcomeDenied, "Tool call denied by policy: "+reason, ApprovalDetails{Outcome: OutcomeDenied, Reason: reason})
	}
	if !parked {
		switch {
		case opts.Approved:
			return Decision{Run: true, Args: call.Args, Outcome: OutcomeGranted}
		case action == ActionAllow && !opts.Ask:
			return Decision{Run: true, Args: call.Args, Outcome: OutcomeAllowed}
		}
	}
	g.mu.Lock()
	if !parked {
		if ok, _ := g.coverLocked(call.Name); ok {
			g.mu.Unlock()
			return Decision{Run: true, Args: call.Args, Outcome: OutcomeGranted}
		}
	}
	askCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &waiter{tool: call.Name, cancel: cancel, fixed: parked}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	resp, err := g.broker.Ask(askCtx, g.ApprovalRequest(call, opts.ID))

	g.mu.Lock()
	g.waiters = slices.DeleteFunc(g.waiters, func(x *waiter) bool { return x == w })
	granted := w.granted
	if granted && err == nil {
		// The person's answer reached the broker before the grant's
		// cancellation did: the answer decides, and a count the grant
		// spent on this call goes back for the next one.
		granted = false
		if w.byCount {
			g.next++
		}
	}
	if err == nil {
		g.grantLocked(call.Name, resp)
	}
	g.mu.Unlock()

	if granted {
		return Decision{Run: true, Args: call.Args, Outcome: OutcomeGranted}
	}
	if err != nil {
		return g.failed(call, err)
	}
	return decide(call, resp)
}

// ApprovalRequest is the request the gate puts to a person for call, under
// id ("" for one the broker chooses); Park it to have a person decide a
// call whose wait a restart interrupted.
func (g *Gate) ApprovalRequest(call tool.Call, id string) Request {
	return Request{
		ID:      id,
		Kind:    KindApproval,
		Title:   "Allow " + call.Name + "?",
		Message: g.describe(call),
		Tool:    &ToolApproval{ToolCallID: call.ID, ToolName: call.Name, Args: call.Args},
		Timeout: g.opts.Timeout,
	}
}

// coverLocked reports whether a grant covers a call of toolName, spending
// one approve_next count when that is what covers it.
func (g *Gate) coverLocked(toolName string) (ok, byCount bool) {
	if g.allTools || g.tools[toolName] {
		return true, false
	}
	if g.next > 0 {
		g.next--
		return true, true
	}
	return false, false
}

// grantLocked records the grant in resp, if any, and releases the pending
// approvals it covers: a person who says "always allow bash" on one of
// three parallel bash calls means the other two as well.
func (g *Gate) grantLocked(toolName string, resp Response) {
	switch resp.Verdict {
	case VerdictAlways:
		if resp.AllTools {
			g.allTools = true
		} else {
			g.tools[toolName] = true
		}
	case VerdictApproveNext:
		g.next += resp.Count
	default:
		return
	}
	g.releaseLocked()
}

// releaseLocked ends the waits of pending approvals a grant now covers.
func (g *Gate) releaseLocked() {
	for _, w := range g.waiters {
		if w.granted || w.fixed {
			continue
		}
		ok, byCount := g.coverLocked(w.tool)
		if !ok {
			continue
		}
		w.granted, w.byCount = true, byCount
		w.cancel(errGranted)
	}
}

// describe is the call's key argument for the person asked; for a file
// tool, with the file it would really open when that is not what the
// model wrote, so nobody approves "link/x" without seeing it is /prot/x.
func (g *Gate) describe(call tool.Call) string {
	text := KeyArgumentValue(call)
	if keyArgument[call.Name] != "path" {
		return text
	}
	forms := (&subject{env: g.env, call: call}).pathForms()
	if len(forms) == 0 {
		return text
	}
	switch real := forms[len(forms)-1]; {
	case real == text:
		return text
	case text == "":
		return real
	default:
		return text + " → " + real
	}
}

func (g *Gate) failed(call tool.Call, err error) Decision {
	if errors.Is(err, ErrTimeout) {
		switch g.opts.OnTimeout {
		case TimeoutApprove:
			return Decision{Run: true, Args: call.Args, Outcome: OutcomeTimedOut}
		case TimeoutSkip:
			return refuse(OutcomeTimedOut, "Tool call skipped: no answer before the approval timed out", ApprovalDetails{Outcome: OutcomeTimedOut})
		}
		return refuse(OutcomeTimedOut, "No answer before the approval timed out; the tool call was not run", ApprovalDetails{Outcome: OutcomeTimedOut})
	}
	reason := err.Error()
	var ce *CancelledError
	if errors.As(err, &ce) && ce.Reason != "" {
		reason = ce.Reason
	}
	return refuse(OutcomeCancelled, "Tool call cancelled before it was approved: "+reason, ApprovalDetails{Outcome: OutcomeCancelled, Reason: reason})
}

func decide(call tool.Call, resp Response) Decision {
	if resp.Cancelled {
		return refuse(OutcomeRejected, "The user rejected this tool call", ApprovalDetails{Outcome: OutcomeRejected})
	}
	switch resp.Verdict {
	case VerdictEdit:
		return Decision{Run: true, Args: resp.Args, Outcome: OutcomeEdited}
	case VerdictSkip:
		return refuse(OutcomeSkipped, "Tool call skipped by the user", ApprovalDetails{Outcome: OutcomeSkipped})
	case VerdictReject:
		text := "The user rejected this tool call"
		if resp.Feedback != "" {
			text += ": " + resp.Feedback
		}
		return refuse(OutcomeRejected, text, ApprovalDetails{Outcome: OutcomeRejected, Feedback: resp.Feedback})
	}
	return Decision{Run: true, Args: call.Args, Outcome: OutcomeApproved}
}

// NotRunResult is what the model sees for a tool call that waited for a
// person and did not run because the wait ended for reason (an abort, the
// conversation moving on): the result of a cancelled approval.
func NotRunResult(reason string) tool.Result {
	return *refuse(OutcomeCancelled, "Tool call cancelled before it was approved: "+reason, ApprovalDetails{Outcome: OutcomeCancelled, Reason: reason}).Result
}

func refuse(o Outcome, text string, details ApprovalDetails) Decision {
	return Decision{Outcome: o, Result: &tool.Result{
		Content: []llm.Content{llm.Text(text)},
		Details: details,
		// An error result: the call did not do what the model asked, and
		// models reliably read is_error as "change course".
		IsError: true,
	}}
}

func denyReason(call tool.Call, rule *Rule) string {
	switch {
	case rule != nil && rule.Reason != "":
		return rule.Reason
	case rule != nil && rule.Match != "":
		return fmt.Sprintf("%s calls matching %q are not allowed", call.Name, rule.Match)
	}
	return call.Name + " is not allowed"
}
