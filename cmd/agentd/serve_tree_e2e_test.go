package main

// get_tree and navigate_tree (pi-server's commands after protocol 1.0.0,
// docs/pi-server-wire.md §14) against the built binary: the tree as the
// transcript holds it, navigation with and without a summary, the
// session versions they report, a summary aborted, and the tree as it
// comes back after a restart.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// svTreeNode is one node of a get_tree response, as "type/role text".
func svTreeNode(n any) string {
	s := svStr(n, "entryType")
	if r := svStr(n, "role"); r != "" {
		s += "/" + r
	}
	s += " " + svStr(n, "text")
	if l := svStr(n, "label"); l != "" {
		s += " #" + l
	}
	return s
}

// svTree is the session's tree and the get_tree response.
func svTree(c *svConn, sid string) ([]any, svFrame) {
	c.t.Helper()
	r := c.must("get_tree", svM{"sessionId": sid})
	return svArr(r.m, "data", "nodes"), r
}

// svNodeID is the entry id of the first node whose svTreeNode starts
// with prefix.
func svNodeID(t *testing.T, nodes []any, prefix string) string {
	t.Helper()
	i := svIndexOf(nodes, prefix)
	if i < 0 {
		t.Fatalf("no node %q in %s", prefix, svJSON(nodes))
	}
	return svStr(nodes[i], "entryId")
}

// svIndexOf is the index of the first node whose svTreeNode starts with
// prefix, -1 if none.
func svIndexOf(nodes []any, prefix string) int {
	for i, n := range nodes {
		if strings.HasPrefix(svTreeNode(n), prefix) {
			return i
		}
	}
	return -1
}

func TestServeTree(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	a := s.dial("A")
	const sid = "tree"
	svCreate(a, sid)
	svPrompt(a, sid, "first question")
	svPrompt(a, sid, "second question")

	nodes, r := svTree(a, sid)
	var got []string
	for _, n := range nodes {
		got = append(got, svTreeNode(n))
	}
	svEq(t, "tree", got, []string{
		"model_change mock/mock-model",
		"thinking_level_change off",
		"message/user first question",
		"message/assistant " + svAnswer("first question"),
		"message/user second question",
		"message/assistant " + svAnswer("second question"),
	})
	svEq(t, "currentLeafId", svStr(r.m, "data", "currentLeafId"), svStr(nodes[5], "entryId"))
	svEq(t, "root parentId", svAt(nodes[0], "parentId"), nil)
	svEq(t, "root role", svHas(nodes[0], "role") && svAt(nodes[0], "role") == nil, true)
	for i := 1; i < len(nodes); i++ {
		svEq(t, fmt.Sprintf("node %d parentId", i), svStr(nodes[i], "parentId"), svStr(nodes[i-1], "entryId"))
	}
	svEq(t, "get_tree sessionVersion (read-only)", svVersion(r), 2)
	firstAnswer := svNodeID(t, nodes, "message/assistant "+svAnswer("first question"))
	second := svNodeID(t, nodes, "message/user second question")
	secondAnswer := svNodeID(t, nodes, "message/assistant "+svAnswer("second question"))

	t.Run("to a user message", func(t *testing.T) {
		c := a.on(t)
		r := c.must("navigate_tree", svM{"sessionId": sid, "targetId": second})
		svEq(t, "data", r.m["data"], svM{"editorText": "second question", "cancelled": false})
		svEq(t, "sessionVersion (mutating)", svVersion(r), 3)
		svEq(t, "messages", svTexts(svMessages(c, sid)), []string{"first question", svAnswer("first question")})
		_, tr := svTree(c, sid)
		svEq(t, "leaf", svStr(tr.m, "data", "currentLeafId"), firstAnswer)
		svEq(t, "get_tree sessionVersion", svVersion(tr), 3)
		// The next prompt starts a branch there.
		svPrompt(c, sid, "third question")
		nodes, _ := svTree(c, sid)
		third := nodes[svIndexOf(nodes, "message/user third question")]
		svEq(t, "third question's parent", svStr(third, "parentId"), firstAnswer)
		svEq(t, "pre-order: the older branch first", svIndexOf(nodes, "message/user second question") < svIndexOf(nodes, "message/user third question"), true)
	})

	t.Run("back with a summary and a label", func(t *testing.T) {
		c := a.on(t)
		r := c.must("navigate_tree", svM{"sessionId": sid, "targetId": secondAnswer,
			"options": svM{"summarize": true, "label": "left third", "customInstructions": "keep it short"}})
		svEq(t, "data", r.m["data"], svM{"cancelled": false})
		nodes, tr := svTree(c, sid)
		sum := nodes[svIndexOf(nodes, "branch_summary ")]
		svEq(t, "summary parent", svStr(sum, "parentId"), secondAnswer)
		svEq(t, "summary label", svStr(sum, "label"), "left third")
		// The mock echoes the request's start: agentd's transcript of the path left.
		if !strings.Contains(svStr(sum, "text"), "Hello from mock! You said: <transcript> >>> user third question") {
			t.Errorf("summary text %q", svStr(sum, "text"))
		}
		label := nodes[svIndexOf(nodes, "label ")]
		svEq(t, "leaf is the label entry", svStr(tr.m, "data", "currentLeafId"), svStr(label, "entryId"))
		svEq(t, "label entry", svTreeNode(label), "label left third → "+svStr(sum, "entryId"))
		svEq(t, "label entry's parent", svStr(label, "parentId"), svStr(sum, "entryId"))
		svEq(t, "messages", svTexts(svMessages(c, sid)), []string{"first question", svAnswer("first question"),
			"second question", svAnswer("second question"), "<branchSummary>"})
	})

	t.Run("bad commands", func(t *testing.T) {
		c := a.on(t)
		r := c.do("navigate_tree", svM{"sessionId": sid, "targetId": "nope"})
		svWantErr(t, r, "Entry nope not found")
		svNoVersionOnFailure(t, r)
		r = c.do("navigate_tree", svM{"sessionId": sid, "targetId": second, "options": svM{"summarize": "yes", "label": 3}})
		svWantErr(t, r, "Validation failed: options.summarize: Must be a boolean if provided; options.label: Must be a string if provided")
		svWantErr(t, c.do("navigate_tree", svM{"sessionId": sid}), "Validation failed: targetId: is required")
	})

	t.Run("after a restart", func(t *testing.T) {
		before, br := svTree(a.on(t), sid)
		s.sigterm()
		svEq(t, "exit", s.waitExit(), 0)
		s2 := s.restart()
		b := s2.dial("B").on(t)
		after, ar := svTree(b, sid)
		svEq(t, "nodes", after, before)
		svEq(t, "leaf", svStr(ar.m, "data", "currentLeafId"), svStr(br.m, "data", "currentLeafId"))
		svEq(t, "messages", svTexts(svMessages(b, sid)), []string{"first question", svAnswer("first question"),
			"second question", svAnswer("second question"), "<branchSummary>"})
	})
}

