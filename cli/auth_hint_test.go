package cli

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/llm/llmtest"
)

// A provider's 401 names the key agentd sent on the stdio faces too: pi's
// RPC (`agentd rpc`) and the pi-server protocol (`agentd serve --stdio`)
// show the failed message's errorMessage with the engine's hint, as ask
// does. The REST and session-WebSocket faces show the same errorMessage
// from the same session.
func TestStdioFaces401NameTheKey(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *llmtest.Request) llmtest.Script {
		return llmtest.Script{Status: 401, ErrorMessage: "invalid api key"}
	})
	const want = "401 invalid api key (mock refused the API key: check MOCK_API_KEY)"
	for _, tt := range []struct {
		name  string
		args  []string
		lines []string
	}{
		{"rpc", []string{"rpc", "--model", "mock/m1", "--sandbox", "full-access"}, []string{`{"id":"p","type":"prompt","message":"hi"}`}},
		{"serve --stdio", []string{"serve", "--stdio", "--model", "mock/m1", "--sandbox", "full-access"}, []string{
			`{"type":"create_session","id":"c","sessionId":"s1"}`,
			`{"type":"prompt","id":"p","sessionId":"s1","message":"hi"}`,
		}},
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
				if strings.Contains(line, `"agent_end"`) {
					found = strings.Contains(strings.Join(seen, "\n"), want)
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
