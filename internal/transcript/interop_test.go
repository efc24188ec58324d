package transcript

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// piOutput is what testdata/pi_open.mjs prints.
type piOutput struct {
	Header        json.RawMessage   `json:"header"`
	Entries       []json.RawMessage `json:"entries"`
	LeafID        *string           `json:"leafId"`
	Messages      []json.RawMessage `json:"messages"`
	ThinkingLevel string            `json:"thinkingLevel"`
	Model         *struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	} `json:"model"`
	Name *string `json:"name"`
}

func runPi(t *testing.T, dir, file string, args ...string) piOutput {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH")
	}
	cmd := exec.Command(node, append([]string{"testdata/pi_open.mjs", dir, file}, args...)...)
	cmd.Dir = "."
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // keep pi away from the real ~/.pi
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pi_open.mjs: %v\n%s", err, stderr.Bytes())
	}
	var o piOutput
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("pi output: %v\n%s", err, out)
	}
	return o
}

// sameJSON compares two JSON texts as values, ignoring key order.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestPiOpensAgentdFiles has pi 0.73.1's own SessionManager read a session
// agentd wrote, and checks pi sees the same entries (byte for byte), the
// same context, model, thinking level and name; then has pi append to it
// and checks agentd reads the result. Set AGENTD_PI_NODE_MODULES to a
// directory holding @mariozechner/pi-coding-agent (a node_modules dir or
// the package dir itself), e.g.
//
//	mkdir -p /tmp/pinode && cd /tmp/pinode && npm install @mariozechner/pi-coding-agent@0.73.1
//	AGENTD_PI_NODE_MODULES=/tmp/pinode/node_modules go test ./transcript -run PiOpens
func TestPiOpensAgentdFiles(t *testing.T) {
	dir := os.Getenv("AGENTD_PI_NODE_MODULES")
	if dir == "" {
		t.Skip("AGENTD_PI_NODE_MODULES not set; see the test's comment to run it against pi")
	}
	f := richSession(t, t.TempDir())
	s := must[string](t)
	// Branch off before the last prompt with a summary, and continue with
	// thinking, an image and text pi must not escape.
	branch := f.Entries()[f.Len()-2].ID
	s(f.BranchWithSummary(branch, "The user said thanks; nothing else happened.", json.RawMessage(`{"readFiles":["a.txt"],"modifiedFiles":[]}`), false))
	s(f.AppendMessage(&llm.Message{Role: llm.RoleUser, Timestamp: 1700000000100, Content: []llm.Content{
		llm.Text("what's in <a.txt> & \"b\"? — café 🚀"), llm.Image("iVBORw0KGgo=", "image/png")}}))
	m := assistantMsg("It says hi.", llm.ToolCall("call_2", "read", json.RawMessage(`{"path":"a.txt","limit":10}`)))
	m.Content = append([]llm.Content{{Type: llm.ContentThinking, Thinking: "read it", ThinkingSignature: "sig=="}}, m.Content...)
	s(f.AppendMessage(m))
	s(f.AppendMessage(toolResult("call_2", "hi", true)))
	s(f.AppendThinkingLevelChange(llm.ThinkingHigh))
	s(f.AppendModelChange("openai", "gpt-5"))
	first := f.Entries()[2].ID
	s(f.AppendLabel(first, ""))
	s(f.AppendSessionInfo("Interop"))
	f.Close()

	g := must[*File](t)(Open(f.Path(), WithStrict()))
	pi := runPi(t, dir, f.Path())

	hdr := g.Header()
	if string(pi.Header) != string(hdr.AppendJSON(nil)) {
		t.Errorf("header:\n pi %s\nours %s", pi.Header, hdr.AppendJSON(nil))
	}
	ours := encodeAll(t, g.Entries())
	if len(pi.Entries) != len(ours) {
		t.Fatalf("pi sees %d entries, agentd %d", len(pi.Entries), len(ours))
	}
	for i := range ours {
		if string(pi.Entries[i]) != ours[i] {
			t.Errorf("entry %d:\n pi %s\nours %s", i, pi.Entries[i], ours[i])
		}
	}
	if pi.LeafID == nil || *pi.LeafID != g.Leaf() {
		t.Errorf("leaf: pi %v, agentd %s", pi.LeafID, g.Leaf())
	}
	c := g.Context(g.Leaf())
	if len(pi.Messages) != len(c.Messages) {
		t.Fatalf("pi's context has %d messages, agentd's %d", len(pi.Messages), len(c.Messages))
	}
	for i, mj := range msgJSON(t, c.Messages) {
		if !sameJSON(t, pi.Messages[i], []byte(mj)) {
			t.Errorf("message %d:\n pi %s\nours %s", i, pi.Messages[i], mj)
		}
	}
	if pi.ThinkingLevel != string(c.ThinkingLevel) || pi.Model == nil || pi.Model.Provider != c.Provider || pi.Model.ModelID != c.ModelID {
		t.Errorf("settings: pi %s %+v, agentd %s %s/%s", pi.ThinkingLevel, pi.Model, c.ThinkingLevel, c.Provider, c.ModelID)
	}
	if pi.Name == nil || *pi.Name != g.Name() {
		t.Errorf("name: pi %v, agentd %q", pi.Name, g.Name())
	}
	t.Logf("pi and agentd agree on %d entries and %d context messages", len(ours), len(c.Messages))
	if c.Messages[0].Role != llm.RoleCompactionSummary || c.Messages[len(c.Messages)-1].Role != llm.RoleToolResult {
		t.Errorf("context does not exercise compaction: %s", roles(c.Messages))
	}

	// pi continues the file; agentd reads what pi wrote.
	before := must[[]byte](t)(os.ReadFile(f.Path()))
	pi2 := runPi(t, dir, f.Path(), "--append")
	after := must[[]byte](t)(os.ReadFile(f.Path()))
	if !bytes.HasPrefix(after, before) {
		t.Fatal("pi rewrote agentd's lines")
	}
	h := must[*File](t)(Open(f.Path(), WithStrict()))
	if w := h.Warnings(); len(w) > 0 {
		t.Fatalf("warnings on pi's appends: %v", w)
	}
	if h.Len() != g.Len()+2 || h.Label(h.Entries()[0].ID) != "pi-label" {
		t.Fatalf("after pi's appends: %d entries", h.Len())
	}
	hc := h.Context(h.Leaf())
	if last := hc.Messages[len(hc.Messages)-1]; last.TextContent() != "appended by pi" {
		t.Fatalf("last message %+v", last)
	}
	for i, l := range encodeAll(t, h.Entries()) {
		if string(pi2.Entries[i]) != l {
			t.Errorf("entry %d after pi's append:\n pi %s\nours %s", i, pi2.Entries[i], l)
		}
	}
}
