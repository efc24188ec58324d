package interaction

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/tool"
)

// askAll is a policy that asks for every call.
var askAll = Policy{Default: ActionAsk}

func newGate(t *testing.T, p Policy, bo BrokerOptions, opts GateOptions) (*Gate, *Broker) {
	t.Helper()
	b := NewBroker(bo)
	g, err := NewGate(p, b, tool.Env{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g, b
}

// check runs Check on its own goroutine and waits until it blocks or
// returns. Inside a synctest bubble only.
func check(ctx context.Context, g *Gate, c tool.Call) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() { ch <- g.Check(ctx, c) }()
	synctest.Wait()
	return ch
}

func resultText(d Decision) string {
	if d.Result == nil {
		return ""
	}
	return d.Result.Content[0].Text
}

func TestGateDecisions(t *testing.T) {
	bashLS := call("bash", `{"command":"ls"}`)
	tests := []struct {
		name        string
		answers     []Response // answered in turn; all but the last must be refused
		wantRun     bool
		wantArgs    string
		wantOutcome Outcome
		wantText    string
	}{
		{"approve", []Response{{Verdict: VerdictApprove}}, true, `{"command":"ls"}`, OutcomeApproved, ""},
		{"edit", []Response{{Verdict: VerdictEdit, Args: json.RawMessage(`{"command": "ls -la"}`)}}, true, `{"command":"ls -la"}`, OutcomeEdited, ""},
		{"edit with invalid args, then valid", []Response{
			{Verdict: VerdictEdit, Args: json.RawMessage(`ls -la`)},
			{Verdict: VerdictEdit, Args: json.RawMessage(`[]`)},
			{Verdict: VerdictEdit, Args: json.RawMessage(`{"command":"pwd"}`)},
		}, true, `{"command":"pwd"}`, OutcomeEdited, ""},
		{"skip", []Response{{Verdict: VerdictSkip}}, false, "", OutcomeSkipped, "Tool call skipped by the user"},
		{"reject with feedback", []Response{{Verdict: VerdictReject, Feedback: "use rg, not grep"}}, false, "", OutcomeRejected,
			"The user rejected this tool call: use rg, not grep"},
		{"reject without feedback", []Response{{Verdict: VerdictReject}}, false, "", OutcomeRejected, "The user rejected this tool call"},
		{"dismissed", []Response{{Cancelled: true}}, false, "", OutcomeRejected, "The user rejected this tool call"},
		{"approve next", []Response{{Verdict: VerdictApproveNext, Count: 2}}, true, `{"command":"ls"}`, OutcomeApproved, ""},
		{"always", []Response{{Verdict: VerdictAlways}}, true, `{"command":"ls"}`, OutcomeApproved, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
				done := check(t.Context(), g, bashLS)
				req := onlyPending(t, b)
				if req.Kind != KindApproval || req.Title != "Allow bash?" || req.Message != "ls" ||
					req.Tool.ToolCallID != "call_bash" || string(req.Tool.Args) != `{"command":"ls"}` {
					t.Errorf("approval request = %+v, tool %+v", req, req.Tool)
				}
				for i, a := range tt.answers {
					err := b.Answer(req.ID, a)
					if last := i == len(tt.answers)-1; last != (err == nil) {
						t.Fatalf("answer %d (%+v): %v", i, a, err)
					}
				}
				d := <-done
				if d.Run != tt.wantRun || d.Outcome != tt.wantOutcome || string(d.Args) != tt.wantArgs {
					t.Errorf("decision run=%v outcome=%s args=%s, want run=%v outcome=%s args=%s",
						d.Run, d.Outcome, d.Args, tt.wantRun, tt.wantOutcome, tt.wantArgs)
				}
				if d.Run != (d.Result == nil) {
					t.Errorf("run=%v with result %+v", d.Run, d.Result)
				}
				if got := resultText(d); got != tt.wantText {
					t.Errorf("result text %q, want %q", got, tt.wantText)
				}
				if d.Result != nil && !d.Result.IsError {
					t.Error("a call that did not run is not an error result")
				}
			})
		})
	}
}

func TestGatePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"rules": [
		{"tool": "read", "action": "allow"},
		{"tool": "bash", "match": "git status*", "action": "allow"},
		{"tool": "bash", "match": "rm *", "action": "deny"},
		{"tool": "bash", "match": "curl *", "action": "deny", "reason": "no network from here"},
		{"tool": "write", "match": "/etc/*", "action": "deny"},
		{"tool": "*", "match": "*secret*", "action": "ask"},
		{"tool": "ed*", "action": "ask"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		call    tool.Call
		asks    bool
		outcome Outcome
		text    string
	}{
		{"allow by rule", call("read", `{"path":"secret.txt"}`), false, OutcomeAllowed, ""},
		{"allow by command glob", call("bash", `{"command":"git status"}`), false, OutcomeAllowed, ""},
		{"deny by command glob", call("bash", `{"command":"rm -rf build"}`), false, OutcomeDenied,
			`Tool call denied by policy: bash calls matching "rm *" are not allowed`},
		{"deny with reason", call("bash", `{"command":"curl example.com"}`), false, OutcomeDenied,
			"Tool call denied by policy: no network from here"},
		{"deny by path glob", call("write", `{"path":"/etc/hosts","content":""}`), false, OutcomeDenied,
			`Tool call denied by policy: write calls matching "/etc/*" are not allowed`},
		{"ask by key-argument glob on any tool", call("write", `{"path":"my-secret.env"}`), true, OutcomeApproved, ""},
		{"ask by tool glob", call("edit", `{"path":"main.go"}`), true, OutcomeApproved, ""},
		{"default allows", call("bash", `{"command":"make"}`), false, OutcomeAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var events []Event
				g, b := newGate(t, p, BrokerOptions{OnEvent: func(e Event) { events = append(events, e) }}, GateOptions{})
				done := check(t.Context(), g, tt.call)
				if pending := b.Pending(); (len(pending) == 1) != tt.asks {
					t.Fatalf("pending = %v, asks = %v", pending, tt.asks)
				}
				if tt.asks {
					if err := b.Answer(b.Pending()[0].ID, Response{Verdict: VerdictApprove}); err != nil {
						t.Fatal(err)
					}
				} else if len(events) != 0 {
					t.Errorf("asked anyway: %v", events)
				}
				d := <-done
				if d.Outcome != tt.outcome || resultText(d) != tt.text {
					t.Errorf("decision %s %q, want %s %q", d.Outcome, resultText(d), tt.outcome, tt.text)
				}
				if tt.outcome == OutcomeDenied {
					det, _ := d.Result.Details.(ApprovalDetails)
					if det.Outcome != OutcomeDenied || det.Reason == "" {
						t.Errorf("details = %+v", d.Result.Details)
					}
				}
			})
		})
	}
}

func TestGateDefaultDenyNeverAsks(t *testing.T) {
	g, b := newGate(t, Policy{Default: ActionDeny}, BrokerOptions{}, GateOptions{})
	g.SetGrants(Grants{AllTools: true, Next: 5}) // grants do not lift a deny
	d := g.Check(t.Context(), call("bash", `{"command":"ls"}`))
	if d.Run || resultText(d) != "Tool call denied by policy: bash is not allowed" || len(b.Pending()) != 0 {
		t.Errorf("decision %+v %q", d, resultText(d))
	}
	if g.Grants().Next != 5 {
		t.Error("a denied call spent a grant")
	}
}

// answerNext answers the only pending approval.
func answerNext(t *testing.T, b *Broker, resp Response) {
	t.Helper()
	if err := b.Answer(onlyPending(t, b).ID, resp); err != nil {
		t.Fatal(err)
	}
}

func TestGateApproveNextCountsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
		done := check(t.Context(), g, call("bash", `{"command":"a"}`))
		answerNext(t, b, Response{Verdict: VerdictApproveNext, Count: 2})
		if d := <-done; d.Outcome != OutcomeApproved {
			t.Fatalf("first call: %s", d.Outcome)
		}
		for i, name := range []string{"read", "bash"} {
			if n := g.Grants().Next; n != 2-i {
				t.Errorf("before call %d: next = %d, want %d", i+2, n, 2-i)
			}
			d := g.Check(t.Context(), call(name, `{}`)) // would block if it asked
			if d.Outcome != OutcomeGranted || !d.Run {
				t.Errorf("call %d: %s", i+2, d.Outcome)
			}
		}
		if n := g.Grants().Next; n != 0 {
			t.Errorf("next = %d after spending it", n)
		}
		done = check(t.Context(), g, call("bash", `{"command":"d"}`))
		if len(b.Pending()) != 1 {
			t.Fatal("the call after the count did not ask")
		}
		answerNext(t, b, Response{Verdict: VerdictSkip})
		<-done
	})
}