// An abort reaches a summary in progress: navigate_tree answers
// cancelled and aborted, and the session is where it was.
func TestServeTreeAbortSummary(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	// Summary requests (the only ones without tools) hang after their
	// first words.
	e.mock.Handle(func(r *wiremock.Request) wiremock.Script {
		if _, ok := r.JSON["tools"]; !ok {
			return wiremock.Script{Text: []string{"## Goal", " never", " finished"}, HangAfter: 2}
		}
		return e.script(r)
	})
	s := svStartInProc(t, e)
	a := s.dial("A")
	const sid = "abort-tree"
	svCreate(a, sid)
	svPrompt(a, sid, "first question")
	svPrompt(a, sid, "second question")
	nodes, before := svTree(a, sid)

	a.cursor = a.mark()
	from := a.mark()
	a.send(svM{"id": "nav", "type": "navigate_tree", "sessionId": sid, "targetId": svNodeID(t, nodes, "message/assistant "+svAnswer("first question")),
		"options": svM{"summarize": true}})
	for {
		if ev := a.waitEvent(sid, "state_changed"); svStr(ev.m, "event", "state") == "compacting" {
			break
		}
	}
	svEq(t, "state during the summary", svStr(a.must("get_state", svM{"sessionId": sid}).m, "data", "state"), "compacting")
	a.must("abort", svM{"sessionId": sid})
	_, r := a.responseFrom(from, "nav")
	svWantOK(t, r)
	svEq(t, "data", r.m["data"], svM{"cancelled": true, "aborted": true})
	after, ar := svTree(a, sid)
	svEq(t, "nodes", after, nodes)
	svEq(t, "leaf", svStr(ar.m, "data", "currentLeafId"), svStr(before.m, "data", "currentLeafId"))
	// And the session goes on.
	svPrompt(a, sid, "third question")
}
