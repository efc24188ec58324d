package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// e2eCommandFiles writes a global skill (agentd's config dir), a
// project prompt template and a project skill for e's sessions, and
// returns the global skill's file.
func e2eCommandFiles(t *testing.T, e *e2eEnv) string {
	t.Helper()
	skill := filepath.Join(e.home, ".agentd", "skills", "deploy", "SKILL.md")
	writeFileAll(t, skill, "---\nname: deploy\ndescription: Deploy the service. Use when asked to ship.\n---\n# Deploy\nRun DEPLOY-SKILL-BODY ./ship.sh from the skill directory.\n")
	writeFileAll(t, filepath.Join(e.cwd, ".pi", "prompts", "review.md"), "---\ndescription: Review a file\nargument-hint: <file>\n---\nREVIEW-TEMPLATE: review $1 for bugs ($ARGUMENTS).\n")
	writeFileAll(t, filepath.Join(e.cwd, ".agents", "skills", "lint", "SKILL.md"), "---\ndescription: Lint the code.\n---\nLINT-BODY\n")
	return skill
}

// e2eWantCommands checks a get_commands listing: the project template,
// the global and project skills and the built-ins, each with its source.
func e2eWantCommands(t *testing.T, cmds []any, e *e2eEnv, skill string) {
	t.Helper()
	want := map[string][3]string{ // name → source, location, path
		"review":       {"prompt", "project", filepath.Join(e.cwd, ".pi", "prompts", "review.md")},
		"skill:deploy": {"skill", "user", skill},
		"skill:lint":   {"skill", "project", filepath.Join(e.cwd, ".agents", "skills", "lint", "SKILL.md")},
		"help":         {"builtin", "", ""},
		"compact":      {"builtin", "", ""},
		"model":        {"builtin", "", ""},
		"fork":         {"builtin", "", ""},
		"undo":         {"builtin", "", ""},
		"redo":         {"builtin", "", ""},
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		name := cmdStr(c, "name")
		w, ok := want[name]
		if !ok {
			continue
		}
		seen[name] = true
		if got := [3]string{cmdStr(c, "source"), cmdStr(c, "location"), cmdStr(c, "path")}; got != w {
			t.Errorf("command %s: %v, want %v", name, got, w)
		}
		if cmdStr(c, "description") == "" {
			t.Errorf("command %s has no description", name)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("get_commands lacks %s: %v", name, cmds)
		}
	}
}

// agentd rpc lists the templates, skills and built-ins, expands a
// template and a skill command before the model sees them (in prompt and
// in follow_up), puts the skills in the system prompt, and runs /help
// itself.
func TestRPCCommandsSkillsAndTemplates(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	skill := e2eCommandFiles(t, e)
	p := e.start("--no-session")

	gc := p.ok(`{"id":"gc","type":"get_commands"}`)
	e2eWantCommands(t, e2eAt(gc, "data", "commands").([]any), e, skill)
	gs := p.ok(`{"id":"gs","type":"get_skills"}`)
	skills := e2eAt(gs, "data", "skills").([]any)
	// The project's skills come first, as pi lists them.
	if len(skills) != 2 || e2eStr(skills[0], "name") != "lint" || e2eStr(skills[1], "name") != "deploy" || e2eStr(skills[1], "filePath") != skill ||
		e2eStr(skills[1], "baseDir") != filepath.Dir(skill) || e2eStr(skills[1], "source") != "user" {
		t.Fatalf("get_skills: %s", e2eJSON(skills))
	}

	help := p.ok(`{"id":"h","type":"prompt","message":"/help"}`)
	_ = help
	n := p.eventWhere("notify", func(v any) bool { return e2eStr(v, "method") == "notify" })
	if msg := e2eStr(n, "message"); !strings.Contains(msg, "/review <file>: Review a file") || !strings.Contains(msg, "/skill:deploy") {
		t.Fatalf("/help notify: %s", e2eJSON(n))
	}
	if len(e.mock.Requests()) != 0 {
		t.Fatalf("/help reached the model")
	}

	p.ok(`{"id":"p1","type":"prompt","message":"/review src/x.go now"}`)
	p.event("agent_end")
	body := string(e.mock.LastRequest(t).Body)
	if !strings.Contains(body, "REVIEW-TEMPLATE: review src/x.go for bugs (src/x.go now).") || strings.Contains(body, "/review") {
		t.Fatalf("the template was not expanded in the request:\n%s", body)
	}
	if !strings.Contains(body, "\\u003cavailable_skills\\u003e") && !strings.Contains(body, "<available_skills>") {
		t.Fatalf("no skills in the system prompt:\n%s", body)
	}
	if !strings.Contains(body, "\\u003cname\\u003edeploy") && !strings.Contains(body, "<name>deploy</name>") {
		t.Fatalf("the deploy skill is not in the system prompt:\n%s", body)
	}
	if strings.Contains(body, "DEPLOY-SKILL-BODY") {
		t.Fatalf("a skill's body is in the prompt before it was asked for:\n%s", body)
	}

	p.ok(`{"id":"p2","type":"prompt","message":"/skill:deploy to staging"}`)
	p.event("agent_end")
	body = string(e.mock.LastRequest(t).Body)
	for _, w := range []string{"DEPLOY-SKILL-BODY", "skill name=", "References are relative to " + filepath.Dir(skill), "to staging"} {
		if !strings.Contains(strings.ReplaceAll(body, `\"`, `"`), w) {
			t.Fatalf("the skill command's request lacks %q:\n%s", w, body)
		}
	}

	// get_messages holds the expanded text, as pi records it.
	msgs := p.ok(`{"id":"m","type":"get_messages"}`)
	if !strings.Contains(e2eJSON(msgs), "REVIEW-TEMPLATE: review src/x.go") {
		t.Fatalf("messages: %s", e2eJSON(msgs))
	}
	p.close()
}

