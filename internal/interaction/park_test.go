package interaction

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/tool"
)

func TestStableIDs(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"anthropic", ApprovalID("toolu_01AbC"), "tool-toolu_01AbC"},
		{"openai responses", ApprovalID("call_1|fc_2"), "tool-call_1_fc_2"},
		{"separators and NUL", ApprovalID("a/b\x00c d"), "tool-a_b_c_d"},
		{"unicode", ApprovalID("é"), "tool-__"},
		{"question", QuestionID("call:7"), "ask-call:7"},
		{"long", ApprovalID(strings.Repeat("x", 500)), "tool-" + strings.Repeat("x", maxIDLen-16-5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
			if !validID(tt.got) {
				t.Errorf("%q is not a valid id", tt.got)
			}
		})
	}
}

func TestCallerIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBroker(BrokerOptions{Remember: 2})
		// An id is kept; a second request under it gets a suffix.
		first := ask(t.Context(), b, Request{ID: "tool-x", Kind: KindConfirm, Title: "1?"})
		second := ask(t.Context(), b, Request{ID: "tool-x", Kind: KindConfirm, Title: "2?"})
		p := b.Pending()
		if len(p) != 2 || p[0].ID != "tool-x" || p[1].ID != "tool-x.2" {
			t.Fatalf("pending %+v", p)
		}
		for _, id := range []string{"tool-x", "tool-x.2"} {
			if err := b.Answer(id, Response{Confirmed: true}); err != nil {
				t.Fatal(err)
			}
		}
		<-first
		<-second
		// Asked again after it was resolved: a new id, so that a late
		// answer to the old request cannot settle the new one.
		again := ask(t.Context(), b, Request{ID: "tool-x", Kind: KindConfirm, Title: "3?"})
		if id := onlyPending(t, b).ID; id != "tool-x.3" {
			t.Fatalf("id %q, want tool-x.3", id)
		}
		if err := b.Answer("tool-x", Response{Confirmed: true}); !errors.Is(err, ErrAlreadyResolved) {
			t.Fatalf("late answer to the old request: %v", err)
		}
		b.CancelAll("done")
		<-again
		// Once forgotten (Remember is 2), an id is free again.
		done := ask(t.Context(), b, Request{ID: "tool-x", Kind: KindConfirm})
		if id := onlyPending(t, b).ID; id != "tool-x" {
			t.Fatalf("id %q after it was forgotten", id)
		}
		b.CancelAll("done")
		<-done
		// A bad id is refused, not rewritten.
		if _, err := b.Ask(t.Context(), Request{ID: "a/b", Kind: KindConfirm}); err == nil || !strings.HasPrefix(err.Error(), "id: ") {
			t.Fatalf("bad id: %v", err)
		}
	})
}

func TestParkedRequests(t *testing.T) {
	req := Request{ID: ApprovalID("c1"), Kind: KindApproval, Tool: &ToolApproval{ToolCallID: "c1", ToolName: "bash"}}
	t.Run("answered before adopted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var events []EventType
			b := NewBroker(BrokerOptions{Timeout: time.Second, OnEvent: func(e Event) {
				mu.Lock()
				events = append(events, e.Type)
				mu.Unlock()
			}})
			got, err := b.Park(req)
			if err != nil || got.ID != "tool-c1" || !got.ExpiresAt.IsZero() {
				t.Fatalf("park: %+v %v", got, err)
			}
			if !b.Parked("tool-c1") || onlyPending(t, b).ID != "tool-c1" {
				t.Fatal("not parked")
			}
			time.Sleep(time.Hour) // a parked request never times out
			if err := b.Answer("tool-c1", Response{Verdict: VerdictSkip}); err != nil {
				t.Fatal(err)
			}
			if !b.Parked("tool-c1") || len(b.Pending()) != 0 {
				t.Fatal("an answered parked request waits for its Ask, not in Pending")
			}
			resp, err := b.Ask(t.Context(), req)
			if err != nil || resp.Verdict != VerdictSkip {
				t.Fatalf("adopting Ask: %+v %v", resp, err)
			}
			if b.Parked("tool-c1") {
				t.Fatal("still parked after the Ask took its answer")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(events) != 2 || events[0] != EventRequested || events[1] != EventResolved {
				t.Fatalf("events %v: the adopting Ask must not publish again", events)
			}
		})
	})
	t.Run("adopted then answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBroker(BrokerOptions{Timeout: time.Second})
			if _, err := b.Park(req); err != nil {
				t.Fatal(err)
			}
			done := ask(t.Context(), b, req)
			if p := onlyPending(t, b); p.ID != "tool-c1" || b.Parked("tool-c1") {
				t.Fatalf("pending %+v", p)
			}
			time.Sleep(time.Hour) // nor does an adopted one
			if err := b.Answer("tool-c1", Response{Verdict: VerdictApprove}); err != nil {
				t.Fatal(err)
			}
			if r := <-done; r.err != nil || r.resp.Verdict != VerdictApprove {
				t.Fatalf("%+v", r)
			}
		})
	})
	t.Run("cancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBroker(BrokerOptions{})
			if _, err := b.Park(req); err != nil {
				t.Fatal(err)
			}
			if err := b.CancelWith("tool-c1", "the conversation moved on"); err != nil {
				t.Fatal(err)
			}
			if b.Parked("tool-c1") {
				t.Fatal("a cancelled parked request is kept")
			}
			// A later Ask is a new request.
			done := ask(t.Context(), b, req)
			answerNext(t, b, Response{Verdict: VerdictApprove})
			if r := <-done; r.err != nil {
				t.Fatal(r.err)
			}
		})
	})
	t.Run("forgotten", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBroker(BrokerOptions{})
			if _, err := b.Park(req); err != nil {
				t.Fatal(err)
			}
			_ = b.Answer("tool-c1", Response{Verdict: VerdictApprove})
			b.Forget("tool-c1")
			if b.Parked("tool-c1") {
				t.Fatal("kept after Forget")
			}
		})
	})
}

