package piserver

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

var fuzzSeeds = []string{
	`{"type":"list_sessions"}`,
	`{"type":"create_session","id":"c1","sessionId":"s1","cwd":"/tmp"}`,
	`{"type":"prompt","id":"p1","sessionId":"s1","message":"hi","images":[],"streamingBehavior":"steer","dependsOn":["c1"],"ifSessionVersion":0,"idempotencyKey":"k"}`,
	`{"type":"switch_session","sessionId":"s1","afterSeq":3}`,
	`{"type":"set_model","sessionId":"s1","provider":"faux","modelId":"echo"}`,
	`{"type":"set_auto_retry","sessionId":"s1","enabled":true}`,
	`{"type":"extension_ui_response","sessionId":"s1","requestId":"r:1","response":{"method":"select","value":"Allow"}}`,
	`{"type":"load_session","sessionPath":"/x/.pi/sessions/a.jsonl"}`,
	`{"type":"get_state","sessionId":"s1","zz":{"a":[1,2,{"b":null}]},"\u00e9":"\ud83d\ude00"}`,
	`{"type":"prompt","sessionId":"s1"}`,
	`{"type":"prompt","sessionId":"s1","message":42}`,
	`{"type":"switch_session","sessionId":"s1","afterSeq":-1.5e3}`,
	`{"type":"list_sessions","ifSessionVersion":1}`,
	`{"type":"list_sessions","id":"anon:1","dependsOn":"x"}`,
	`{"type":"get_state","sessionId":"a/b"}`,
	`{"type":"x"}`,
	`{"type":null,"id":null,"sessionId":null,"dependsOn":null}`,
	`{"type":"list_sessions"}{"type":"list_sessions"}`,
	`{"type":"list_sessions"}}`,
	`[{"type":"list_sessions"}]`,
	`"list_sessions"`,
	`null`,
	`{"type":"prompt"`,
	``,
	"{\"type\":\"get_state\",\"sessionId\":\"s1\",\"k\":\"\xff\xfe\"}",
	"{\"\xc3\x28\":1,\"type\":\"list_sessions\"}",
}

// FuzzDecodeCommand: decodeCommand never panics, and what it accepts is a
// known command with a session id where the command needs one, and a
// payload that is one JSON object.
func FuzzDecodeCommand(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	specs := (&Server{}).commands()
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, ferr := decodeCommand(data, specs)
		if ferr != nil {
			if !strings.HasPrefix(ferr.msg, "Invalid JSON: ") && !strings.HasPrefix(ferr.msg, "Validation failed: ") {
				t.Fatalf("refusal %q starts with neither Invalid JSON nor Validation failed", ferr.msg)
			}
			if ferr.command == "" {
				t.Fatalf("refusal names no command: %+v", *ferr)
			}
			if f := failureFrame(ferr.id, ferr.command, ferr.msg); !json.Valid(f) {
				t.Fatalf("failure frame is not JSON: %q", f)
			}
			return
		}
		if cmd.Type == "" {
			t.Fatalf("accepted a command without a type: %+v", cmd)
		}
		spec := specs[cmd.Type]
		if spec == nil {
			t.Fatalf("accepted unknown command type %q", cmd.Type)
		}
		if spec.session && cmd.SessionID == "" {
			t.Fatalf("accepted session command %s without a sessionId", cmd.Type)
		}
		if cmd.SessionID != "" && (len(cmd.SessionID) > 256 || !idRe.MatchString(cmd.SessionID)) {
			t.Fatalf("accepted bad sessionId %q", cmd.SessionID)
		}
		if strings.HasPrefix(cmd.ID, "anon:") || len(cmd.ID) > 256 {
			t.Fatalf("accepted bad id %q", cmd.ID)
		}
		if len(cmd.DependsOn) > 0 && cmd.ID == "" {
			t.Fatalf("accepted dependsOn without id")
		}
		if cmd.Payload != nil {
			if !json.Valid(cmd.Payload) {
				t.Fatalf("payload is not valid JSON: %q (frame %q)", cmd.Payload, data)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cmd.Payload, &m); err != nil || m == nil {
				t.Fatalf("payload is not a JSON object: %q", cmd.Payload)
			}
			for k := range m {
				if isEnvelopeKey(k) {
					t.Fatalf("payload keeps envelope key %q: %s", k, cmd.Payload)
				}
			}
		}
	})
}

// syncBuffer is an io.Writer the connection's writer goroutine writes to
// while the test may read it after the server stopped.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FuzzServeStdio feeds lines to a whole server over stdio: whatever comes
// in, the server answers with one JSON object per line, server_ready
// first, and stops cleanly.
func FuzzServeStdio(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s + "\n" + `{"type":"list_sessions","id":"after"}`)
	}
	f.Add(`{"type":"create_session","sessionId":"s1"}` + "\n" + `{"type":"get_state","sessionId":"s1"}` + "\n" +
		`{"type":"prompt","sessionId":"s1","message":"hi"}` + "\n" + `{"type":"delete_session","sessionId":"s1"}`)
	f.Add("\n\n   \n" + strings.Repeat("x", 300))
	f.Fuzz(func(t *testing.T, input string) {
		// Commands that write files where the input says stay out.
		for _, w := range []string{"export", "bash", "switch_session_file"} {
			if strings.Contains(input, w) {
				t.Skip()
			}
		}
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Limits.MaxFrameBytes = 256 }})
		srv := fx.srv
		var out syncBuffer
		if err := srv.ServeStdio(context.Background(), strings.NewReader(input), &out); err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
		// Close's error is TestCloseReturnsNil's business.
		_ = fx.layer.Close()
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		sc.Buffer(nil, 1<<22)
		first := true
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("output line is not a JSON object: %q", sc.Text())
			}
			if first && m["type"] != "server_ready" {
				t.Fatalf("first line is not server_ready: %s", sc.Text())
			}
			first = false
		}
		if first {
			t.Fatal("no output at all")
		}
	})
}