// agentd serve: get_commands and get_skills on pi-server, a template
// expanded before the model, /help run by the server, and REST's
// commands endpoint and built-in messages.
func TestServeCommandsSkillsAndTemplates(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	skill := e2eCommandFiles(t, e)
	s := svStartInProc(t, e)
	c := s.dial("a")
	svCreate(c, "cmd")

	gc := c.must("get_commands", svM{"sessionId": "cmd"})
	e2eWantCommands(t, svArr(gc.m, "data", "commands"), e, skill)
	gs := c.must("get_skills", svM{"sessionId": "cmd"})
	if sk := svArr(gs.m, "data", "skills"); len(sk) != 2 || svStr(sk[1], "name") != "deploy" {
		t.Fatalf("get_skills: %s", svJSON(sk))
	}

	h := c.must("prompt", svM{"sessionId": "cmd", "message": "/help"})
	if out := svStr(h.m, "data", "output"); !strings.Contains(out, "/skill:lint") || !strings.Contains(out, "/compact") {
		t.Fatalf("/help: %s", svJSON(h.m))
	}
	svPrompt(c, "cmd", "/review cmd/main.go")
	c.waitEvent("cmd", "agent_end")
	if body := string(e.mock.LastRequest(t).Body); !strings.Contains(body, "REVIEW-TEMPLATE: review cmd/main.go for bugs") {
		t.Fatalf("not expanded:\n%s", body)
	}
	m := c.must("prompt", svM{"sessionId": "cmd", "message": "/model"})
	if out := svStr(m.m, "data", "output"); !strings.Contains(out, "Model: mock/mock-model") {
		t.Fatalf("/model: %s", svJSON(m.m))
	}

	// REST: the endpoint, a built-in posted as a message, a template.
	rsOK(t, s, "PUT", rsConvPath("rcmd"), map[string]any{})
	r := rsOK(t, s, "GET", rsConvPath("rcmd")+"/commands", nil)
	cmds, _ := r.m["commands"].([]any)
	e2eWantCommands(t, cmds, e, skill)
	hr := rsOK(t, s, "POST", rsConvPath("rcmd"), map[string]any{"role": "user", "content": "/help"})
	if hr.m["command"] != "help" || !strings.Contains(hr.m["output"].(string), "/review") {
		t.Fatalf("REST /help: %s", hr)
	}
	conv := rsOK(t, s, "GET", rsConvPath("rcmd"), nil)
	if strings.Contains(conv.body, "/help") {
		t.Fatalf("the built-in was recorded as a message: %s", conv.body)
	}
	st := rsOpen(t, s, rsConvPath("rcmd")+"/events")
	_, conn := st.waitType(0, "connected")
	rsOK(t, s, "POST", rsConvPath("rcmd"), map[string]any{"role": "user", "content": "/review web/app.js"})
	from := st.mark()
	rsOK(t, s, "POST", rsConvPath("rcmd")+"/step", map[string]any{"session_id": conn.str("session_id")})
	st.waitType(from, "generation_complete")
	if body := string(e.mock.LastRequest(t).Body); !strings.Contains(body, "REVIEW-TEMPLATE: review web/app.js for bugs") {
		t.Fatalf("REST template not expanded:\n%s", body)
	}
}

// cmdStr reads a string field of a command from either harness's JSON.
func cmdStr(v any, key string) string {
	if m, ok := v.(map[string]any); ok {
		s, _ := m[key].(string)
		return s
	}
	return e2eStr(v, key)
}

