package session_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"testing"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// TestPiOpensConversationFiles has pi 0.73.1's own SessionManager read a
// session file after everything the conversation API writes into it:
// the settings entries, an edit that branched the tree, a truncation and
// a tool call left pending by Close. pi must read every line and build
// the same context agentd does (the settings and the truncation marker
// leave it out, as custom entries). Set AGENTD_PI_NODE_MODULES as for
// transcript's TestPiOpensAgentdFiles.
func TestPiOpensConversationFiles(t *testing.T) {
	dir := os.Getenv("AGENTD_PI_NODE_MODULES")
	if dir == "" {
		t.Skip("AGENTD_PI_NODE_MODULES not set; see transcript's TestPiOpensAgentdFiles")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH")
	}
	h := newHarness(t, func(c *session.Config) { c.Policy = askBash })
	h.srv.Handle(bashModel("echo hi"))
	for _, p := range []string{"first", "second", "third"} {
		h.prompt(p)
		h.wait()
	}
	steps := []func() error{
		func() error { return h.s.SetConfirmAll(true) },
		func() error { return h.s.SetGrants(interaction.Grants{Tools: []string{"read"}}) },
		func() error { return h.s.SetTools([]string{"read", "bash"}) },
		func() error { return h.s.EditMessage(2, []llm.Content{llm.Text("second, edited")}) },
		func() error { return h.s.TruncateAt(2) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	h.prompt("run it")
	h.waitEvent(is(string(session.EventInteractionRequested)))
	path := h.s.File()
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(node, "../transcript/testdata/pi_open.mjs", dir, path)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pi_open.mjs: %v\n%s", err, stderr.Bytes())
	}
	var pi struct {
		Entries  []json.RawMessage `json:"entries"`
		LeafID   *string           `json:"leafId"`
		Messages []llm.Message     `json:"messages"`
	}
	if err := json.Unmarshal(out, &pi); err != nil {
		t.Fatalf("pi's output: %v", err)
	}
	f, err := transcript.Open(path, transcript.WithStrict())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(pi.Entries) != f.Len() || pi.LeafID == nil || *pi.LeafID != f.Leaf() {
		t.Fatalf("pi reads %d entries ending at %v, agentd %d ending at %s", len(pi.Entries), pi.LeafID, f.Len(), f.Leaf())
	}
	c := f.Context(f.Leaf())
	if len(pi.Messages) != len(c.Messages) {
		t.Fatalf("pi's context has %d messages, agentd's %d", len(pi.Messages), len(c.Messages))
	}
	for i := range c.Messages {
		a, b := c.Messages[i], pi.Messages[i]
		if a.Role != b.Role || a.TextContent() != b.TextContent() || !reflect.DeepEqual(a.ToolCalls(), b.ToolCalls()) {
			t.Errorf("message %d: agentd %s %q, pi %s %q", i, a.Role, a.TextContent(), b.Role, b.TextContent())
		}
	}
	want := "user:first | assistant:re: first | user:run it | assistant:"
	if got := convo(ptrs(c.Messages)); got != want {
		t.Fatalf("context %s, want %s", got, want)
	}
	t.Logf("pi and agentd agree on %d entries and %d context messages", f.Len(), len(c.Messages))
}

func ptrs(ms []llm.Message) []*llm.Message {
	out := make([]*llm.Message, len(ms))
	for i := range ms {
		out[i] = &ms[i]
	}
	return out
}
