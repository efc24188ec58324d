package interaction

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/tool"
)

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything / at all", true},
		{"bash", "bash", true},
		{"bash", "Bash", false},
		{"bash", "bash2", false},
		{"git *", "git push origin main", true},
		{"git *", "git", false},
		{"git*", "git", true},
		{"/etc/*", "/etc/ssh/sshd_config", true},
		{"/etc/*", "/etcetera", false},
		{"*.go", "cmd/agentd/main.go", true},
		{"*.go", "main.go.orig", false},
		{"*_test.go", "a_test.go", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a*b", "abab", true},
		{"?", "é", true},
		{"??", "é", false},
		{"[abc]at", "bat", true},
		{"[abc]at", "rat", false},
		{"[a-c]at", "cat", true},
		{"[!a-c]at", "rat", true},
		{"[!a-c]at", "cat", false},
		{"[^a-c]at", "cat", false},
		{"[]]", "]", true},
		{"[é]", "é", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`rm \[x]`, "rm [x]", true},
		{"rm -rf *", "rm -rf /", true},
		{"*rm -rf*", "cd / && rm -rf .", true},
		{"**", "a/b/c", true},
		{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 60), false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
		if err := validGlob(tt.pattern); err != nil {
			t.Errorf("validGlob(%q) = %v", tt.pattern, err)
		}
	}
	for _, bad := range []string{"[abc", "[", "[!", `abc\`, "[a-"} {
		if err := validGlob(bad); err == nil {
			t.Errorf("validGlob(%q) accepted a malformed glob", bad)
		}
		if globMatch(bad, "abc") {
			t.Errorf("malformed %q matched", bad)
		}
	}
}

func call(name, args string) tool.Call {
	return tool.Call{ID: "call_" + name, Name: name, Args: json.RawMessage(args)}
}

func TestEvaluate(t *testing.T) {
	p, err := ParsePolicy([]byte(`{
		"default": "ask",
		"rules": [
			{"tool": "read", "action": "allow"},
			{"tool": "bash", "match": "git status*", "action": "allow"},
			{"tool": "bash", "match": "*rm -rf*", "action": "deny", "reason": "no recursive deletes"},
			{"tool": "write", "match": ".env", "action": "deny"},
			{"tool": "web_*", "arg": "args.request.url", "match": "https://intranet/*", "action": "deny"},
			{"tool": "web_*", "action": "allow"},
			{"tool": "mcp_*", "arg": "args.ids.1", "match": "4?", "action": "deny"},
			{"match": "/tmp/*", "action": "allow"}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call tool.Call
		want Action
		rule int // -1: the default decided
	}{
		{"tool rule", call("read", `{"path":"/etc/passwd"}`), ActionAllow, 0},
		{"command glob", call("bash", `{"command":"git status --short"}`), ActionAllow, 1},
		{"command glob no match falls through", call("bash", `{"command":"git push"}`), ActionAsk, -1},
		{"deny anywhere in the command", call("bash", `{"command":"cd / && rm -rf ."}`), ActionDeny, 2},
		{"path is cleaned", call("write", `{"path":"src/../.env","content":"x"}`), ActionDeny, 3},
		{"path elsewhere", call("write", `{"path":"src/.env.example"}`), ActionAsk, -1},
		{"json path", call("web_fetch", `{"request":{"url":"https://intranet/wiki"}}`), ActionDeny, 4},
		{"json path other value", call("web_fetch", `{"request":{"url":"https://example.com"}}`), ActionAllow, 5},
		{"json path missing", call("web_fetch", `{}`), ActionAllow, 5},
		{"json path array index and number", call("mcp_get", `{"ids":[1,42]}`), ActionDeny, 6},
		{"json path array out of range", call("mcp_get", `{"ids":[1]}`), ActionAsk, -1},
		{"empty tool matches any tool's key argument", call("edit", `{"path":"/tmp/x"}`), ActionAllow, 7},
		{"no key argument, match rule skipped", call("ask_user", `{"path":"/tmp/x"}`), ActionAsk, -1},
		{"key argument not a string", call("bash", `{"command":["rm","-rf"]}`), ActionAsk, -1},
		{"unparsable args", call("bash", `{"command":`), ActionAsk, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rule := p.Evaluate(tool.Env{Cwd: "/work"}, tt.call)
			if got != tt.want {
				t.Errorf("action = %q, want %q", got, tt.want)
			}
			switch {
			case tt.rule < 0 && rule != nil:
				t.Errorf("decided by %+v, want the default", *rule)
			case tt.rule >= 0 && rule != &p.Rules[tt.rule]:
				t.Errorf("decided by %v, want rules[%d]", rule, tt.rule)
			}
		})
	}
}

func TestDefaultIsAllow(t *testing.T) {
	var p Policy
	if a, _ := p.Evaluate(tool.Env{}, call("bash", `{"command":"rm -rf /"}`)); a != ActionAllow {
		t.Errorf("zero policy = %q, want allow as in pi", a)
	}
	p.Rules = []Rule{{Tool: "bash"}} // a rule with no action allows too
	if a, _ := p.Evaluate(tool.Env{}, call("bash", `{}`)); a != ActionAllow {
		t.Errorf("rule without action = %q", a)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"unknown action", `{"rules":[{"tool":"bash","action":"alow"}]}`, `unknown action "alow" (want allow, ask or deny)`},
		{"unknown default", `{"default":"maybe"}`, `unknown action "maybe"`},
		{"missing action", `{"rules":[{"tool":"x"},{"tool":"bash"}]}`, `rules[0]: action: unknown action ""`},
		{"bad tool glob", `{"rules":[{"tool":"[bash","action":"ask"}]}`, `rules[0]: tool: "[bash" has an unterminated [ class`},
		{"bad match glob", `{"rules":[{"tool":"bash","action":"ask"},{"tool":"bash","match":"rm \\","action":"deny"}]}`, `rules[1]: match: "rm \\" ends in a lone backslash`},
		{"bad arg path", `{"rules":[{"tool":"x","arg":"url","match":"*","action":"deny"}]}`, `rules[0]: arg: "url" is not a path into the arguments (want args.field)`},
		{"empty arg segment", `{"rules":[{"tool":"x","arg":"args.a..b","match":"*","action":"deny"}]}`, `empty segment`},
		{"arg without match", `{"rules":[{"tool":"x","arg":"args.url","action":"deny"}]}`, `rules[0]: arg: needs a match`},
		{"unknown key", `{"rules":[{"tool":"x","action":"deny","pattern":"*"}]}`, `unknown field "pattern"`},
		{"trailing data", `{} {}`, `unexpected data`},
		{"not JSON", `rules: []`, `policy: invalid character`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestKeyArgumentValue(t *testing.T) {
	if got := KeyArgumentValue(call("bash", `{"command":"ls -la","timeout":5}`)); got != "ls -la" {
		t.Errorf("bash: %q", got)
	}
	if got := KeyArgumentValue(call("todo", `{"todos":[]}`)); got != "" {
		t.Errorf("todo: %q", got)
	}
}