// A global skill lives in agentd's config directory, which the sandbox
// hides from the model's tools; its own files are still readable with
// the read tool in every mode (the system prompt tells the model to read
// them), while the rest of the config directory stays hidden.
func TestSkillReadableInEverySandboxMode(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	for _, mode := range []string{"read-only", "workspace-write", "full-access"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			skill := e2eCommandFiles(t, e)
			secret := filepath.Join(e.home, ".agentd", "private-note.md")
			writeFileAll(t, secret, "PRIVATE-CONFIG-TEXT")
			e.tweak("READ SKILL", func(s *wiremock.Script) { *s = e2eToolScript("read", map[string]string{"path": skill}) })
			e.tweak("READ SECRET", func(s *wiremock.Script) { *s = e2eToolScript("read", map[string]string{"path": secret}) })
			s := svStartInProc(t, e, "--sandbox", mode)
			A := s.dial("A")
			svCreate(A, "sk")
			A.send(svM{"id": "p1", "type": "prompt", "sessionId": "sk", "message": "READ SKILL"})
			te := A.waitEvent("sk", "tool_execution_end")
			svWantOK(t, A.response("p1"))
			if !strings.Contains(te.raw, "DEPLOY-SKILL-BODY") || svAt(te.m, "event", "isError") == true {
				t.Fatalf("the skill could not be read in %s: %s", mode, te.raw)
			}
			A.waitEvent("sk", "agent_end")
			A.send(svM{"id": "p2", "type": "prompt", "sessionId": "sk", "message": "READ SECRET"})
			te = A.waitEvent("sk", "tool_execution_end")
			svWantOK(t, A.response("p2"))
			hidden := mode != "full-access"
			if strings.Contains(te.raw, "PRIVATE-CONFIG-TEXT") == hidden {
				t.Fatalf("%s: reading the config dir beside the skill: %s", mode, te.raw)
			}
		})
	}
}