func TestGateCheckOptions(t *testing.T) {
	allowAll := Policy{}
	denyRm := Policy{Rules: []Rule{{Tool: "bash", Match: "rm *", Action: ActionDeny}}}
	ls, rm := call("bash", `{"command":"ls"}`), call("bash", `{"command":"rm -rf x"}`)
	tests := []struct {
		name    string
		policy  Policy
		grants  Grants
		park    bool
		opts    CheckOptions
		call    tool.Call
		answer  *Response // nil: must not ask
		outcome Outcome
	}{
		{"allowed", allowAll, Grants{}, false, CheckOptions{}, ls, nil, OutcomeAllowed},
		{"ask even when allowed", allowAll, Grants{}, false, CheckOptions{Ask: true}, ls, &Response{Verdict: VerdictApprove}, OutcomeApproved},
		{"ask, covered by a grant", allowAll, Grants{Tools: []string{"bash"}}, false, CheckOptions{Ask: true}, ls, nil, OutcomeGranted},
		{"approved in advance", askAll, Grants{}, false, CheckOptions{Approved: true}, ls, nil, OutcomeGranted},
		{"approved in advance, denied", denyRm, Grants{}, false, CheckOptions{Approved: true}, rm, nil, OutcomeDenied},
		{"ask, denied", denyRm, Grants{}, false, CheckOptions{Ask: true}, rm, nil, OutcomeDenied},
		{"parked, allowed by policy: asks", allowAll, Grants{}, true, CheckOptions{}, ls, &Response{Verdict: VerdictSkip}, OutcomeSkipped},
		{"parked, granted before: asks", allowAll, Grants{AllTools: true, Next: 3}, true, CheckOptions{}, ls, &Response{Verdict: VerdictApprove}, OutcomeApproved},
		{"parked, denied", denyRm, Grants{}, true, CheckOptions{}, rm, nil, OutcomeDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, b := newGate(t, tt.policy, BrokerOptions{}, GateOptions{})
				g.SetGrants(tt.grants)
				opts := tt.opts
				if tt.park {
					opts.ID = ApprovalID(tt.call.ID)
					if _, err := b.Park(Request{ID: opts.ID, Kind: KindApproval, Tool: &ToolApproval{ToolCallID: tt.call.ID, ToolName: "bash"}}); err != nil {
						t.Fatal(err)
					}
				}
				ch := make(chan Decision, 1)
				go func() { ch <- g.CheckWith(t.Context(), tt.call, opts) }()
				synctest.Wait()
				if tt.answer != nil {
					p := onlyPending(t, b)
					if tt.park && p.ID != opts.ID {
						t.Fatalf("asked under %q, not the parked request", p.ID)
					}
					if err := b.Answer(p.ID, *tt.answer); err != nil {
						t.Fatal(err)
					}
				}
				d := <-ch
				if d.Outcome != tt.outcome {
					t.Fatalf("outcome %s, want %s", d.Outcome, tt.outcome)
				}
				if len(b.Pending()) != 0 || b.Parked(opts.ID) && opts.ID != "" {
					t.Fatalf("left pending: %+v", b.Pending())
				}
			})
		})
	}
}

// Grant releases the approvals it covers, as an answer's grant does, but
// not a parked one, which only its own answer settles.
func TestGateGrantReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, b := newGate(t, askAll, BrokerOptions{}, GateOptions{})
		c := call("bash", `{}`)
		parkedID := ApprovalID("other")
		if _, err := b.Park(Request{ID: parkedID, Kind: KindApproval, Tool: &ToolApproval{ToolCallID: "other", ToolName: "bash"}}); err != nil {
			t.Fatal(err)
		}
		live := check(t.Context(), g, c)
		parked := make(chan Decision, 1)
		go func() {
			parked <- g.CheckWith(t.Context(), tool.Call{ID: "other", Name: "bash", Args: c.Args}, CheckOptions{ID: parkedID})
		}()
		synctest.Wait()
		g.Grant(Grants{Next: 5})
		if d := <-live; d.Outcome != OutcomeGranted {
			t.Fatalf("live approval: %s", d.Outcome)
		}
		if p := onlyPending(t, b); p.ID != parkedID {
			t.Fatalf("pending %+v", p)
		}
		if g.Grants().Next != 4 {
			t.Fatalf("next %d, want 4", g.Grants().Next)
		}
		answerNext(t, b, Response{Verdict: VerdictReject, Feedback: "no"})
		if d := <-parked; d.Outcome != OutcomeRejected {
			t.Fatalf("parked approval: %s", d.Outcome)
		}
	})
}

func TestNotRunResult(t *testing.T) {
	r := NotRunResult("the conversation moved on")
	if !r.IsError || r.Content[0].Text != "Tool call cancelled before it was approved: the conversation moved on" {
		t.Fatalf("%+v", r)
	}
	if d, ok := r.Details.(ApprovalDetails); !ok || d.Outcome != OutcomeCancelled || d.Reason != "the conversation moved on" {
		t.Fatalf("details %+v", r.Details)
	}
}
