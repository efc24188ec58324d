package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/tool"
)

func progressOf(call string, seq uint64, text string) session.ToolProgress {
	r := tool.TextResult(text, nil)
	return session.ToolProgress{ToolCallID: call, ToolName: "bash", Partial: &r, Seq: seq}
}

func toolEvent(typ agent.EventType, call string, seq uint64) session.Event {
	return session.Event{Seq: seq, Type: session.EventType(typ), Agent: &agent.Event{Type: typ, ToolCallID: call, ToolName: "bash", Partial: &tool.Result{}}}
}

func outputOf(ev session.Event) string {
	if ev.Agent == nil || ev.Agent.Partial == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range ev.Agent.Partial.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// Which published updates carry a running call's output.
func TestToolOutputsAttach(t *testing.T) {
	t0 := time.Unix(1000, 0)
	upd := func(call string, seq uint64) session.Event {
		return toolEvent(agent.EventToolExecutionUpdate, call, seq)
	}
	for _, tc := range []struct {
		name     string
		sentAt   map[string]time.Time // earlier flushes
		evs      []session.Event
		progress []session.ToolProgress
		now      time.Time
		want     []string // each event's output
	}{
		{"the newest update of a call", nil,
			[]session.Event{upd("c1", 1), upd("c1", 2)}, []session.ToolProgress{progressOf("c1", 2, "ab")}, t0,
			[]string{"", "ab"}},
		{"two calls", nil,
			[]session.Event{upd("c1", 1), upd("c2", 2)}, []session.ToolProgress{progressOf("c1", 1, "x"), progressOf("c2", 2, "y")}, t0,
			[]string{"x", "y"}},
		{"a newer update is not out yet", nil,
			[]session.Event{upd("c1", 1)}, []session.ToolProgress{progressOf("c1", 2, "newer")}, t0,
			[]string{""}},
		{"within a second of the last", map[string]time.Time{"c1": t0},
			[]session.Event{upd("c1", 3)}, []session.ToolProgress{progressOf("c1", 3, "abc")}, t0.Add(outputEvery / 2),
			[]string{""}},
		{"a second after the last", map[string]time.Time{"c1": t0},
			[]session.Event{upd("c1", 3)}, []session.ToolProgress{progressOf("c1", 3, "abc")}, t0.Add(outputEvery),
			[]string{"abc"}},
		{"an ended call's id reused", map[string]time.Time{"c1": t0},
			[]session.Event{toolEvent(agent.EventToolExecutionEnd, "c1", 3), upd("c1", 4)}, []session.ToolProgress{progressOf("c1", 4, "again")}, t0,
			[]string{"", "again"}},
		{"nothing running", nil,
			[]session.Event{upd("c1", 1)}, nil, t0,
			[]string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := toolOutputs{}
			for k, v := range tc.sentAt {
				o[k] = v
			}
			logged := make([]*agent.Event, len(tc.evs))
			for i, ev := range tc.evs {
				logged[i] = ev.Agent
			}
			o.attach(tc.evs, tc.progress, tc.now)
			for i, ev := range tc.evs {
				if got := outputOf(ev); got != tc.want[i] {
					t.Errorf("event %d carries %q, want %q", i, got, tc.want[i])
				}
				if len(logged[i].Partial.Content) != 0 {
					t.Errorf("event %d: the log's copy was changed", i)
				}
				if ev.Agent.Type == agent.EventToolExecutionUpdate && tc.want[i] == "" && ev.Agent.Partial != logged[i].Partial {
					t.Errorf("event %d goes out with a result %+v, want the log's", i, ev.Agent.Partial)
				}
			}
		})
	}
}

// A bash call's opening update carries no output: publishing it must not
// hold back the first output that comes after it for a second, or a
// command that prints a line and then runs quietly (echo; sleep) is shown
// to clients of other nodes as two empty updates until it ends.
func TestToolOutputsOpenerHoldsNothingBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	opener := session.ToolProgress{ToolCallID: "c1", ToolName: "bash", Partial: &tool.Result{Content: []llm.Content{}}, Seq: 1}
	for _, tc := range []struct {
		name  string
		first session.ToolProgress // the newest output at the first flush
		want  string               // the output the second update goes out with
	}{
		{"after the opener", opener, "started-42"},
		{"after an output", progressOf("c1", 1, "started"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := toolOutputs{}
			first := []session.Event{toolEvent(agent.EventToolExecutionUpdate, "c1", 1)}
			o.attach(first, []session.ToolProgress{tc.first}, t0)
			second := []session.Event{toolEvent(agent.EventToolExecutionUpdate, "c1", 2)}
			o.attach(second, []session.ToolProgress{progressOf("c1", 2, "started-42")}, t0.Add(outputEvery/10))
			if got := outputOf(second[0]); got != tc.want {
				t.Errorf("the update after the first goes out with %q, want %q", got, tc.want)
			}
		})
	}
}