// pi 0.73.1's own RpcClient getCommands() lists, from agentd rpc, the
// prompt templates and skills pi itself lists for the same HOME and
// project (real pi in rpc mode, with the mock model), with the same
// names, descriptions, sources, scopes and paths; agentd adds its
// built-ins.
func TestPiRpcClientGetCommandsMatchesPi(t *testing.T) {
	t.Parallel()
	nm := pcNodeModules(t)
	srv := pcNewMock(t)
	home := t.TempDir()
	pcWriteHome(t, home, srv.OpenAIURL())
	root := t.TempDir()
	work := filepath.Join(root, "repo", "sub")
	writeFileAll(t, filepath.Join(root, "repo", ".git", "HEAD"), "ref: refs/heads/main\n")
	for path, text := range map[string]string{
		filepath.Join(home, ".pi", "agent", "skills", "deploy", "SKILL.md"):     "---\nname: deploy\ndescription: Deploy the service.\n---\nBody\n",
		filepath.Join(home, ".pi", "agent", "skills", "group", "x", "SKILL.md"): "---\nname: x\ndescription: A nested skill.\n---\n",
		filepath.Join(home, ".pi", "agent", "skills", "loose.md"):               "---\nname: loose\ndescription: A skill file directly in the skills directory.\n---\n",
		filepath.Join(home, ".agents", "skills", "shared", "SKILL.md"):          "---\ndescription: From the standard's shared place.\n---\n",
		filepath.Join(home, ".agents", "skills", "ignored.md"):                  "---\ndescription: not a skill here\n---\n",
		filepath.Join(home, ".pi", "agent", "prompts", "greet.md"):              "---\ndescription: Say hello\n---\nHello $1\n",
		filepath.Join(home, ".pi", "agent", "prompts", "review.md"):             "---\ndescription: The global review\n---\nGlobal review $@\n",
		filepath.Join(work, ".pi", "prompts", "review.md"):                      "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1\n",
		filepath.Join(work, ".pi", "prompts", "plain.md"):                       "\nA template with no frontmatter whose first line is longer than sixty characters.\n",
		filepath.Join(work, ".pi", "skills", "proj", "SKILL.md"):                "---\ndescription: A project skill.\n---\n",
		filepath.Join(root, "repo", ".agents", "skills", "lint", "SKILL.md"):    "---\ndescription: Lint from the repo root.\n---\n",
		filepath.Join(root, ".agents", "skills", "above", "SKILL.md"):           "---\ndescription: Above the repository.\n---\n",
		filepath.Join(work, ".agents", "skills", "deploy", "SKILL.md"):          "---\ndescription: The project's deploy, which wins.\n---\n",
	} {
		writeFileAll(t, path, text)
	}
	testdata, err := filepath.Abs(filepath.Join("testdata", "rpcclient"))
	if err != nil {
		t.Fatal(err)
	}
	list := func(cliPath string) (string, []map[string]any) {
		t.Helper()
		cfg, _ := json.Marshal(map[string]any{"nodeModules": nm, "cliPath": cliPath, "cwd": work})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(testdata, "commands.mjs"), string(cfg))
		cmd.Dir = work
		cmd.Env = pcNodeEnv(home, "AGENTD_BIN="+agentdBin)
		cmd.WaitDelay = 10 * time.Second
		dieWithTest(cmd)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s", cliPath, err, stderr.String())
		}
		var out struct {
			PiVersion string           `json:"piVersion"`
			Commands  []map[string]any `json:"commands"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("%s: %v: %s", cliPath, err, stdout.String())
		}
		return out.PiVersion, out.Commands
	}
	version, piCmds := list(filepath.Join(nm, "@mariozechner", "pi-coding-agent", "dist", "cli.js"))
	if version != "0.73.1" {
		t.Fatalf("pi %s, want 0.73.1", version)
	}
	_, ours := list(filepath.Join(testdata, "agentd-rpc.mjs"))

	key := func(c map[string]any) string {
		si, _ := c["sourceInfo"].(map[string]any)
		return fmt.Sprintf("%v | %v | %v | %v | %v", c["name"], c["description"], c["source"], si["scope"], si["path"])
	}
	var want, got []string
	for _, c := range piCmds {
		want = append(want, key(c))
	}
	builtins := 0
	for _, c := range ours {
		if c["source"] == "builtin" {
			builtins++
			continue
		}
		got = append(got, key(c))
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 9 || !slices.Equal(got, want) {
		t.Fatalf("getCommands() from agentd:\n%s\nfrom pi:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("pi and agentd list:\n%s", strings.Join(want, "\n"))
	if builtins < 4 {
		t.Fatalf("agentd lists %d built-ins: %v", builtins, ours)
	}
}

// The official ACP SDK as the editor: available_commands_update after
// session/new lists the built-ins, templates and skills; session/new's
// _meta names the files the system prompt was built from; a template is
// expanded before the model; /help is answered by agentd itself.
// Bridged to agentd serve (--connect), the same, from the server's
// catalog.
func TestACPCommandsWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	for _, bridged := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "connect"}[bridged], func(t *testing.T) {
			t.Parallel()
			acpCommandsCase(t, bridged)
		})
	}
}

func acpCommandsCase(t *testing.T, bridged bool) {
	e := e2eNewEnv(t, e2eOpts{})
	e2eCommandFiles(t, e)
	writeFileAll(t, filepath.Join(e.cwd, "AGENTS.md"), "ACP-RULE")
	var args []string
	if bridged {
		s := svStartInProc(t, e)
		args = []string{"--connect", "ws://" + s.addr + "/"}
	}
	steps := e.acpClient([]string{"init", "new", "commands", "prompt:/review acp.go", "prompt:/help", "prompt:/undo"}, args...)

	newS := acpFind(t, steps, "new")
	files, _ := svAt(newS.Result, "_meta", "agentd", "contextFiles").([]any)
	if len(files) != 1 || svStr(files[0], "path") != filepath.Join(e.cwd, "AGENTS.md") {
		t.Fatalf("session/new _meta: %v", newS.Result)
	}
	cu := acpFind(t, steps, "commands").Updates[0]
	byName := map[string]map[string]any{}
	for _, c := range cu["availableCommands"].([]any) {
		m := c.(map[string]any)
		byName[m["name"].(string)] = m
	}
	for _, n := range []string{"help", "compact", "model", "fork", "undo", "redo", "review", "skill:deploy", "skill:lint"} {
		if byName[n] == nil || byName[n]["description"] == "" {
			t.Errorf("available_commands_update lacks %s: %v", n, cu)
		}
	}
	if svStr(byName["review"], "input", "hint") != "<file>" {
		t.Errorf("review's input hint: %v", byName["review"])
	}
	rv := acpFind(t, steps, "prompt:/review acp.go")
	if rv.StopReason != "end_turn" || !strings.Contains(rv.Text, "REVIEW-TEMPLATE: review acp.go") {
		t.Fatalf("/review: %q %q", rv.StopReason, rv.Text)
	}
	h := acpFind(t, steps, "prompt:/help")
	if h.StopReason != "end_turn" || !strings.Contains(h.Text, "/skill:deploy") {
		t.Fatalf("/help: %q %q", h.StopReason, h.Text)
	}
	// /undo, the built-in, takes the /review prompt back (it changed
	// no files).
	u := acpFind(t, steps, "prompt:/undo")
	if u.StopReason != "end_turn" || !strings.Contains(u.Text, "Undid your last message") || !strings.Contains(u.Text, "REVIEW-TEMPLATE: review acp.go") {
		t.Fatalf("/undo: %q %q", u.StopReason, u.Text)
	}
	for _, r := range e.mock.Requests() {
		if strings.Contains(string(r.Body), "/help") || strings.Contains(string(r.Body), "/undo") {
			t.Fatalf("a built-in reached the model: %s", r.Body)
		}
	}
}
