package acp

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// userTexts are the user messages of the model's last request.
func userTexts(p *faux.Provider) []string {
	reqs := p.Requests()
	var out []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == llm.RoleUser {
			out = append(out, m.TextContent())
		}
	}
	return out
}

// session/resume opens a stored session without replaying it; session/fork
// makes a new session holding the source's history and leaves the source
// as it was.
func TestResumeAndFork(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	cwd := t.TempDir()
	c := startAgent(t, ts)
	sid := c.newSession(cwd)
	prompt := func(c *client, sid, text string) {
		t.Helper()
		r := result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}}))
		if r["stopReason"] != StopEndTurn {
			t.Fatalf("prompt %q: %v", text, r)
		}
	}
	prompt(c, sid, "first words")
	c.takeUpdates()

	caps := result(t, c.call("initialize", map[string]any{"protocolVersion": 1}))["agentCapabilities"].(map[string]any)["sessionCapabilities"].(map[string]any)
	if caps["resume"] == nil || caps["fork"] == nil {
		t.Fatalf("sessionCapabilities %v, want resume and fork", caps)
	}

	// Fork while the source is open on this connection.
	f := result(t, c.call("session/fork", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	fid, _ := f["sessionId"].(string)
	if fid == "" || fid == sid {
		t.Fatalf("fork: %v", f)
	}
	if u := c.takeUpdates(); len(u) != 0 {
		t.Errorf("a fork replayed %v", u)
	}
	prompt(c, fid, "in the fork")
	if got := strings.Join(userTexts(ts.p), "|"); got != "first words|in the fork" {
		t.Errorf("the fork's history: %q", got)
	}
	prompt(c, sid, "in the source")
	if got := strings.Join(userTexts(ts.p), "|"); got != "first words|in the source" {
		t.Errorf("the source's history after the fork: %q", got)
	}

	// Resume on another connection: no replay, the history is there.
	c2 := startAgent(t, ts)
	c2.call("initialize", map[string]any{"protocolVersion": 1})
	result(t, c2.call("session/resume", map[string]any{"sessionId": fid, "cwd": cwd, "mcpServers": []any{}}))
	if u := c2.takeUpdates(); len(u) != 0 {
		t.Errorf("session/resume replayed %v", u)
	}
	prompt(c2, fid, "resumed")
	if got := strings.Join(userTexts(ts.p), "|"); got != "first words|in the fork|resumed" {
		t.Errorf("the resumed fork's history: %q", got)
	}
	// A fork of a session this connection has not opened.
	f2 := result(t, c2.call("session/fork", map[string]any{"sessionId": sid, "cwd": cwd}))
	prompt(c2, f2["sessionId"].(string), "second fork")
	if got := strings.Join(userTexts(ts.p), "|"); got != "first words|in the source|second fork" {
		t.Errorf("a fork of a closed session: %q", got)
	}

	for _, tt := range []struct {
		method string
		params map[string]any
		code   int
		msg    string
	}{
		{"session/resume", map[string]any{"sessionId": "nope", "cwd": cwd}, CodeResourceNotFound, "No session nope"},
		{"session/fork", map[string]any{"sessionId": "nope", "cwd": cwd}, CodeResourceNotFound, "No session nope"},
		{"session/fork", map[string]any{"cwd": cwd}, CodeInvalidParams, "sessionId is required"},
		{"session/resume", map[string]any{"sessionId": sid, "cwd": "rel"}, CodeInvalidParams, "cwd must be an absolute path"},
	} {
		r := c2.call(tt.method, tt.params)
		e, _ := r["error"].(map[string]any)
		if e == nil || e["code"] != float64(tt.code) || !strings.Contains(e["message"].(string), tt.msg) {
			t.Errorf("%s %v: %v, want %d %q", tt.method, tt.params, r, tt.code, tt.msg)
		}
	}
}

// Without session files there is nothing to resume or fork.
func TestNoResumeOrForkInMemory(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{})}
	c := startAgentWith(t, Options{Sessions: ts, Version: "test"})
	caps := result(t, c.call("initialize", map[string]any{"protocolVersion": 1}))["agentCapabilities"].(map[string]any)["sessionCapabilities"].(map[string]any)
	if caps["resume"] != nil || caps["fork"] != nil {
		t.Errorf("sessionCapabilities %v", caps)
	}
	for _, m := range []string{"session/resume", "session/fork"} {
		if e, _ := c.call(m, map[string]any{"sessionId": "x", "cwd": "/"})["error"].(map[string]any); e == nil || e["code"] != float64(CodeMethodNotFound) {
			t.Errorf("%s: %v", m, e)
		}
	}
}
