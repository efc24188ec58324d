package mcp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A server that prints lines on stdout that are not JSON-RPC messages,
// before its answers and among them, keeps serving: each such line is
// logged, redacted, and skipped.
func TestNonJSONLinesOnStdoutAreSkipped(t *testing.T) {
	const secret = "noisy-secret-0123456789"
	cfg := stdioServer(t)
	cfg.Env["AGENTD_MCP_TEST_NOISY"] = secret
	var logs syncBuffer
	m := New(Options{Environ: agentdEnviron(t), StartTimeout: 20 * time.Second, CallTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{cfg}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ts := byName(tools)
	if len(ts) != 7 {
		t.Fatalf("%d tools: %v", len(ts), ts)
	}
	for range 3 {
		if r := call(t, ts["t__noisy"], `{}`); r.IsError || text(r) != "answered among noise" {
			t.Fatalf("noisy: %v %q", r.IsError, text(r))
		}
		if r := call(t, ts["t__echo"], `{"text":"still here"}`); r.IsError || text(r) != "echo: still here" {
			t.Fatalf("echo after the noise: %v %q", r.IsError, text(r))
		}
	}
	log := logs.String()
	for _, want := range []string{"starting server with token [redacted]", `listening on stdio`, `[1,2,3]`, `debug: handling noisy`, `a JSON string`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks the skipped line %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, secret) {
		t.Errorf("the log has the secret:\n%s", log)
	}
}

func TestJSONLines(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":1,"result":{}}`
	note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"a","progress":1}}`
	tests := []struct {
		name, in, out string
		dropped       []string
	}{
		{"messages pass", msg + "\n" + note + "\n", msg + "\n" + note + "\n", nil},
		{"CRLF passes", msg + "\r\n", msg + "\r\n", nil},
		{"last line without newline", msg, msg + "\n", nil},
		{"batch", "[" + msg + "," + note + "]\n", "[" + msg + "," + note + "]\n", nil},
		{"garbage among messages", "hello\n" + msg + "\n{\"level\":\"info\"}\n  \n42\n" + note + "\n[1]\n[]\n",
			msg + "\n" + note + "\n", []string{"hello", `{"level":"info"}`, "42", "[1]", "[]"}},
		{"two messages on a line", msg + msg + "\n", "", []string{msg + msg}},
		{"not UTF-8", "\xff\xfe\n" + msg + "\n", msg + "\n", []string{"\xff\xfe"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dropped []string
			j := &jsonLines{r: bufio.NewReaderSize(strings.NewReader(tt.in), 16), max: 1 << 20, dropped: func(l []byte) { dropped = append(dropped, string(l)) }}
			out, err := io.ReadAll(j)
			if err != nil || string(out) != tt.out {
				t.Fatalf("out %q %v, want %q", out, err, tt.out)
			}
			if strings.Join(dropped, "|") != strings.Join(tt.dropped, "|") {
				t.Fatalf("dropped %q, want %q", dropped, tt.dropped)
			}
		})
	}
	j := &jsonLines{r: bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\n"), 16), max: 50}
	if _, err := io.ReadAll(j); err != errLineTooLong {
		t.Fatalf("a line past the bound: %v", err)
	}
}

// Whatever a server writes, what passes is whole lines, each a message.
func FuzzJSONLines(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\nhello\n[1]\n"))
	f.Add([]byte("\n\r\n{\n}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		j := &jsonLines{r: bufio.NewReaderSize(bytes.NewReader(in), 16), max: 1 << 16, dropped: func([]byte) {}}
		out, err := io.ReadAll(j)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(out) {
			if !bytes.HasSuffix(line, []byte("\n")) || !isMessage(bytes.TrimSpace(line)) {
				t.Fatalf("passed %q", line)
			}
		}
	})
}
