package acp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/trust"
)

// startsRecorder starts MCP servers with a real Manager and says, after
// each Open returned, which servers it started.
type startsRecorder struct {
	m       *mcp.Manager
	started chan []string
}

func (r *startsRecorder) Open(ctx context.Context, servers []mcp.ServerConfig, cwd string) *mcp.Set {
	set := r.m.Open(ctx, servers, cwd)
	var names []string
	for _, s := range servers {
		names = append(names, s.Name)
	}
	r.started <- names
	return set
}

// waitAsked reads frames, handling them, until the agent asks for a
// permission; it returns the request's params.
func (c *client) waitAsked() map[string]any {
	c.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case p := <-c.asked:
			return p
		default:
		}
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatal("output ended before a permission request")
			}
			m, isReq := f["method"].(string)
			if !isReq {
				c.t.Fatalf("unexpected frame %v", f)
			}
			c.handle(m, f)
		case <-timeout:
			c.t.Fatal("no permission request")
		}
	}
}

// plantProject writes the .agentd/mcp.json a confined model could have
// written: a "server" that leaves a marker outside the workspace.
func plantProject(t *testing.T, project, marker string) []byte {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"planted": map[string]any{"command": "/bin/sh", "args": []string{"-c", "echo ESCAPED > " + marker + "; exit 1"}},
	}})
	if err := os.MkdirAll(filepath.Join(project, ".agentd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, mcp.ProjectFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A project's .agentd/mcp.json starts nothing because it appeared: the
// session opens without it and the editor is asked. Refused, nothing
// runs; trusted, its servers start and the grant is kept for that
// content, so the next session starts them without asking; changed, the
// file is asked about again.
func TestProjectMCPNeedsTrust(t *testing.T) {
	project, outside := t.TempDir(), t.TempDir()
	marker := filepath.Join(outside, "marker")
	plantProject(t, project, marker)
	store := trust.Open(filepath.Join(t.TempDir(), trust.FileName))
	rec := &startsRecorder{m: mcp.New(mcp.Options{Environ: []string{"PATH=" + os.Getenv("PATH")}, StartTimeout: 10 * time.Second}), started: make(chan []string, 8)}
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	c := startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test", MCP: rec, Trust: store})
	c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	open := func() string {
		t.Helper()
		return result(t, c.call("session/new", map[string]any{"cwd": project, "mcpServers": []any{}}))["sessionId"].(string)
	}
	closeSession := func(sid string) {
		t.Helper()
		result(t, c.call("session/close", map[string]any{"sessionId": sid}))
	}

	// Refused.
	c.answer = selected(trustRefuse)
	sid := open()
	asked := c.waitAsked()
	if tc := asked["toolCall"].(map[string]any); !strings.Contains(tc["title"].(string), mcp.ProjectFile) || !strings.Contains(svJSONString(tc), "ESCAPED") {
		t.Fatalf("the question does not show the file and its command: %v", asked)
	}
	closeSession(sid)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the planted server ran without trust: %v", err)
	}
	select {
	case s := <-rec.started:
		t.Fatalf("servers started without trust: %v", s)
	default:
	}

	// Trusted and remembered.
	c.answer = selected(trustRemember)
	sid = open()
	c.waitAsked()
	if s := <-rec.started; len(s) != 1 || s[0] != "planted" {
		t.Fatalf("started %v", s)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the trusted server did not run: %v", err)
	}
	closeSession(sid)
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}

	// The grant holds for the next session: no question.
	c.answer = nil
	sid = open()
	if s := <-rec.started; len(s) != 1 || s[0] != "planted" {
		t.Fatalf("started %v", s)
	}
	closeSession(sid)
	select {
	case p := <-c.asked:
		t.Fatalf("asked again for a trusted file: %v", p)
	default:
	}

	// A model rewrites the file: the grant does not cover it.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	marker2 := filepath.Join(outside, "marker2")
	plantProject(t, project, marker2)
	c.answer = selected(trustRefuse)
	sid = open()
	c.waitAsked()
	closeSession(sid)
	if _, err := os.Stat(marker2); !os.IsNotExist(err) {
		t.Fatalf("the changed file's server ran: %v", err)
	}
}

func svJSONString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// session/load of a session in a project whose file nobody trusted
// starts nothing either, and asks once the session is loaded.
func TestLoadAsksToTrustTheProject(t *testing.T) {
	project, outside := t.TempDir(), t.TempDir()
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	c := startAgent(t, ts)
	sid := c.newSession(project)
	result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "first words"}}}))

	marker := filepath.Join(outside, "marker")
	plantProject(t, project, marker)
	rec := &startsRecorder{m: mcp.New(mcp.Options{Environ: []string{"PATH=" + os.Getenv("PATH")}, StartTimeout: 10 * time.Second}), started: make(chan []string, 8)}
	store := trust.Open(filepath.Join(t.TempDir(), trust.FileName))
	c2 := startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test", MCP: rec, Trust: store})
	c2.answer = selected(trustOnce)
	c2.call("initialize", map[string]any{"protocolVersion": 1})
	result(t, c2.call("session/load", map[string]any{"sessionId": sid, "cwd": project, "mcpServers": []any{}}))
	select {
	case s := <-rec.started:
		t.Fatalf("started by session/load: %v", s)
	default:
	}
	if asked := c2.waitAsked(); !strings.Contains(svJSONString(asked), "ESCAPED") {
		t.Fatalf("asked %v", asked)
	}
	// Started for this session only: nothing was recorded.
	if s := <-rec.started; len(s) != 1 || s[0] != "planted" {
		t.Fatalf("started %v", s)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the server the person allowed did not run: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(project, mcp.ProjectFile))
	if err != nil {
		t.Fatal(err)
	}
	if store.Trusted(project, mcp.ProjectFile, data) {
		t.Fatal("'this session only' recorded a grant")
	}
}