func TestGateAlways(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
		done := check(t.Context(), g, call("bash", `{"command":"a"}`))
		answerNext(t, b, Response{Verdict: VerdictAlways})
		<-done
		if d := g.Check(t.Context(), call("bash", `{"command":"b"}`)); d.Outcome != OutcomeGranted {
			t.Errorf("bash after always: %s", d.Outcome)
		}
		if gr := g.Grants(); !reflect.DeepEqual(gr, Grants{Tools: []string{"bash"}}) {
			t.Errorf("grants = %+v", gr)
		}
		// Scoped to the tool: another tool still asks.
		done = check(t.Context(), g, call("write", `{"path":"x"}`))
		answerNext(t, b, Response{Verdict: VerdictAlways, AllTools: true})
		<-done
		for _, name := range []string{"write", "edit", "anything"} {
			if d := g.Check(t.Context(), call(name, `{}`)); d.Outcome != OutcomeGranted {
				t.Errorf("%s after always for all tools: %s", name, d.Outcome)
			}
		}
		g.SetGrants(Grants{})
		done = check(t.Context(), g, call("bash", `{}`))
		if len(b.Pending()) != 1 {
			t.Fatal("revoked grants still apply")
		}
		answerNext(t, b, Response{Verdict: VerdictApprove})
		<-done
	})
}

func TestGateTimeout(t *testing.T) {
	tests := []struct {
		on      TimeoutAction
		run     bool
		outcome Outcome
		text    string
	}{
		{"", false, OutcomeTimedOut, "No answer before the approval timed out; the tool call was not run"},
		{TimeoutReject, false, OutcomeTimedOut, "No answer before the approval timed out; the tool call was not run"},
		{TimeoutSkip, false, OutcomeTimedOut, "Tool call skipped: no answer before the approval timed out"},
		{TimeoutApprove, true, OutcomeTimedOut, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.on), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The gate's own timeout wins over the broker's default.
				g, b := newGate(t, askAll, BrokerOptions{Timeout: time.Hour}, GateOptions{Timeout: time.Minute, OnTimeout: tt.on})
				start := time.Now()
				d := g.Check(t.Context(), call("bash", `{"command":"ls"}`))
				if time.Since(start) != time.Minute {
					t.Errorf("waited %v", time.Since(start))
				}
				if d.Run != tt.run || d.Outcome != tt.outcome || resultText(d) != tt.text {
					t.Errorf("decision run=%v %s %q", d.Run, d.Outcome, resultText(d))
				}
				if len(b.Pending()) != 0 {
					t.Error("timed-out approval still pending")
				}
			})
		})
	}
	if _, err := NewGate(askAll, NewBroker(BrokerOptions{}), tool.Env{}, GateOptions{OnTimeout: "ignore"}); err == nil {
		t.Error("unknown timeout action accepted")
	}
}

func TestGateCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		done := check(ctx, g, call("bash", `{}`))
		cancel()
		d := <-done
		if d.Run || d.Outcome != OutcomeCancelled || resultText(d) != "Tool call cancelled before it was approved: context canceled" {
			t.Errorf("ctx cancel: %s %q", d.Outcome, resultText(d))
		}

		a := check(t.Context(), g, call("bash", `{}`))
		c := check(t.Context(), g, call("read", `{}`))
		b.CancelAll("the run was aborted")
		for _, ch := range []<-chan Decision{a, c} {
			d := <-ch
			if d.Outcome != OutcomeCancelled || resultText(d) != "Tool call cancelled before it was approved: the run was aborted" {
				t.Errorf("CancelAll: %s %q", d.Outcome, resultText(d))
			}
		}
	})
}

