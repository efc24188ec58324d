package todo

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/tool"
)

var _ tool.Tool = (*Tool)(nil)

func TestParseStatus(t *testing.T) {
	for in, want := range map[string]Status{
		"": Pending, "pending": Pending, "TODO": Pending,
		"in_progress": InProgress, "in-progress": InProgress, "In Progress": InProgress,
		"completed": Completed, "done": Completed, " Complete ": Completed,
	} {
		if got, err := ParseStatus(in); err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseStatus("blocked"); err == nil || !strings.Contains(err.Error(), "want pending, in_progress or completed") {
		t.Errorf("ParseStatus(blocked) = %v", err)
	}
}

func TestWriteKeepsIDsStable(t *testing.T) {
	l := NewList(nil)
	must(t, l.Write([]Item{{Content: "read"}, {Content: "write", Status: InProgress}, {Content: "test"}}))
	want := []Item{{1, "read", Pending}, {2, "write", InProgress}, {3, "test", Pending}}
	if got := l.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	// Rewritten without ids, reordered, one dropped, one added: ids follow
	// the content, the new item gets a fresh id.
	must(t, l.Write([]Item{{Content: "test"}, {Content: "  read  ", Status: Completed}, {Content: "ship"}}))
	want = []Item{{3, "test", Pending}, {1, "read", Completed}, {4, "ship", Pending}}
	if got := l.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	// Explicit ids win; a duplicate id is treated as missing.
	must(t, l.Write([]Item{{ID: 4, Content: "ship it"}, {ID: 4, Content: "test"}, {ID: 9, Content: "new"}}))
	want = []Item{{4, "ship it", Pending}, {3, "test", Pending}, {9, "new", Pending}}
	if got := l.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	// Clearing and refilling never reuses an id.
	must(t, l.Write(nil))
	must(t, l.Write([]Item{{Content: "again"}}))
	if got := l.Items(); got[0].ID != 10 {
		t.Errorf("id after clear = %d, want 10", got[0].ID)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteErrors(t *testing.T) {
	l := NewList(nil)
	must(t, l.Write([]Item{{Content: "keep"}}))
	for _, tc := range []struct {
		items []Item
		want  string
	}{
		{[]Item{{Content: "a"}, {Content: " "}}, "todos[1].content: required"},
		{[]Item{{Content: "a", Status: "blocked"}}, `todos[0].status: unknown status "blocked"`},
	} {
		if err := l.Write(tc.items); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%v) = %v, want %q", tc.items, err, tc.want)
		}
	}
	if got := l.Items(); len(got) != 1 || got[0].Content != "keep" {
		t.Errorf("a failed write changed the list: %v", got)
	}
}

func TestApply(t *testing.T) {
	l := NewList(nil)
	must(t, l.Write([]Item{{Content: "a", Status: InProgress}, {Content: "b"}}))
	must(t, l.Apply([]Update{{ID: 1, Status: Completed}, {ID: 2, Status: "in-progress", Content: "b2"}}))
	want := []Item{{1, "a", Completed}, {2, "b2", InProgress}}
	if got := l.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	if err := l.Apply([]Update{{ID: 2, Status: Completed}, {ID: 7, Status: Completed}}); err == nil || err.Error() != "update[1].id: no item #7" {
		t.Errorf("unknown id: %v", err)
	}
	if err := l.Apply([]Update{{ID: 2, Status: "nope"}}); err == nil || !strings.Contains(err.Error(), "update[0].status") {
		t.Errorf("bad status: %v", err)
	}
	if got := l.Items(); !reflect.DeepEqual(got, want) {
		t.Errorf("a failed update changed the list: %v", got)
	}
}

func TestProgressAndObserver(t *testing.T) {
	var mu sync.Mutex
	var got []Snapshot
	var l *List
	l = NewList(func(s Snapshot) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		l.Items() // reading from the observer must not deadlock
	})
	if d, n := l.Progress(); d != 0 || n != 0 {
		t.Errorf("empty progress %d/%d", d, n)
	}
	must(t, l.Write([]Item{{Content: "a"}, {Content: "b"}, {Content: "c"}}))
	must(t, l.Apply([]Update{{ID: 1, Status: Completed}}))
	must(t, l.Apply([]Update{{ID: 1, Status: Completed}})) // no change, no event
	must(t, l.Write([]Item{{ID: 1, Content: "a", Status: Completed}, {ID: 2, Content: "b", Status: Completed}, {ID: 3, Content: "c"}}))
	if d, n := l.Progress(); d != 2 || n != 3 {
		t.Errorf("progress %d/%d, want 2/3", d, n)
	}
	mu.Lock()
	defer mu.Unlock()
	var progress [][2]int
	for _, s := range got {
		progress = append(progress, [2]int{s.Done, s.Total})
	}
	if want := [][2]int{{0, 3}, {1, 3}, {2, 3}}; !reflect.DeepEqual(progress, want) {
		t.Errorf("observed progress %v, want %v", progress, want)
	}
	if len(got[2].Items) != 3 || got[2].Items[1].Status != Completed {
		t.Errorf("last snapshot items %v", got[2].Items)
	}
}

func TestObserverOrderUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	last := -1
	l := NewList(func(s Snapshot) {
		mu.Lock()
		defer mu.Unlock()
		// Each write below adds one item, so delivered totals only grow.
		if s.Total <= last {
			t.Errorf("snapshot with %d items after one with %d", s.Total, last)
		}
		last = s.Total
	})
	var mu2 sync.Mutex
	var items []Item
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			mu2.Lock()
			defer mu2.Unlock()
			items = append(items, Item{Content: strings.Repeat("x", i+1)})
			must(t, l.Write(items))
		})
	}
	wg.Wait()
	if _, n := l.Progress(); n != 50 {
		t.Errorf("total %d", n)
	}
}

func TestJSON(t *testing.T) {
	l := NewList(nil)
	must(t, l.Write([]Item{{Content: "a", Status: Completed}, {Content: "b", Status: InProgress}}))
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"items":[{"id":1,"content":"a","status":"completed"},{"id":2,"content":"b","status":"in_progress"}],"done":1,"total":2}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
	var back List
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Items(), l.Items()) {
		t.Errorf("restored %v, want %v", back.Items(), l.Items())
	}
	must(t, back.Write(append(back.Items(), Item{Content: "c"})))
	if got := back.Items()[2].ID; got != 3 {
		t.Errorf("next id after restore = %d, want 3", got)
	}
	empty, _ := json.Marshal(NewList(nil))
	if string(empty) != `{"items":null,"done":0,"total":0}` && string(empty) != `{"items":[],"done":0,"total":0}` {
		t.Errorf("empty list json %s", empty)
	}
}

func exec(t *testing.T, tl *Tool, args string) tool.Result {
	t.Helper()
	return tl.Execute(t.Context(), tool.Call{ID: "c", Name: ToolName, Args: json.RawMessage(args)}, nil)
}

func TestTool(t *testing.T) {
	l := NewList(nil)
	tl := NewTool(l)
	steps := []struct {
		name, args string
		isError    bool
		text       string
	}{
		{"read empty", `{}`, false, "The todo list is empty"},
		{"read with no arguments", ``, false, "The todo list is empty"},
		{"write", `{"todos":[
			{"content":"Read the config loader","status":"completed"},
			{"content":"Add the flag","status":"in_progress"},
			{"content":"Write tests","status":"pending"}]}`, false,
			"Todos (1/3 completed):\n- [x] #1 Read the config loader\n- [~] #2 Add the flag (in progress)\n- [ ] #3 Write tests"},
		{"update", `{"update":[{"id":2,"status":"completed"},{"id":"3","status":"in_progress"}]}`, false,
			"Todos (2/3 completed):\n- [x] #1 Read the config loader\n- [x] #2 Add the flag\n- [~] #3 Write tests (in progress)"},
		{"read", `{"todos":null}`, false,
			"Todos (2/3 completed):\n- [x] #1 Read the config loader\n- [x] #2 Add the flag\n- [~] #3 Write tests (in progress)"},
		{"rewrite from a stringified array", `{"todos":"[{\"id\":3,\"content\":\"Write tests\",\"status\":\"done\"},{\"content\":\"Ship\",\"status\":\"pending\"}]"}`, false,
			"Todos (1/2 completed):\n- [x] #3 Write tests\n- [ ] #4 Ship"},
		{"unknown id", `{"update":[{"id":9,"status":"completed"}]}`, true, "Invalid todo arguments: update[0].id: no item #9"},
		{"update without id", `{"update":[{"status":"completed"}]}`, true, "Invalid todo arguments: update[0].id: required"},
		{"update without change", `{"update":[{"id":4}]}`, true, "Invalid todo arguments: update[0]: give a status or a content"},
		{"bad id", `{"update":[{"id":"four","status":"completed"}]}`, true, `Invalid todo arguments: update[0]: id: want an integer, got "four"`},
		{"missing status", `{"todos":[{"content":"x"}]}`, true, "Invalid todo arguments: todos[0].status: required"},
		{"bad status", `{"todos":[{"content":"x","status":"blocked"}]}`, true, `Invalid todo arguments: todos[0].status: unknown status "blocked" (want pending, in_progress or completed)`},
		{"empty content", `{"todos":[{"content":"","status":"pending"}]}`, true, "Invalid todo arguments: todos[0].content: required"},
		{"content of the wrong type", `{"todos":[{"content":5,"status":"pending"}]}`, true, "Invalid todo arguments: todos[0]: content: want a string"},
		{"todos not an array", `{"todos":{"content":"x"}}`, true, "Invalid todo arguments: todos: want an array of items"},
		{"both", `{"todos":[],"update":[]}`, true, `Invalid todo arguments: pass either "todos" (the whole list) or "update", not both`},
		{"not an object", `[1]`, true, "Invalid todo arguments: the arguments must be a JSON object"},
		{"clear", `{"todos":[]}`, false, "The todo list is empty"},
	}
	for _, s := range steps {
		res := exec(t, tl, s.args)
		if res.IsError != s.isError || res.Content[0].Text != s.text {
			t.Errorf("%s: result (error %v)\n%s\nwant (error %v)\n%s", s.name, res.IsError, res.Content[0].Text, s.isError, s.text)
		}
		if !res.IsError {
			snap, ok := res.Details.(Snapshot)
			if !ok || !reflect.DeepEqual(snap, l.Snapshot()) {
				t.Errorf("%s: details %+v, want the list snapshot", s.name, res.Details)
			}
		}
	}
}

func TestToolSpec(t *testing.T) {
	spec := NewTool(NewList(nil)).Spec()
	var schema map[string]any
	if spec.Name != "todo" || json.Unmarshal(spec.Parameters, &schema) != nil {
		t.Errorf("spec %+v", spec)
	}
}
