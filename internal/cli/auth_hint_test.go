package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// A provider's 401 names the key agentd sent on the stdio faces too: pi's
// RPC (`agentd rpc`) and the pi-server protocol (`agentd serve --stdio`)
// show the failed message's errorMessage with the engine's hint, as ask
// does, and ACP (`agentd acp`) answers session/prompt with that message
// as its error. The REST face (and the web UI, which shows its error
// event) is tested in convapi (TestREST401NamesTheKey).
func TestStdioFaces401NameTheKey(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Status: 401, ErrorMessage: "invalid api key"}
	})
	const want = "401 invalid api key (mock refused the API key: check MOCK_API_KEY)"
	for _, tt := range []struct {
		name  string
		args  []string
		lines []string
		end   string // the line that ends the exchange contains it
	}{
		{"rpc", []string{"rpc", "--model", "mock/m1", "--sandbox", "full-access"}, []string{`{"id":"p","type":"prompt","message":"hi"}`}, `"agent_end"`},
		{"serve --stdio", []string{"serve", "--stdio", "--model", "mock/m1", "--sandbox", "full-access"}, []string{
			`{"type":"create_session","id":"c","sessionId":"s1"}`,
			`{"type":"prompt","id":"p","sessionId":"s1","message":"hi"}`,
		}, `"agent_end"`},
		{"acp", []string{"acp", "--model", "mock/m1", "--sandbox", "full-access"}, []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}`,
		}, `"id":3`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			writeConfig(t, home, "models.json", mockModels(t, srv, "MOCK_API_KEY"))
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			var stderr strings.Builder
			getenv := func(k string) string {
				switch k {
				case "HOME":
					return home
				case "MOCK_API_KEY":
					return "wrong"
				}
				return ""
			}
			m := New(inR, outW, &stderr, getenv)
			done := make(chan int, 1)
			go func() {
				code := m.Run(context.Background(), append(tt.args, "--data-dir", t.TempDir()))
				outW.Close()
				done <- code
			}()
			defer func() {
				inW.Close()
				// The output is drained below; Run returns at stdin's end.
				<-done
				m.Close()
			}()
			for _, l := range tt.lines {
				if _, err := io.WriteString(inW, l+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			sc := bufio.NewScanner(outR)
			sc.Buffer(nil, 1<<20)
			var seen []string
			found := false
			for sc.Scan() {
				line := sc.Text()
				seen = append(seen, line)
				if sid, ok := acpSessionID(line); ok {
					// ACP's prompt names the session session/new made.
					if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":`+
						strconv.Quote(sid)+`,"prompt":[{"type":"text","text":"hi"}]}}`+"\n"); err != nil {
						t.Fatal(err)
					}
				}
				if strings.Contains(line, tt.end) {
					found = strings.Contains(line, want)
					break
				}
			}
			go func() { _, _ = io.Copy(io.Discard, outR) }()
			if !found {
				t.Fatalf("no %q before agent_end:\n%s\nstderr: %s", want, strings.Join(seen, "\n"), stderr.String())
			}
		})
	}
}

// acpSessionID is the sessionId of ACP's answer to session/new (id 2).
func acpSessionID(line string) (string, bool) {
	var r struct {
		ID     any `json:"id"`
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(line), &r) != nil || r.ID != float64(2) || r.Result.SessionID == "" {
		return "", false
	}
	return r.Result.SessionID, true
}
