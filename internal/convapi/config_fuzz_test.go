package convapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// PATCH .../config takes chat settings and a whole mcp section, whose
// env and headers values are secrets the API answers as
// SecretPlaceholder. Beyond what every decoder owes (no panic; a 4xx
// with a message, or a payload the journal keeps), these targets check
// that a refusal names the field to fix, that a decoded mcp section is
// one decodeMCP accepts again unchanged, and that a placeholder is never
// stored as if it were the secret.

// configFields are the names a refusal of a config body may point at.
var configFields = []string{"chat", "model", "tools", "thinking", "name", "confirm_all", "sandbox", "mcp"}

// refusalText is the message a client reads for err.
func refusalText(t *testing.T, err error) string {
	t.Helper()
	w := httptest.NewRecorder()
	writeError(w, slog.New(slog.DiscardHandler), httptest.NewRequest("PATCH", "/api/v2/conversations/c/config", nil), err)
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(w.Body.Bytes(), &eb) != nil {
		t.Fatalf("refusal %v: body %s", err, w.Body.Bytes())
	}
	return eb.Error
}

// wantFieldNamed checks that the refusal of body names one of fields.
func wantFieldNamed(t *testing.T, body []byte, err error, fields ...string) {
	t.Helper()
	msg := strings.ToLower(refusalText(t, err))
	for _, f := range fields {
		if strings.Contains(msg, f) {
			return
		}
	}
	t.Fatalf("body %q: refusal %q names none of the fields %s", body, msg, fields)
}

// storedMCP is the section a conversation has in the targets: one
// secret of each kind.
func storedMCP() *MCPConfig {
	return &MCPConfig{Enabled: true, AutoStart: true, Servers: []MCPServerConfig{
		{Name: "a", Enabled: true, Command: "srv-a", Env: map[string]string{"TOKEN": "s3cret-a"}},
		{Name: "b", Enabled: true, URL: "https://mcp.example/b", Headers: map[string]string{"Authorization": "Bearer s3cret-b"}},
	}}
}

