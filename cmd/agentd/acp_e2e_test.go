package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// acpSDKVersion is the official ACP TypeScript SDK the end-to-end tests
// drive agentd with.
const acpSDKVersion = "2.4.0"

// acpNodeModules returns the node_modules directory the ACP SDK is
// installed in (AGENTD_ACP_NODE_MODULES) and skips the test when it is not
// set or node is missing.
func acpNodeModules(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AGENTD_ACP_NODE_MODULES")
	if dir == "" {
		t.Skip("AGENTD_ACP_NODE_MODULES is not set: run `npm install --prefix DIR @agentclientprotocol/sdk@" + acpSDKVersion + "` and set it to DIR/node_modules")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: the ACP client tests need node 20 or later")
	}
	if _, err := os.Stat(filepath.Join(dir, "@agentclientprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("AGENTD_ACP_NODE_MODULES=%s has no @agentclientprotocol/sdk: %v", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// acpStep is what the Node client printed for one step.
type acpStep struct {
	Step          string           `json:"step"`
	Result        map[string]any   `json:"result"`
	StopReason    string           `json:"stopReason"`
	Text          string           `json:"text"`
	Updates       []map[string]any `json:"updates"`
	Asked         []map[string]any `json:"asked"`
	Elicited      []map[string]any `json:"elicited"`
	FirstUpdateMs float64          `json:"firstUpdateMs"`
	TotalMs       float64          `json:"totalMs"`
	Code          *int             `json:"code"`
	Message       string           `json:"message"`
}

// acpClient runs the SDK client script through steps against `agentd acp`
// started with args, and returns its steps by name.
func (e *e2eEnv) acpClient(steps []string, args ...string) []acpStep {
	t := e.t
	t.Helper()
	modules := acpNodeModules(t)
	script, err := filepath.Abs(filepath.Join("testdata", "acp", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{script, modules}, steps...)
	all = append(all, "--", agentdBin, "acp", "--model", "mock/mock-model")
	all = append(all, args...)
	cmd := exec.Command("node", all...)
	cmd.Dir = e.cwd
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data,
		"TMPDIR=" + e.tmp, "MOCK_API_KEY=sk-mock-key", "LANG=C.UTF-8"}
	dieWithTest(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the ACP client did not finish\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	var out []acpStep
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s acpStep
		if jerr := json.Unmarshal(sc.Bytes(), &s); jerr != nil {
			t.Fatalf("client output %q: %v", sc.Text(), jerr)
		}
		out = append(out, s)
	}
	if err != nil {
		t.Fatalf("ACP client: %v\nsteps: %+v\nstderr:\n%s", err, out, stderr.String())
	}
	return out
}

func acpFind(t *testing.T, steps []acpStep, name string) acpStep {
	t.Helper()
	for _, s := range steps {
		if s.Step == name {
			return s
		}
	}
	t.Fatalf("no step %q in %+v", name, steps)
	return acpStep{}
}

// acpToolEnd is the update that ended the prompt's tool call.
func acpToolEnd(s acpStep) map[string]any {
	for _, u := range s.Updates {
		if u["sessionUpdate"] == "tool_call_update" && (u["status"] == "completed" || u["status"] == "failed") {
			return u
		}
	}
	return nil
}

// The official SDK as the editor: a streamed answer, a tool call approved
// and one rejected, a cancel while the permission request is pending, and
// after a restart the session listed and loaded with its history.
func TestACPWithTheOfficialClient(t *testing.T) {
	e := e2eNewEnv(t, e2eOpts{})
	policy := e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`)
	steps := e.acpClient([]string{
		"init", "new", "prompt:hello over acp",
		"allow:CMD:echo approved-run", "reject:CMD:echo rejected-run", "cancel:CMD:echo pending-run",
		"prompt:still here",
		"restart", "init", "list", "load", "prompt:after load",
	}, "--policy", policy)

	init := acpFind(t, steps, "init")
	caps, _ := init.Result["agentCapabilities"].(map[string]any)
	if init.Result["protocolVersion"] != float64(1) || caps["loadSession"] != true {
		t.Fatalf("initialize: %v", init.Result)
	}

	hello := acpFind(t, steps, "prompt:hello over acp")
	if hello.StopReason != "end_turn" || hello.Text != "Hello from mock! You said: hello over acp" {
		t.Fatalf("prompt: stop %q text %q", hello.StopReason, hello.Text)
	}
	if hello.FirstUpdateMs < 0 {
		t.Fatal("no session/update before the prompt's response")
	}
	t.Logf("session/prompt to first session/update: %.1f ms (whole turn %.1f ms)", hello.FirstUpdateMs, hello.TotalMs)

	allow := acpFind(t, steps, "allow:CMD:echo approved-run")
	if allow.StopReason != "end_turn" || len(allow.Asked) != 1 {
		t.Fatalf("approved: stop %q asked %v", allow.StopReason, allow.Asked)
	}
	tc, _ := allow.Asked[0]["toolCall"].(map[string]any)
	if tc["kind"] != "execute" || tc["title"] != "echo approved-run" {
		t.Fatalf("permission request's tool call: %v", tc)
	}
	var kinds []string
	for _, o := range allow.Asked[0]["options"].([]any) {
		kinds = append(kinds, o.(map[string]any)["kind"].(string))
	}
	sort.Strings(kinds)
	if strings.Join(kinds, ",") != "allow_always,allow_once,reject_always,reject_once" {
		t.Fatalf("options %v", kinds)
	}
	if end := acpToolEnd(allow); end == nil || end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "approved-run") {
		t.Fatalf("approved tool call ended %v", end)
	}

	reject := acpFind(t, steps, "reject:CMD:echo rejected-run")
	if end := acpToolEnd(reject); reject.StopReason != "end_turn" || end == nil || end["status"] != "failed" {
		t.Fatalf("rejected: stop %q end %v", reject.StopReason, end)
	}

	cancel := acpFind(t, steps, "cancel:CMD:echo pending-run")
	if cancel.StopReason != "cancelled" || len(cancel.Asked) != 1 {
		t.Fatalf("cancel while asking: stop %q asked %d", cancel.StopReason, len(cancel.Asked))
	}
	if still := acpFind(t, steps, "prompt:still here"); still.StopReason != "end_turn" {
		t.Fatalf("prompt after cancel: %q", still.StopReason)
	}

	list := acpFind(t, steps, "list")
	sessions, _ := list.Result["sessions"].([]any)
	if len(sessions) != 1 {
		t.Fatalf("list: %v", list.Result)
	}
	load := acpFind(t, steps, "load")
	var users []string
	for _, u := range load.Updates {
		if u["sessionUpdate"] == "user_message_chunk" {
			users = append(users, u["content"].(map[string]any)["text"].(string))
		}
	}
	want := []string{"hello over acp", "CMD:echo approved-run", "CMD:echo rejected-run", "CMD:echo pending-run", "still here"}
	if strings.Join(users, "|") != strings.Join(want, "|") {
		t.Fatalf("load replayed user messages %q, want %q", users, want)
	}
	if after := acpFind(t, steps, "prompt:after load"); after.StopReason != "end_turn" || !strings.Contains(after.Text, "after load") {
		t.Fatalf("prompt after load: %q %q", after.StopReason, after.Text)
	}
	for _, s := range steps {
		if s.Step == "exit" && (s.Code == nil || *s.Code != 0) {
			t.Fatalf("agentd acp exited with %v", s.Code)
		}
	}
}

// acpToolMs is how long the prompt's tool call took as the client saw
// it: from tool_call to the update that ended it.
func acpToolMs(t *testing.T, s acpStep) float64 {
	t.Helper()
	var start float64
	for _, u := range s.Updates {
		if u["sessionUpdate"] == "tool_call" {
			start, _ = u["_t"].(float64)
		}
		if u["sessionUpdate"] == "tool_call_update" && (u["status"] == "completed" || u["status"] == "failed") && start > 0 {
			end, _ := u["_t"].(float64)
			return end - start
		}
	}
	t.Fatalf("%s: no tool call", s.Step)
	return 0
}

// An MCP server named in session/new is a tool source: its tool is
// offered as <server>__<tool>, asked about by the same policy as
// built-in tools, restarted after it crashes mid-call, and its process
// ends with the session.
func TestACPMCPServerAsToolSource(t *testing.T) {
	acpNodeModules(t)
	e := e2eNewEnv(t, e2eOpts{})
	server := testMCPServer(t)
	// In the temp dir: the server runs under the session's sandbox.
	pidFile := filepath.Join(e.tmp, "mcp.pid")
	echo := func(text string) func(*wiremock.Script) {
		return func(s *wiremock.Script) {
			u := s.Usage
			*s = e2eToolScript("tiny__echo", map[string]string{"text": text})
			s.Usage = u
		}
	}
	e.tweak("MCP-ECHO", echo("via mcp"))
	e.tweak("MCP-ASK", echo("ask me first"))
	e.tweak("MCP-AGAIN", echo("after the crash"))
	e.tweak("MCP-CRASH", func(s *wiremock.Script) { *s = e2eToolScript("tiny__crash", map[string]string{}) })
	e.tweak("BUILTIN-LS", func(s *wiremock.Script) { *s = e2eToolScript("ls", map[string]string{}) })
	policy := e.writePolicy(`{"rules":[{"tool":"tiny__echo","arg":"args.text","match":"ask me*","action":"ask"}]}`)
	steps := e.acpClient([]string{
		"init", "new-mcp:tiny=" + server + "," + pidFile,
		"prompt:BUILTIN-LS", "prompt:MCP-ECHO", "prompt:BUILTIN-LS", "prompt:MCP-ECHO",
		"reject:MCP-ASK", "prompt:MCP-CRASH", "prompt:MCP-AGAIN",
	}, "--policy", policy)

	var mcpMs, lsMs []float64
	for _, s := range steps {
		switch s.Step {
		case "prompt:MCP-ECHO":
			end := acpToolEnd(s)
			if end == nil || end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "tiny echo: via mcp") || len(s.Asked) != 0 {
				t.Fatalf("MCP tool call: %v (asked %d)", end, len(s.Asked))
			}
			mcpMs = append(mcpMs, acpToolMs(t, s))
		case "prompt:BUILTIN-LS":
			lsMs = append(lsMs, acpToolMs(t, s))
		}
	}
	t.Logf("tool call as the editor sees it (tool_call to its end): MCP echo %.2f ms, built-in ls %.2f ms (second calls: %.2f vs %.2f)",
		mcpMs[0], lsMs[0], mcpMs[1], lsMs[1])

	ask := acpFind(t, steps, "reject:MCP-ASK")
	if len(ask.Asked) != 1 || ask.Asked[0]["toolCall"].(map[string]any)["title"] != "tiny__echo" {
		t.Fatalf("the policy's ask for an MCP tool: %v", ask.Asked)
	}
	if end := acpToolEnd(ask); end == nil || end["status"] != "failed" {
		t.Fatalf("rejected MCP call: %v", end)
	}
	if end := acpToolEnd(acpFind(t, steps, "prompt:MCP-CRASH")); end == nil || end["status"] != "failed" || !strings.Contains(fmt.Sprint(end["content"]), "stopped during the call") {
		t.Fatalf("crash mid-call: %v", end)
	}
	if end := acpToolEnd(acpFind(t, steps, "prompt:MCP-AGAIN")); end == nil || end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "after the crash") {
		t.Fatalf("after the restart: %v", end)
	}

	// The restarted server's process ended with agentd's session.
	if _, err := os.ReadFile(pidFile); err != nil {
		t.Fatal(err)
	}
	// The server's command line names its pid file.
	waitGoneWith(t, pidFile, "the MCP server, after agentd acp exited,")
}

// agentd rpc takes MCP servers too: --mcp-config and the project's
// .agentd/mcp.json, merged by name; the project's only once trusted
// (agentd trust), since a model working in the project can write it.
func TestRPCMCPConfig(t *testing.T) {
	e := e2eNewEnv(t, e2eOpts{})
	server := testMCPServer(t)
	cfg := filepath.Join(e.root, "mcp.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"tiny":{"command":"`+server+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.cwd, ".agentd"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The project's server also leaves a marker outside the workspace
	// when it starts.
	marker := filepath.Join(e.root, "ESCAPED")
	project := `{"mcpServers":{"proj":{"command":"/bin/sh","args":["-c","echo ran > ` + marker + `; exec ` + server + `"]}}}`
	if err := os.WriteFile(filepath.Join(e.cwd, ".agentd", "mcp.json"), []byte(project), 0o600); err != nil {
		t.Fatal(err)
	}
	e.tweak("MCP-ECHO", func(s *wiremock.Script) { *s = e2eToolScript("tiny__echo", map[string]string{"text": "from rpc"}) })
	e.tweak("MCP-PROJECT", func(s *wiremock.Script) {
		*s = e2eToolScript("proj__echo", map[string]string{"text": "from the project"})
	})
	run := func(want map[string]string) {
		t.Helper()
		p := e.start("--mcp-config", cfg)
		for _, prompt := range []string{"MCP-ECHO", "MCP-PROJECT"} {
			p.ok(`{"id":"` + prompt + `","type":"prompt","message":"` + prompt + `"}`)
			te := p.event("tool_execution_end")
			if got := e2eStr(te, "result", "content", "0", "text"); !strings.Contains(got, want[prompt]) {
				t.Errorf("%s output %q, want %q", prompt, got, want[prompt])
			}
			p.event("agent_end")
		}
		p.close()
	}
	// Untrusted: the session has --mcp-config's server, not the project's,
	// whose command never ran.
	run(map[string]string{"MCP-ECHO": "tiny echo: from rpc", "MCP-PROJECT": "proj__echo"})
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the untrusted project's server ran: %v", err)
	}
	trust := exec.Command(agentdBin, "trust", e.cwd)
	trust.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data}
	if b, err := trust.CombinedOutput(); err != nil {
		t.Fatalf("agentd trust: %v\n%s", err, b)
	}
	run(map[string]string{"MCP-ECHO": "tiny echo: from rpc", "MCP-PROJECT": "tiny echo: from the project"})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the trusted project's server did not run: %v", err)
	}
	// A model rewrites the file: the grant does not cover what it wrote.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.cwd, ".agentd", "mcp.json"), []byte(strings.Replace(project, "echo ran", "echo rewritten", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	run(map[string]string{"MCP-ECHO": "tiny echo: from rpc", "MCP-PROJECT": "proj__echo"})
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the rewritten project's server ran: %v", err)
	}
}
