package interaction

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/agentd-dev/agentd/internal/tool"
)

// tree is a working directory next to a protected one, with the links a
// model could use to get from one to the other:
//
//	prot/x, prot/d/PROTECTED   protected files (reading "PROTECTED")
//	data/prot/x                behind plink
//	plink -> data/prot         a protected name that is itself a link
//	elsewhere/z                neither protected nor in the project
//	home/                      the home directory
//	home/.ssh/id               a key
//	work/keys -> ../home/.ssh  a link to it from the project
//	work/                      the working directory (the project)
//	work/own.txt, work/src/    the project's own files
//	work/link -> root/prot     a directory link into the protected tree
//	work/rel -> ../prot        the same, relative
//	work/dangle -> root/prot/new   a link to a protected file not there yet
//	work/out -> ../elsewhere   a link out of the project
type tree struct {
	root, cwd, home string
	env             tool.Env
}

// protected is the content of the protected files: a tool output that
// holds it, or names prot/d's file, has seen the protected tree.
const protected = "PROTECTED\n"

func newTree(t *testing.T) tree {
	t.Helper()
	root := t.TempDir()
	tr := tree{root: root, cwd: filepath.Join(root, "work"), home: filepath.Join(root, "home")}
	for _, d := range []string{"prot/d", "data/prot", "elsewhere", "home/.ssh", "work/src"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, content := range map[string]string{
		"prot/x": protected, "prot/d/PROTECTED": protected, "data/prot/x": protected,
		"elsewhere/z": "theirs\n", "work/own.txt": "mine\n", "home/.ssh/id": "key\n",
	} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{
		{"plink", filepath.Join(root, "data/prot")},
		{"work/link", filepath.Join(root, "prot")},
		{"work/rel", "../prot"},
		{"work/dangle", filepath.Join(root, "prot/new")},
		{"work/out", "../elsewhere"},
		{"work/keys", "../home/.ssh"},
	} {
		if err := os.Symlink(l[1], filepath.Join(root, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	tr.env = tool.Env{Cwd: tr.cwd, Home: tr.home}
	return tr
}

func (tr tree) abs(rel string) string { return filepath.Join(tr.root, rel) }

func (tr tree) policy(t *testing.T, rules string) Policy {
	t.Helper()
	// Escaped: t.TempDir names are safe, but a pattern must not depend on it.
	rules = strings.ReplaceAll(rules, "ROOT", escapeGlob(tr.root))
	p, err := ParsePolicy([]byte(rules))
	if err != nil {
		t.Fatalf("%s: %v", rules, err)
	}
	return p
}

func pathCall(name, path string) tool.Call {
	args := map[string]any{"path": path}
	switch name {
	case "write":
		args["content"] = "pwned\n"
	case "edit":
		args["edits"] = []map[string]string{{"oldText": "PROTECTED", "newText": "pwned"}}
	case "find":
		args["pattern"] = "*"
	case "grep":
		args["pattern"] = "PROTECTED"
	}
	raw, _ := json.Marshal(args)
	return tool.Call{ID: "call_" + name, Name: name, Args: raw}
}

// TestPathRuleBypasses: every spelling of a protected file that the tools
// resolve to it is denied, for each file tool, by the gate end to end.
// A call the gate lets through runs the real tool, so a miss shows as
// what the tool did to the protected tree.
func TestPathRuleBypasses(t *testing.T) {
	spellings := []struct {
		name string
		// path to the protected file (x) or directory (d) from the
		// working directory; "NAME" stands for x or d.
		path func(tr tree) string
	}{
		{"absolute", func(tr tree) string { return tr.abs("prot/NAME") }},
		{"relative to the cwd", func(tree) string { return "../prot/NAME" }},
		{"home then up", func(tree) string { return "~/../prot/NAME" }},
		{"at prefix", func(tr tree) string { return "@" + tr.abs("prot/NAME") }},
		{"directory link", func(tree) string { return "link/NAME" }},
		{"relative directory link", func(tree) string { return "rel/NAME" }},
		{"dotdot through a link", func(tree) string { return "src/../link/NAME" }},
	}
	tools := []struct {
		name string
		// target is what the call names: the file x or the directory d.
		target string
	}{
		{"read", "x"}, {"write", "x"}, {"edit", "x"},
		{"ls", "d"}, {"find", "d"}, {"grep", "d"},
	}
	for _, tl := range tools {
		for _, sp := range spellings {
			t.Run(tl.name+"/"+sp.name, func(t *testing.T) {
				tr := newTree(t)
				p := tr.policy(t, `{"rules": [{"match": "ROOT/prot/*", "action": "deny", "reason": "protected"}]}`)
				path := strings.ReplaceAll(sp.path(tr), "NAME", tl.target)
				d := gateAndRun(t, tr, p, pathCall(tl.name, path))
				if d.Outcome != OutcomeDenied || resultText(d) != "Tool call denied by policy: protected" {
					t.Errorf("%s %q: %s %q, want denied", tl.name, path, d.Outcome, resultText(d))
				}
			})
		}
		t.Run(tl.name+"/unprotected still runs", func(t *testing.T) {
			tr := newTree(t)
			p := tr.policy(t, `{"rules": [{"match": "ROOT/prot/*", "action": "deny"}]}`)
			target := "own.txt"
			if tl.target == "d" {
				target = "src"
			}
			if d := gateAndRun(t, tr, p, pathCall(tl.name, target)); d.Outcome != OutcomeAllowed {
				t.Errorf("%s %s: %s %q", tl.name, target, d.Outcome, resultText(d))
			}
		})
	}
}

// gateAndRun decides call with a gate over p in tr's working directory
// and, when the gate lets it through, runs the real tool, failing the
// test if that touched the protected tree.
func gateAndRun(t *testing.T, tr tree, p Policy, c tool.Call) Decision {
	t.Helper()
	g, err := NewGate(p, NewBroker(BrokerOptions{}), tr.env, GateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := g.Check(t.Context(), c)
	if !d.Run {
		return d
	}
	tl, err := tool.New(c.Name, tr.env)
	if err != nil {
		t.Fatal(err)
	}
	res := tl.Execute(t.Context(), tool.Call{ID: c.ID, Name: c.Name, Args: d.Args}, nil)
	text := ""
	for _, part := range res.Content {
		text += part.Text
	}
	for _, f := range []string{"prot/x", "prot/d/PROTECTED", "prot/new"} {
		if b, err := os.ReadFile(tr.abs(f)); (err == nil) != (f != "prot/new") || err == nil && string(b) != protected {
			t.Errorf("the gate let %s %s change %s to %q (%v)", c.Name, c.Args, f, b, err)
		}
	}
	if strings.Contains(text, "PROTECTED") {
		t.Errorf("the gate let %s %s see the protected tree: %q", c.Name, c.Args, text)
	}
	return d
}

// TestEvaluatePaths covers what path rules mean beyond the bypasses:
// patterns resolved like paths, both forms of a link, the most
// restrictive answer, and what stays textual.
func TestEvaluatePaths(t *testing.T) {
	tr := newTree(t)
	protect := `{"rules": [{"match": "ROOT/prot/*", "action": "deny"}]}`
	project := `{"default": "ask", "rules": [
		{"tool": "write", "match": "./*", "action": "allow"},
		{"tool": "write", "action": "deny"}]}`
	tests := []struct {
		name   string
		policy string
		call   tool.Call
		want   Action
	}{
		{"write through a dangling link", protect, pathCall("write", "dangle"), ActionDeny},
		{"new file under a linked directory", protect, pathCall("write", "link/new.txt"), ActionDeny},
		{"new directories under a linked directory", protect, pathCall("write", "rel/a/b/c.txt"), ActionDeny},
		{"the linked directory itself does not match prot/*", protect, pathCall("ls", "link"), ActionAllow},
		{"ls with no path lists the cwd", `{"rules": [{"match": "ROOT/work", "action": "deny"}]}`,
			tool.Call{Name: "ls", Args: json.RawMessage(`{}`)}, ActionDeny},
		{"find with an empty path searches the cwd", `{"rules": [{"match": "ROOT/work", "action": "deny"}]}`,
			pathCall("find", ""), ActionDeny},
		{"a rule on a linked name covers its target", `{"rules": [{"match": "ROOT/plink/*", "action": "deny"}]}`,
			pathCall("read", tr.abs("data/prot/x")), ActionDeny},
		{"a rule on a linked name covers itself", `{"rules": [{"match": "ROOT/plink/*", "action": "deny"}]}`,
			pathCall("read", tr.abs("plink/x")), ActionDeny},
		{"a rule on the target covers the linked name", `{"rules": [{"match": "ROOT/data/prot/*", "action": "deny"}]}`,
			pathCall("read", tr.abs("plink/x")), ActionDeny},
		{"a literal rule on a linked file", `{"rules": [{"match": "ROOT/plink/x", "action": "deny"}]}`,
			pathCall("edit", tr.abs("data/prot/x")), ActionDeny},
		{"relative patterns are relative to the cwd", `{"rules": [{"match": ".env", "action": "deny"}]}`,
			pathCall("write", "src/../.env"), ActionDeny},
		{"relative pattern, other file", `{"rules": [{"match": ".env", "action": "deny"}]}`,
			pathCall("write", "src/.env"), ActionAllow},
		{"relative pattern, absolute call", `{"rules": [{"match": "src/*", "action": "deny"}]}`,
			pathCall("read", tr.abs("work/src/a.go")), ActionDeny},
		{"home pattern", `{"rules": [{"match": "~/.ssh/*", "action": "deny"}]}`,
			pathCall("read", tr.abs("home/.ssh/id_ed25519")), ActionDeny},
		{"home pattern, relative call", `{"rules": [{"match": "~/.ssh/*", "action": "deny"}]}`,
			pathCall("read", "../home/.ssh/id_ed25519"), ActionDeny},
		{"wildcard-first pattern matches anywhere", `{"rules": [{"match": "*.pem", "action": "deny"}]}`,
			pathCall("read", "@certs/key.pem"), ActionDeny},
		{"wildcard-first pattern sees the real path", `{"rules": [{"match": "*/prot/*", "action": "deny"}]}`,
			pathCall("read", "link/x"), ActionDeny},
		{"partial name is not resolved", `{"rules": [{"match": "ROOT/pro*", "action": "deny"}]}`,
			pathCall("read", "link/x"), ActionDeny},
		{"inside the project", project, pathCall("write", "src/new.go"), ActionAllow},
		{"inside the project, absolute", project, pathCall("write", tr.abs("work/own.txt")), ActionAllow},
		{"outside the project", project, pathCall("write", "../elsewhere/z"), ActionDeny},
		{"a link out of the project", project, pathCall("write", "out/z"), ActionDeny},
		{"a link out of the project, absolute", `{"rules": [
			{"tool": "write", "match": "ROOT/work/*", "action": "allow"},
			{"tool": "write", "action": "deny"}]}`, pathCall("write", tr.abs("work/out/z")), ActionDeny},
		{"a link into a protected tree, allowed first", `{"rules": [
			{"match": "ROOT/work/*", "action": "allow"},
			{"match": "ROOT/prot/*", "action": "deny"}]}`, pathCall("read", "link/x"), ActionDeny},
		{"ask beats allow", `{"default": "allow", "rules": [
			{"match": "ROOT/work/*", "action": "allow"},
			{"match": "ROOT/prot/*", "action": "ask"}]}`, pathCall("read", "link/x"), ActionAsk},
		{"explicit args.path is a path rule", `{"rules": [{"tool": "read", "arg": "args.path", "match": "ROOT/prot/*", "action": "deny"}]}`,
			pathCall("read", "link/x"), ActionDeny},
		{"other args stay textual", `{"rules": [{"tool": "grep", "arg": "args.pattern", "match": "PROTECTED", "action": "deny"}]}`,
			pathCall("grep", "src"), ActionDeny},
		{"bash commands stay textual", protect,
			tool.Call{Name: "bash", Args: json.RawMessage(`{"command":"cat ../prot/x"}`)}, ActionAllow},
		{"bash command glob", `{"rules": [{"tool": "bash", "match": "*/prot/*", "action": "deny"}]}`,
			tool.Call{Name: "bash", Args: json.RawMessage(`{"command":"cat ../prot/x"}`)}, ActionDeny},
		{"a path that is not a string", protect,
			tool.Call{Name: "read", Args: json.RawMessage(`{"path":["..","prot","x"]}`)}, ActionAllow},
		{"an escaped wildcard is a literal directory", fmt.Sprintf(`{"rules": [{"match": %q, "action": "deny"}]}`,
			escapeGlob(tr.abs("we[i]rd"))+"/*"), pathCall("read", "../we[i]rd/f"), ActionDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tr.policy(t, tt.policy)
			if got, _ := p.Evaluate(tr.env, tt.call); got != tt.want {
				t.Errorf("%s %s = %s, want %s", tt.call.Name, tt.call.Args, got, tt.want)
			}
		})
	}
}

// TestReadmePolicy: the README's example policy does what its text says.
func TestReadmePolicy(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "A permission policy (`--policy <file>`)")
	if !ok {
		t.Fatal("README: the policy example is gone")
	}
	_, after, _ = strings.Cut(after, "```json\n")
	example, _, _ := strings.Cut(after, "```")
	p, err := ParsePolicy([]byte(example))
	if err != nil {
		t.Fatalf("README example: %v", err)
	}
	tr := newTree(t)
	bash := func(cmd string) tool.Call {
		raw, _ := json.Marshal(map[string]string{"command": cmd})
		return tool.Call{Name: "bash", Args: raw}
	}
	tests := []struct {
		claim string
		call  tool.Call
		want  Action
	}{
		{"runs git status", bash("git status"), ActionAllow},
		{"runs git diff", bash("git diff"), ActionAllow},
		{"asks before any other command", bash("make"), ActionAsk},
		{"asks before a command riding on git status", bash("git status; rm -rf ~"), ActionAsk},
		{"writes in the project", pathCall("write", "src/new.go"), ActionAllow},
		{"edits in the project", pathCall("edit", tr.abs("work/own.txt")), ActionAllow},
		{"no write outside", pathCall("write", "../elsewhere/z"), ActionDeny},
		{"no write outside via ~", pathCall("write", "~/../elsewhere/z"), ActionDeny},
		{"no write outside via @", pathCall("write", "@"+tr.abs("elsewhere/z")), ActionDeny},
		{"no edit outside through a link", pathCall("edit", "out/z"), ActionDeny},
		{"no edit outside", pathCall("edit", tr.abs("prot/x")), ActionDeny},
		{"no reading keys", pathCall("read", "~/.ssh/id"), ActionDeny},
		{"no reading keys through a link", pathCall("read", "keys/id"), ActionDeny},
		{"no listing keys", pathCall("ls", "../home/.ssh"), ActionDeny},
		{"no listing keys through a link", pathCall("find", "keys"), ActionDeny},
		{"no grep in keys", pathCall("grep", "~/.ssh"), ActionDeny},
		{"no writing keys", pathCall("write", "~/.ssh/authorized_keys"), ActionDeny},
		{"reads elsewhere", pathCall("read", "../elsewhere/z"), ActionAllow},
	}
	for _, tt := range tests {
		if got, _ := p.Evaluate(tr.env, tt.call); got != tt.want {
			t.Errorf("%s: %s %s = %s, want %s", tt.claim, tt.call.Name, tt.call.Args, got, tt.want)
		}
	}
}

// TestGateShowsTheRealPath: a person asked about "link/x" is shown the
// file it really is.
func TestGateShowsTheRealPath(t *testing.T) {
	tr := newTree(t)
	p := tr.policy(t, `{"default": "ask"}`)
	tests := []struct {
		call tool.Call
		want string
	}{
		{pathCall("write", "link/x"), "link/x → " + tr.abs("prot/x")},
		{pathCall("ls", ""), tr.cwd},
		{call("bash", `{"command":"ls link"}`), "ls link"},
	}
	for _, tt := range tests {
		synctest.Test(t, func(t *testing.T) {
			b := NewBroker(BrokerOptions{})
			g, err := NewGate(p, b, tr.env, GateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			done := check(t.Context(), g, tt.call)
			req := onlyPending(t, b)
			if req.Message != tt.want {
				t.Errorf("message %q, want %q", req.Message, tt.want)
			}
			answerNext(t, b, Response{Verdict: VerdictReject})
			<-done
		})
	}
}

// BenchmarkEvaluatePathRules: the cost path rules add to a tool call
// (resolving the call's path and each rule's pattern, with the syscalls
// that takes), on a write through a directory link.
func BenchmarkEvaluatePathRules(b *testing.B) {
	root := b.TempDir()
	for _, d := range []string{"prot", "work/src"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "prot"), filepath.Join(root, "work/link")); err != nil {
		b.Fatal(err)
	}
	p, err := ParsePolicy([]byte(strings.ReplaceAll(`{"default": "ask", "rules": [
		{"tool": "bash", "match": "git *", "action": "allow"},
		{"match": "~/.ssh/*", "action": "deny"},
		{"match": "ROOT/prot/*", "action": "deny"},
		{"tool": "write", "match": "./*", "action": "allow"},
		{"tool": "edit", "match": "./*", "action": "allow"},
		{"tool": "write", "action": "deny"},
		{"tool": "edit", "action": "deny"}]}`, "ROOT", escapeGlob(root))))
	if err != nil {
		b.Fatal(err)
	}
	env := tool.Env{Cwd: filepath.Join(root, "work"), Home: filepath.Join(root, "home")}
	c := pathCall("write", "link/sub/new.txt")
	b.ReportAllocs()
	for b.Loop() {
		if a, _ := p.Evaluate(env, c); a != ActionDeny {
			b.Fatal(a)
		}
	}
}
