package piserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// treeNodes decodes the nodes of a get_tree response.
func treeNodes(t *testing.T, r wire) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, n := range r.data()["nodes"].([]any) {
		out = append(out, n.(map[string]any))
	}
	return out
}

func version(r wire) float64 { v, _ := r.m["sessionVersion"].(float64); return v }

// get_tree lists every entry in pi-server's node shape and leaves the
// session version alone; navigate_tree answers in pi-server's shape and
// bumps it.
func TestTreeCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"hello\n  there"}`))
		c.handle([]byte(`{"type":"get_tree","id":"t1","sessionId":"s1"}`))
		synctest.Wait()
		ws := l.wires(t)
		_, p1 := response(t, ws, "p1")
		_, t1 := response(t, ws, "t1")
		wantSuccess(t, t1)
		if version(t1) != version(p1) || version(p1) != 1 {
			t.Errorf("get_tree sessionVersion %v after the prompt's %v: it must not bump", t1.m["sessionVersion"], p1.m["sessionVersion"])
		}
		nodes := treeNodes(t, t1)
		var got []string
		for _, n := range nodes {
			got = append(got, fmt.Sprintf("%v|%v|%v|%v", n["entryType"], n["role"], n["text"], n["parentId"] == nil))
		}
		want := []string{"model_change|<nil>|faux/echo|true", "thinking_level_change|<nil>|off|false",
			"message|user|hello there|false", "message|assistant|You said: hello there|false"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("nodes\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), t1.raw)
		}
		user, asst := nodes[2]["entryId"].(string), nodes[3]["entryId"].(string)
		if t1.data()["currentLeafId"] != asst {
			t.Errorf("currentLeafId %v, want the answer %s", t1.data()["currentLeafId"], asst)
		}
		// Exact shape and key order of a root node: no label key without a label.
		first, _ := json.Marshal(nodes[0]["timestamp"])
		wantRoot := fmt.Sprintf(`{"entryId":%q,"parentId":null,"entryType":"model_change","role":null,"text":"faux/echo","timestamp":%s}`, nodes[0]["entryId"], first)
		if !strings.Contains(t1.raw, wantRoot) {
			t.Errorf("root node not in pi-server's shape %s:\n%s", wantRoot, t1.raw)
		}

		// To the user message: its text back, the conversation before it.
		c.handle([]byte(`{"type":"navigate_tree","id":"n1","sessionId":"s1","targetId":"` + user + `"}`))
		// To the answer, labelled.
		c.handle([]byte(`{"type":"navigate_tree","id":"n2","sessionId":"s1","targetId":"` + asst + `","options":{"label":"here"}}`))
		c.handle([]byte(`{"type":"get_tree","id":"t2","sessionId":"s1"}`))
		synctest.Wait()
		ws = l.wires(t)
		_, n1 := response(t, ws, "n1")
		if !strings.Contains(n1.raw, `"data":{"editorText":"hello\n  there","cancelled":false}`) || version(n1) != 2 {
			t.Errorf("navigate_tree to a user message = %s", n1.raw)
		}
		_, n2 := response(t, ws, "n2")
		if !strings.Contains(n2.raw, `"data":{"cancelled":false}`) || version(n2) != 3 {
			t.Errorf("navigate_tree to an answer = %s", n2.raw)
		}
		_, t2 := response(t, ws, "t2")
		nodes = treeNodes(t, t2)
		if len(nodes) != 5 || nodes[3]["label"] != "here" || nodes[4]["entryType"] != "label" || t2.data()["currentLeafId"] != nodes[4]["entryId"] || version(t2) != 3 {
			t.Errorf("tree after the labelled navigation: %s", t2.raw)
		}
		// Where it already is: nothing happens, but it is a mutating
		// command that succeeded.
		leaf := nodes[4]["entryId"].(string)
		c.handle([]byte(`{"type":"navigate_tree","id":"n3","sessionId":"s1","targetId":"` + leaf + `"}`))
		synctest.Wait()
		_, n3 := response(t, l.wires(t), "n3")
		if !strings.Contains(n3.raw, `"data":{"cancelled":false}`) || version(n3) != 4 {
			t.Errorf("navigate_tree to the leaf = %s", n3.raw)
		}
	})
}

// With summarize, the path left becomes a branch_summary at the new
// position, carrying the label.
func TestNavigateTreeSummarizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"first"}`))
		c.handle([]byte(`{"type":"prompt","id":"p2","sessionId":"s1","message":"second"}`))
		c.handle([]byte(`{"type":"get_tree","id":"t1","sessionId":"s1"}`))
		synctest.Wait()
		_, t1 := response(t, l.wires(t), "t1")
		nodes := treeNodes(t, t1)
		firstAnswer := nodes[3]["entryId"].(string)
		c.handle([]byte(`{"type":"navigate_tree","id":"n1","sessionId":"s1","targetId":"` + firstAnswer +
			`","options":{"summarize":true,"customInstructions":"be brief","replaceInstructions":false,"label":"left second"}}`))
		c.handle([]byte(`{"type":"get_tree","id":"t2","sessionId":"s1"}`))
		synctest.Wait()
		ws := l.wires(t)
		_, n1 := response(t, ws, "n1")
		if !strings.Contains(n1.raw, `"data":{"cancelled":false}`) {
			t.Fatalf("navigate_tree = %s", n1.raw)
		}
		_, t2 := response(t, ws, "t2")
		var summary map[string]any
		for _, n := range treeNodes(t, t2) {
			if n["entryType"] == "branch_summary" {
				summary = n
			}
		}
		if summary == nil || summary["parentId"] != firstAnswer || summary["label"] != "left second" || !strings.Contains(summary["text"].(string), "second") {
			t.Errorf("no labelled branch summary under the target: %s", t2.raw)
		}
		// The faux model echoes the request: agentd's prompt with the
		// user's instructions.
		reqs := fx.faux.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Messages[0].TextContent(), "be brief") {
			t.Errorf("the summary request lacks the instructions: %s", last.Messages[0].TextContent())
		}
	})
}