// stepTool sends an update for each text on next, and returns when next
// is closed.
type stepTool struct {
	next chan string
	sent chan struct{}
}

func (st *stepTool) Spec() llm.Tool {
	return llm.Tool{Name: "step", Description: "sends updates", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (st *stepTool) Execute(ctx context.Context, _ tool.Call, update func(tool.Result)) tool.Result {
	out := ""
	for {
		select {
		case s, ok := <-st.next:
			if !ok {
				return tool.TextResult(out, nil)
			}
			out += s
			update(tool.TextResult(out, nil))
			st.sent <- struct{}{}
		case <-ctx.Done():
			return tool.Errorf("cancelled")
		}
	}
}

type stepBuilder struct {
	p  *faux.Provider
	st *stepTool
}

func (b stepBuilder) Session(spec sessionspec.Spec) (*session.Session, error) {
	return session.New(session.Config{
		Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(), Stream: b.p.Stream,
		FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq, EventLogSize: 256, TranscriptOptions: spec.TranscriptOptions,
		Tools: []tool.Tool{b.st},
	})
}

// outputCodec encodes a tool update as its seq, type and output.
type outputCodec struct{}

func (outputCodec) Encode(_ string, ev session.Event) Frame {
	line := strconv.FormatUint(ev.Seq, 10) + " " + string(ev.Type)
	if ev.Agent != nil && ev.Agent.Type == agent.EventToolExecutionUpdate {
		line += " " + outputOf(ev)
	}
	return Frame{Data: []byte(line)}
}

// A client on another node sees a running call's output while it runs,
// as a client of the owner does, although the owner's log keeps tool
// updates without it.
func TestClusterRemoteWatcherSeesToolOutput(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "c1", Name: "step"}}}, faux.Response{Text: "done"})
	st := &stepTool{next: make(chan string), sent: make(chan struct{}, 1)}
	nodes := startClusterBuilt(t, true, func() Builder { return stepBuilder{p, st} }, "a", "b")
	a := nodes["a"]
	sid := sessionOn("b", "a", "b")

	link := newListLink()
	c, err := a.srv.Attach(link, ClientOptions{Face: "t"})
	if err != nil {
		t.Fatal(err)
	}
	o := &testOrigin{c: c, codec: outputCodec{}, hold: NewHold()}
	r := submit(t, a, pipeline.Command{Type: "t.create", ID: "c1", SessionID: sid, Origin: o})
	o.hold.Release()
	if r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("create from a: %+v (data %s), want it placed on b", r.Err, r.Data)
	}
	ran := make(chan pipeline.Response, 1)
	a.srv.Submit(pipeline.Command{Type: "t.prompt", SessionID: sid}, func(r pipeline.Response) { ran <- r })

	// The output is seen by a's client while the call runs; how often it
	// goes out is TestToolOutputsAttach's.
	waitFor := func(suffix string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			link.mu.Lock()
			for _, f := range link.frames {
				if strings.Contains(f, " tool_execution_update ") && strings.HasSuffix(f, suffix) {
					link.mu.Unlock()
					return
				}
			}
			link.mu.Unlock()
			select {
			case <-link.more:
			case <-deadline:
				link.mu.Lock()
				defer link.mu.Unlock()
				t.Fatalf("a's client never saw the output %q; it got %q", suffix, link.frames)
			}
		}
	}
	st.next <- "one two"
	<-st.sent
	waitFor(" one two")
	close(st.next)
	select {
	case r := <-ran:
		if r.Err != nil {
			t.Fatalf("prompt: %+v", r.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end")
	}
}

// A node following the stream gives an update that came without output
// the last output of its call, so no client sees it blanked.
func TestLastOutputsFill(t *testing.T) {
	upd := func(call string, text *string) session.Event {
		ev := toolEvent(agent.EventToolExecutionUpdate, call, 0) // the log's empty result
		if text != nil {
			r := tool.TextResult(*text, nil)
			ev.Agent.Partial = &r
		}
		return ev
	}
	str := func(s string) *string { return &s }
	l := lastOutputs{}
	for i, step := range []struct {
		ev   session.Event
		want string
	}{
		{upd("c1", nil), ""}, // nothing seen yet: as it came
		{upd("c1", str("a")), "a"},
		{upd("c1", nil), "a"},
		{upd("c2", nil), ""},
		{upd("c1", str("ab")), "ab"},
		{upd("c1", nil), "ab"},
		{toolEvent(agent.EventToolExecutionEnd, "c1", 0), ""},
		{upd("c1", nil), ""}, // the call ended: nothing kept
	} {
		ev := step.ev
		l.fill(&ev)
		if ev.Agent.Type != agent.EventToolExecutionUpdate {
			continue
		}
		if got := outputOf(ev); got != step.want || ev.Agent.Partial == nil {
			t.Errorf("step %d: output %q (result %v), want %q", i, got, ev.Agent.Partial, step.want)
		}
	}
}