// Parallel tool calls: a grant given on one pending approval releases the
// others it covers, and only those.
func TestGateGrantReleasesPendingApprovals(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var resolved []ResolvedBy
			g, b := newGate(t, askAll, BrokerOptions{OnEvent: func(e Event) {
				if e.Type == EventResolved {
					mu.Lock()
					resolved = append(resolved, e.Resolution.By)
					mu.Unlock()
				}
			}}, GateOptions{})
			b1 := check(t.Context(), g, call("bash", `{"command":"1"}`))
			b2 := check(t.Context(), g, call("bash", `{"command":"2"}`))
			r := check(t.Context(), g, call("read", `{"path":"x"}`))
			b3 := check(t.Context(), g, call("bash", `{"command":"3"}`))
			if len(b.Pending()) != 4 {
				t.Fatalf("pending = %d", len(b.Pending()))
			}
			if err := b.Answer(b.Pending()[1].ID, Response{Verdict: VerdictAlways}); err != nil {
				t.Fatal(err)
			}
			if d := <-b2; d.Outcome != OutcomeApproved {
				t.Errorf("answered call: %s", d.Outcome)
			}
			for i, ch := range []<-chan Decision{b1, b3} {
				if d := <-ch; d.Outcome != OutcomeGranted || !d.Run {
					t.Errorf("other bash call %d: %s", i, d.Outcome)
				}
			}
			p := onlyPending(t, b)
			if p.Tool.ToolName != "read" {
				t.Errorf("left pending: %s", p.Tool.ToolName)
			}
			answerNext(t, b, Response{Verdict: VerdictReject})
			<-r
			mu.Lock()
			defer mu.Unlock()
			want := []ResolvedBy{ResolvedAnswered, ResolvedCancelled, ResolvedCancelled, ResolvedAnswered}
			if !reflect.DeepEqual(resolved, want) {
				t.Errorf("resolutions %v, want %v", resolved, want)
			}
		})
	})
	t.Run("approve next", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
			var dones []<-chan Decision
			for range 4 {
				dones = append(dones, check(t.Context(), g, call("bash", `{}`)))
			}
			// Approve the first and one more: the oldest other one runs.
			if err := b.Answer(b.Pending()[0].ID, Response{Verdict: VerdictApproveNext, Count: 1}); err != nil {
				t.Fatal(err)
			}
			if d := <-dones[0]; d.Outcome != OutcomeApproved {
				t.Errorf("answered: %s", d.Outcome)
			}
			if d := <-dones[1]; d.Outcome != OutcomeGranted {
				t.Errorf("next: %s", d.Outcome)
			}
			if n := len(b.Pending()); n != 2 || g.Grants().Next != 0 {
				t.Errorf("pending %d, next %d: want 2 and 0", n, g.Grants().Next)
			}
			b.CancelAll("done")
			<-dones[2]
			<-dones[3]
		})
	})
}

// Many calls checked at once, answered by several clients at once, under
// the race detector.
func TestGateConcurrent(t *testing.T) {
	g, b := newGate(t, askAll, BrokerOptions{OnEvent: func(e Event) {}}, GateOptions{})
	stop := make(chan struct{})
	var answerers sync.WaitGroup
	for range 3 {
		answerers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, r := range b.Pending() {
					err := b.Answer(r.ID, Response{Verdict: VerdictApprove})
					if err != nil && !errors.Is(err, ErrAlreadyResolved) && !errors.Is(err, ErrNotFound) {
						t.Error(err)
					}
				}
				time.Sleep(time.Microsecond)
			}
		})
	}
	var calls sync.WaitGroup
	for range 50 {
		calls.Go(func() {
			if d := g.Check(t.Context(), call("bash", `{}`)); !d.Run {
				t.Errorf("not run: %s", d.Outcome)
			}
		})
	}
	calls.Wait()
	close(stop)
	answerers.Wait()
}

func TestGateSetPolicy(t *testing.T) {
	g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
	if err := g.SetPolicy(Policy{Rules: []Rule{{Tool: "bash", Action: "never"}}}); err == nil {
		t.Error("invalid policy accepted")
	}
	if err := g.SetPolicy(Policy{Rules: []Rule{{Tool: "bash", Action: ActionDeny}}}); err != nil {
		t.Fatal(err)
	}
	if d := g.Check(t.Context(), call("bash", `{}`)); d.Outcome != OutcomeDenied {
		t.Errorf("bash: %s", d.Outcome)
	}
	if d := g.Check(t.Context(), call("read", `{}`)); d.Outcome != OutcomeAllowed || len(b.Pending()) != 0 {
		t.Errorf("read: %s", d.Outcome)
	}
	if _, err := NewGate(Policy{Default: "sometimes"}, b, tool.Env{}, GateOptions{}); err == nil {
		t.Error("NewGate accepted an invalid policy")
	}
}