// abort stops a summary in progress; the navigation then answers
// cancelled and aborted and the session stays where it was.
func TestNavigateTreeAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{chunkDelay: 10 * time.Millisecond})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"first"}`))
		c.handle([]byte(`{"type":"prompt","id":"p2","sessionId":"s1","message":"second"}`))
		c.handle([]byte(`{"type":"get_tree","id":"t1","sessionId":"s1"}`))
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		_, t1 := response(t, l.wires(t), "t1")
		nodes := treeNodes(t, t1)
		c.handle([]byte(`{"type":"navigate_tree","id":"n1","sessionId":"s1","targetId":"` + nodes[3]["entryId"].(string) + `","options":{"summarize":true}}`))
		synctest.Wait()
		time.Sleep(50 * time.Millisecond) // a few chunks of the summary
		c.handle([]byte(`{"type":"get_state","id":"g1","sessionId":"s1"}`))
		synctest.Wait() // control commands run side by side: get_state first
		c.handle([]byte(`{"type":"abort","id":"a1","sessionId":"s1"}`))
		synctest.Wait()
		c.handle([]byte(`{"type":"get_tree","id":"t2","sessionId":"s1"}`))
		synctest.Wait()
		ws := l.wires(t)
		_, g1 := response(t, ws, "g1")
		if g1.data()["state"] != "compacting" || g1.data()["isCompacting"] != true {
			t.Errorf("get_state during the summary = %s", g1.raw)
		}
		_, n1 := response(t, ws, "n1")
		if !strings.Contains(n1.raw, `"data":{"cancelled":true,"aborted":true}`) {
			t.Errorf("aborted navigate_tree = %s", n1.raw)
		}
		_, t2 := response(t, ws, "t2")
		if fmt.Sprint(t2.data()) != fmt.Sprint(t1.data()) {
			t.Errorf("the tree changed:\n%s\n%s", t1.raw, t2.raw)
		}
	})
}

func TestTreeCommandValidation(t *testing.T) {
	tests := []struct {
		name, frame, want string
		admitted          bool // refused by the handler, after admission
	}{
		{"no targetId", `{"type":"navigate_tree","id":"x","sessionId":"s1"}`, "Validation failed: targetId: is required", false},
		{"empty targetId", `{"type":"navigate_tree","id":"x","sessionId":"s1","targetId":""}`, "Validation failed: targetId: must be a non-empty string", false},
		{"targetId not a string", `{"type":"navigate_tree","id":"x","sessionId":"s1","targetId":7}`, "Validation failed: targetId: must be a string", false},
		{"options not an object", `{"type":"navigate_tree","id":"x","sessionId":"s1","targetId":"e","options":"all"}`, "Validation failed: options: must be an object", false},
		{"options of the wrong types", `{"type":"navigate_tree","id":"x","sessionId":"s1","targetId":"e","options":{"summarize":"yes","customInstructions":1,"replaceInstructions":null,"label":false}}`,
			"Validation failed: options.summarize: Must be a boolean if provided; options.customInstructions: Must be a string if provided; options.replaceInstructions: Must be a boolean if provided; options.label: Must be a string if provided", false},
		{"no sessionId", `{"type":"get_tree","id":"x"}`, "Validation failed: sessionId: Session commands must have a non-empty string 'sessionId'", false},
		{"unknown entry", `{"type":"navigate_tree","id":"x","sessionId":"s1","targetId":"nope","options":{}}`, "Entry nope not found", true},
		{"unknown session", `{"type":"get_tree","id":"x","sessionId":"s2"}`, "Session s2 not found", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx := newFixture(t, fixtureConfig{})
				l := &fakeLink{}
				c := fx.connect(t, l)
				c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
				c.handle([]byte(tt.frame))
				synctest.Wait()
				ws := l.wires(t)
				_, r := response(t, ws, "x")
				wantError(t, r, tt.want)
				if _, ok := r.m["sessionVersion"]; ok {
					t.Errorf("a failure carries sessionVersion: %s", r.raw)
				}
				accepted := index(ws, func(w wire) bool { return w.typ() == "command_accepted" && w.data()["commandId"] == "x" }) >= 0
				if accepted != tt.admitted {
					t.Errorf("admitted = %v, want %v", accepted, tt.admitted)
				}
			})
		})
	}
}
