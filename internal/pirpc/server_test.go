package pirpc

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
)

type fixedModels []*llm.Model

func (f fixedModels) Available() []*llm.Model { return f }

// rpcRun feeds lines to a server over a faux session and returns what it
// wrote once input ends.
func rpcRun(t testing.TB, lines ...string) []map[string]any {
	var frames []map[string]any
	for _, l := range rpcLines(t, lines...) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("output line is not JSON: %q", l)
		}
		frames = append(frames, m)
	}
	return frames
}

// rpcLines is rpcRun's output as the lines the server wrote.
func rpcLines(t testing.TB, lines ...string) []string {
	p := faux.New(faux.Options{})
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := New(Options{Session: s, Models: fixedModels{faux.Model()}, MaxLineBytes: 4096, Cwd: t.TempDir()})
	pr, pw := io.Pipe()
	done := make(chan error)
	go func() { done <- srv.Run(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), pw) }()
	go func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
		pw.Close()
	}()
	b, _ := io.ReadAll(pr)
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// pi takes any id and echoes it as it came: a number is answered with the
// same number, byte for byte (1e3 stays 1e3), on success and on failure,
// also for get_messages, which agentd writes by hand. An id that is
// neither a string nor a number is refused, naming the field.
func TestNumericIDIsEchoedAsSent(t *testing.T) {
	tests := []struct {
		line, want string
	}{
		{`{"type":"get_state","id":7}`, `{"id":7,"type":"response","command":"get_state","success":true`},
		{`{"type":"get_state","id":-1.5e3}`, `{"id":-1.5e3,"type":"response","command":"get_state","success":true`},
		{`{"type":"get_messages","id":12345678901234567890}`, `{"id":12345678901234567890,"type":"response","command":"get_messages","success":true`},
		{`{"type":"set_session_name","id":3,"name":" "}`, `{"id":3,"type":"response","command":"set_session_name","success":false,"error":"Session name cannot be empty"}`},
		{`{"type":"prompt","id":4,"message":42}`, `{"id":4,"type":"response","command":"prompt","success":false`},
		{`{"type":"get_state","id":"s\u0041"}`, `{"id":"s\u0041","type":"response","command":"get_state","success":true`},
		{`{"type":"get_state","id":true}`, `{"type":"response","command":"get_state","success":false,"error":"Invalid command: field \"id\" must be a string or a number"}`},
	}
	for _, tt := range tests {
		lines := rpcLines(t, tt.line)
		if len(lines) == 0 || !strings.HasPrefix(lines[0], tt.want) {
			t.Errorf("%s:\n got %q\nwant %s…", tt.line, lines, tt.want)
		}
	}
}

func TestBadInputGetsErrorsAndTheServerGoesOn(t *testing.T) {
	tests := []struct {
		line string
		want map[string]any
	}{
		{`{"type":"get_state"`, map[string]any{"command": "parse", "success": false}},
		{`"just a string"`, map[string]any{"success": false, "error": "Unknown command: undefined"}},
		{`{"type":"frobnicate","id":"x"}`, map[string]any{"command": "frobnicate", "error": "Unknown command: frobnicate"}},
		{`{"type":"prompt","id":"p","message":42}`, map[string]any{"id": "p", "command": "prompt", "success": false}},
		{`{"type":"prompt","id":"p2"}`, map[string]any{"id": "p2", "error": `prompt requires a "message" string`}},
		{`{"type":"set_thinking_level","id":"t","level":"huge"}`, map[string]any{"id": "t", "success": false}},
		{`{"type":"set_steering_mode","id":"m","mode":"some"}`, map[string]any{"id": "m", "success": false}},
		{`{"type":"set_model","id":"sm","provider":"x","modelId":"y"}`, map[string]any{"error": "Model not found: x/y"}},
		{`{"type":"set_session_name","id":"n","name":"   "}`, map[string]any{"error": "Session name cannot be empty"}},
		{`{"type":"fork","id":"f","entryId":"nope"}`, map[string]any{"id": "f", "success": false}},
		{`{"type":"prompt","id":"i","message":"x","images":[{"type":"text"}]}`, map[string]any{"id": "i", "success": false}},
		{`{"type":"set_auto_retry","id":"r"}`, map[string]any{"id": "r", "error": `set_auto_retry requires an "enabled" boolean`}},
		{`{"type":"prompt","message":"` + strings.Repeat("z", 5000) + `"}`, map[string]any{"command": "parse", "success": false}},
	}
	for _, tt := range tests {
		frames := rpcRun(t, tt.line, `{"type":"get_state","id":"after"}`)
		if len(frames) < 2 {
			t.Fatalf("%.60s: got %v", tt.line, frames)
		}
		first := frames[0]
		for k, v := range tt.want {
			if first[k] != v {
				t.Errorf("%.60s: %s = %v, want %v (frame %v)", tt.line, k, first[k], v, first)
			}
		}
		last := frames[len(frames)-1]
		if last["id"] != "after" || last["success"] != true {
			t.Errorf("%.60s: the server did not go on: %v", tt.line, last)
		}
	}
}

func TestDeltaFormat(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{Text: "one two three"})
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := New(Options{Session: s, Models: fixedModels{faux.Model()}, Delta: true})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _ = srv.Run(context.Background(), inR, outW); outW.Close() }()
	_, _ = io.WriteString(inW, `{"type":"prompt","id":"p","message":"hi"}`+"\n")
	sc := bufio.NewScanner(outR)
	deltas := 0
	deadline := time.After(10 * time.Second)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"message_update"`) {
			if strings.Contains(line, `"partial"`) || strings.Contains(line, `"message":`) {
				t.Fatalf("delta line carries the message: %s", line)
			}
			deltas++
		}
		if strings.Contains(line, `"agent_end"`) {
			break
		}
		select {
		case <-deadline:
			t.Fatal("no agent_end")
		default:
		}
	}
	inW.Close()
	if deltas == 0 {
		t.Fatal("no message_update")
	}
}

func FuzzHandleLine(f *testing.F) {
	for _, s := range []string{
		`{"type":"get_state","id":"1"}`, `{"type":"prompt","message":"hi","images":[{"type":"image","data":"AA","mimeType":"image/png"}]}`,
		`{"type":"bash","command":"true"}`, `{"type":"set_model","provider":1}`, `{"type":"extension_ui_response","id":"x","value":"Allow"}`,
		`{"type":"fork","entryId":"00000000"}`, `[]`, `null`, `{"type":null}`, "\u2028",
	} {
		f.Add(s)
	}
	p := faux.New(faux.Options{})
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "bash") || strings.Contains(line, "export") || strings.Contains(line, "switch") {
			return // these touch the file system; covered by the e2e suite
		}
		s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out strings.Builder
		srv := New(Options{Session: s, Models: fixedModels{faux.Model()}})
		if err := srv.Run(context.Background(), strings.NewReader(line+"\n"), &out); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l != "" && !json.Valid([]byte(l)) {
				t.Fatalf("invalid output line %q", l)
			}
		}
	})
}