// cloneMCP is a deep copy of cfg (keepSecrets fills maps in place).
func cloneMCP(t *testing.T, cfg *MCPConfig) *MCPConfig {
	t.Helper()
	var c MCPConfig
	if err := json.Unmarshal(marshal(cfg), &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// wantMCPValid checks the rules decodeMCP documents on what it accepted.
func wantMCPValid(t *testing.T, body []byte, cfg *MCPConfig) {
	t.Helper()
	names := map[string]bool{}
	for i, sc := range cfg.Servers {
		bad := func(why string) { t.Fatalf("body %q: servers[%d] %+v: %s", body, i, sc, why) }
		switch {
		case sc.Name == "":
			bad("no name")
		case names[sc.Name]:
			bad("name given twice")
		case (sc.Command == "") == (sc.URL == ""):
			bad("not exactly one of command and url")
		case len(sc.Env) > 0 && sc.Command == "":
			bad("env without a command")
		case len(sc.Headers) > 0 && sc.URL == "":
			bad("headers without a url")
		}
		names[sc.Name] = true
		if sc.URL != "" {
			u, err := url.Parse(sc.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("not an http(s) url")
			}
		}
	}
}

// decodeMCPAgain decodes cfg's JSON as a client would send it back.
func decodeMCPAgain(t *testing.T, s *Server, body []byte, cfg *MCPConfig) *MCPConfig {
	t.Helper()
	back, err := s.decodeMCP(object{"mcp": marshal(cfg)}, "mcp")
	if err != nil {
		t.Fatalf("body %q: the decoded section %s is refused when sent again: %v", body, marshal(cfg), err)
	}
	return back
}

// wantSecretsKept runs keepSecrets on cfg against old and checks that a
// placeholder either becomes the value old stores for the same server,
// key, command or url and args, or is refused naming where it is; values that
// are not placeholders stay as sent.
func wantSecretsKept(t *testing.T, body []byte, cfg, old *MCPConfig) {
	t.Helper()
	got := cloneMCP(t, cfg)
	err := keepSecrets(got, old, "mcp")
	placeholders := 0
	for _, sc := range cfg.Servers {
		for _, m := range []map[string]string{sc.Env, sc.Headers} {
			for _, v := range m {
				if v == SecretPlaceholder {
					placeholders++
				}
			}
		}
	}
	if err != nil {
		wantRefusal(t, body, err)
		if msg := refusalText(t, err); placeholders == 0 || !strings.Contains(msg, "mcp.servers[") || !strings.Contains(msg, SecretPlaceholder) {
			t.Fatalf("body %q: keepSecrets refused %d placeholders with %q", body, placeholders, msg)
		}
		return
	}
	stored := map[string]MCPServerConfig{}
	if old != nil {
		for _, sc := range old.Servers {
			stored[sc.Name] = sc
		}
	}
	for i, sc := range got.Servers {
		sent, prev := cfg.Servers[i], stored[sc.Name]
		// A value follows only a server that runs the same program: same
		// command or url, same args.
		same := prev.Command == sc.Command && prev.URL == sc.URL && slices.Equal(prev.Args, sc.Args)
		for _, m := range []struct {
			key             string
			got, sent, prev map[string]string
		}{
			{"env", sc.Env, sent.Env, prev.Env},
			{"headers", sc.Headers, sent.Headers, prev.Headers},
		} {
			if len(m.got) != len(m.sent) {
				t.Fatalf("body %q: servers[%d].%s has %d values, %d sent", body, i, m.key, len(m.got), len(m.sent))
			}
			for k, v := range m.got {
				switch {
				case v == SecretPlaceholder:
					t.Fatalf("body %q: servers[%d].%s.%s keeps the placeholder as its value", body, i, m.key, k)
				case m.sent[k] != SecretPlaceholder && v != m.sent[k]:
					t.Fatalf("body %q: servers[%d].%s.%s: sent %q, kept %q", body, i, m.key, k, m.sent[k], v)
				case m.sent[k] == SecretPlaceholder && (v != m.prev[k] || !same):
					t.Fatalf("body %q: servers[%d].%s.%s: the placeholder became %q (stored %q for %q %q %q %q, now %q %q %q)", body, i, m.key, k, v, m.prev[k],
						prev.Name, prev.Command, prev.URL, prev.Args, sc.Command, sc.URL, sc.Args)
				}
			}
		}
	}
	if old == nil && placeholders > 0 {
		t.Fatalf("body %q: %d placeholders kept with nothing stored", body, placeholders)
	}
}

// wantRedactedRoundTrip checks what a client gets from GET config and
// sends back unchanged: it decodes, and keeps every value the
// conversation has. cfg holds the real values.
func wantRedactedRoundTrip(t *testing.T, s *Server, body []byte, cfg *MCPConfig) {
	t.Helper()
	red := redacted(cfg)
	if red == nil {
		t.Fatalf("body %q: redacted(%+v) is nil", body, cfg)
	}
	for _, sc := range red.Servers {
		for _, m := range []map[string]string{sc.Env, sc.Headers} {
			for k, v := range m {
				if v != SecretPlaceholder {
					t.Fatalf("body %q: the answer shows %s=%q", body, k, v)
				}
			}
		}
	}
	back := decodeMCPAgain(t, s, body, red)
	if err := keepSecrets(back, cfg, "mcp"); err != nil {
		t.Fatalf("body %q: the section GET answers is refused when sent back: %v", body, err)
	}
	if a, b := marshal(back), marshal(cfg); string(a) != string(b) {
		t.Fatalf("body %q: sent back as answered, the section changed:\n %s\n %s", body, b, a)
	}
}

func FuzzDecodeConfig(f *testing.F) {
	seeds(f,
		`{"chat":{"name":"Renamed","tools":["read","write"],"thinking":"low","model":"faux/faux-1","confirm_all":true}}`,
		`{"chat":{"sandbox":"workspace-write"}}`,
		`{"chat":{"sandbox":"read-only","tools":[]}}`,
		`{"chat":{"sandbox":"full-access"}}`,
		`{"chat":{"sandbox":1,"name":"  "}}`,
		`{"chat":{"tools":["a__x"],"model":""},"mcp":{"servers":[{"name":"a","command":"srv-a","env":{"TOKEN":"********"}}]}}`,
		`{"mcp":{"enabled":true,"auto_start":false,"servers":[{"name":"a","command":"srv-a","args":["-v"],"env":{"TOKEN":"********","X":"1"}},{"name":"b","url":"https://mcp.example/b","headers":{"Authorization":"********"}}]}}`,
		`{"mcp":{"servers":[{"name":"a","command":"other","env":{"TOKEN":"********"}}]}}`,
		`{"mcp":{"servers":[{"name":"b","url":"https://mcp.example/c","headers":{"Authorization":"********"}}]}}`,
		`{"mcp":{"servers":[{"name":"c","url":"http://h","enabled":false,"headers":{"k":"v"}}]}}`,
		`{"mcp":{"servers":[{"name":"a","command":"x","url":"http://h"}]}}`,
		`{"mcp":{"servers":[{"name":"a","command":"x"},{"name":"a","command":"y"}]}}`,
		`{"mcp":{"servers":[{"name":"a","url":"ftp://h"}]}}`,
		`{"mcp":{"servers":[null]}}`,
		`{"mcp":{"enabled":false,"servers":[]}}`,
		`{"mcp":null,"chat":null}`,
		`{"mcp":{"servers":[{"name":"a","command":"x","env":{"K":1}}]}}`,
	)
	s := fuzzFace(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := readFuzzBody(t, body, "No JSON data provided")
		if !ok {
			return
		}
		pl, mode, err := s.decodeConfig(o)
		if err != nil {
			wantRefusal(t, body, err)
			wantFieldNamed(t, body, err, configFields...)
			return
		}
		wantJournalable(t, body, pl)
		if mode != "" {
			if _, err := sandbox.Choose(sandbox.WorkspaceWrite, mode); err != nil {
				t.Fatalf("body %q: accepted sandbox %q the server refuses: %v", body, mode, err)
			}
		}
		if pl.Name != nil && (*pl.Name == "" || strings.TrimSpace(*pl.Name) != *pl.Name) {
			t.Fatalf("body %q: name %q", body, *pl.Name)
		}
		if pl.Tools != nil && *pl.Tools == nil {
			t.Fatalf("body %q: tools decoded as a nil list", body)
		}
		if pl.MCP == nil {
			return
		}
		wantMCPValid(t, body, pl.MCP)
		// The section as the journal keeps it is one the decoder
		// accepts again, unchanged.
		if a, b := marshal(decodeMCPAgain(t, s, body, pl.MCP)), marshal(pl.MCP); string(a) != string(b) {
			t.Fatalf("body %q: decoded again, the section changed:\n %s\n %s", body, b, a)
		}
		wantSecretsKept(t, body, pl.MCP, storedMCP())
		wantSecretsKept(t, body, pl.MCP, nil)
		// What the conversation would store (placeholders resolved) is
		// answered redacted and, sent back, keeps every value.
		if stored := cloneMCP(t, pl.MCP); keepSecrets(stored, storedMCP(), "mcp") == nil {
			wantRedactedRoundTrip(t, s, body, stored)
		}
	})
}

// FuzzKeepSecrets drives keepSecrets on two decoded sections: what the
// conversation has (old) and what a client sends (new), each possibly
// with placeholders. A stored section never holds a placeholder as a
// value, whatever the order of PATCHes.
func FuzzKeepSecrets(f *testing.F) {
	for _, p := range [][2]string{
		{`{"servers":[{"name":"a","command":"c","env":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"c","env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","command":"c","env":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"d","env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","url":"http://h","headers":{"K":"v"}}]}`, `{"servers":[{"name":"a","url":"http://h","headers":{"K":"********","L":"w"}}]}`},
		{`{"servers":[{"name":"a","url":"http://h","headers":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"http://h","env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","command":"c","env":{"K":"********"}}]}`, `{"servers":[{"name":"a","command":"c","env":{"K":"********"}}]}`},
		{`{"servers":[]}`, `{"servers":[{"name":"b","command":"c","env":{"K":"********"}}]}`},
		// Same command, other args: another program may read the value.
		{`{"servers":[{"name":"a","command":"python3","args":["srv.py"],"env":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"python3","args":["-c","print(1)"],"env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","command":"c","args":["x"],"env":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"c","env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","command":"c","args":["x"],"env":{"K":"v"}}]}`, `{"servers":[{"name":"a","command":"c","args":["x"],"env":{"K":"********"}}]}`},
		{`{"servers":[{"name":"a","url":"http://h","args":["x"],"headers":{"K":"v"}}]}`, `{"servers":[{"name":"a","url":"http://h","headers":{"K":"********"}}]}`},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	s := fuzzFace(f)
	f.Fuzz(func(t *testing.T, oldRaw, newRaw []byte) {
		old, err := s.decodeMCP(object{"mcp": oldRaw}, "mcp")
		if err != nil {
			return
		}
		// old is what a conversation stores: its placeholders were
		// resolved against nothing (a create), or it is not stored.
		if keepSecrets(old, nil, "mcp") != nil {
			return
		}
		cfg, err := s.decodeMCP(object{"mcp": newRaw}, "mcp")
		if err != nil {
			return
		}
		body := []byte(fmt.Sprintf("old %s new %s", oldRaw, newRaw))
		wantSecretsKept(t, body, cfg, old)
		stored := cloneMCP(t, cfg)
		if keepSecrets(stored, old, "mcp") == nil {
			wantRedactedRoundTrip(t, s, body, stored)
		}
	})
}
