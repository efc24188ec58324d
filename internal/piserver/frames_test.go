package piserver

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// testSpecs are the server's real command specs. commands only builds
// method values, so a zero Server is enough to get them.
var testSpecs = (&Server{}).commands()

func intp(n int) *int { return &n }

func TestDecodeCommandAccepts(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		want  pipeline.Command
	}{
		{
			name:  "server command without payload",
			frame: `{"type":"list_sessions"}`,
			want:  pipeline.Command{Type: "list_sessions"},
		},
		{
			name:  "create_session with id, sessionId and cwd",
			frame: `{"type":"create_session","id":"c1","sessionId":"s-1.a_b","cwd":"/tmp"}`,
			want:  pipeline.Command{Type: "create_session", ID: "c1", SessionID: "s-1.a_b", Payload: json.RawMessage(`{"cwd":"/tmp"}`)},
		},
		{
			name: "prompt: envelope keys removed, payload keys sorted",
			frame: `{"streamingBehavior":"steer","type":"prompt","message":"hi","id":"p1","sessionId":"s1",` +
				`"idempotencyKey":"k1","dependsOn":["c1"],"ifSessionVersion":3,"images":[]}`,
			want: pipeline.Command{Type: "prompt", ID: "p1", SessionID: "s1", IdempotencyKey: "k1",
				DependsOn: []string{"c1"}, IfSessionVersion: intp(3),
				Payload: json.RawMessage(`{"images":[],"message":"hi","streamingBehavior":"steer"}`)},
		},
		{
			name:  "undeclared fields stay in the payload, sorted",
			frame: `{"zeta":1,"type":"get_state","sessionId":"s1","alpha":{"x":true}}`,
			want:  pipeline.Command{Type: "get_state", SessionID: "s1", Payload: json.RawMessage(`{"alpha":{"x":true},"zeta":1}`)},
		},
		{
			name:  "a repeated key keeps its last value",
			frame: `{"type":"set_session_name","sessionId":"s1","name":"a","name":"b"}`,
			want:  pipeline.Command{Type: "set_session_name", SessionID: "s1", Payload: json.RawMessage(`{"name":"b"}`)},
		},
		{
			name:  "numbers keep their spelling",
			frame: `{"type":"switch_session","sessionId":"s1","afterSeq":12}`,
			want:  pipeline.Command{Type: "switch_session", SessionID: "s1", Payload: json.RawMessage(`{"afterSeq":12}`)},
		},
		{
			name:  "ifSessionVersion 0 on a session command",
			frame: `{"type":"set_auto_retry","sessionId":"s1","enabled":false,"ifSessionVersion":0}`,
			want:  pipeline.Command{Type: "set_auto_retry", SessionID: "s1", IfSessionVersion: intp(0), Payload: json.RawMessage(`{"enabled":false}`)},
		},
		{
			name:  "ifSessionVersion on a server command that names a session",
			frame: `{"type":"delete_session","sessionId":"s1","ifSessionVersion":2}`,
			want:  pipeline.Command{Type: "delete_session", SessionID: "s1", IfSessionVersion: intp(2)},
		},
		{
			name:  "null optional fields are not checked",
			frame: `{"type":"cycle_model","sessionId":"s1","direction":null}`,
			want:  pipeline.Command{Type: "cycle_model", SessionID: "s1", Payload: json.RawMessage(`{"direction":null}`)},
		},
		{
			name:  "set_model",
			frame: `{"type":"set_model","sessionId":"s1","provider":"faux","modelId":"echo"}`,
			want:  pipeline.Command{Type: "set_model", SessionID: "s1", Payload: json.RawMessage(`{"modelId":"echo","provider":"faux"}`)},
		},
		{
			name:  "extension_ui_response",
			frame: `{"type":"extension_ui_response","sessionId":"s1","requestId":"r:1","response":{"method":"cancelled"}}`,
			want: pipeline.Command{Type: "extension_ui_response", SessionID: "s1",
				Payload: json.RawMessage(`{"requestId":"r:1","response":{"method":"cancelled"}}`)},
		},
		{
			name:  "empty dependsOn without id",
			frame: `{"type":"list_sessions","dependsOn":[]}`,
			want:  pipeline.Command{Type: "list_sessions", DependsOn: []string{}},
		},
		{
			name:  "32 dependencies",
			frame: `{"type":"list_sessions","id":"x","dependsOn":[` + deps(32) + `]}`,
			want:  pipeline.Command{Type: "list_sessions", ID: "x", DependsOn: depList(32)},
		},
		{
			name:  "id of 256 characters",
			frame: `{"type":"health_check","id":"` + strings.Repeat("i", 256) + `"}`,
			want:  pipeline.Command{Type: "health_check", ID: strings.Repeat("i", 256)},
		},
		{
			name:  "sessionId of 256 characters",
			frame: `{"type":"get_state","sessionId":"` + strings.Repeat("s", 256) + `"}`,
			want:  pipeline.Command{Type: "get_state", SessionID: strings.Repeat("s", 256)},
		},
		{
			name:  "whitespace around the object",
			frame: " \n\t{\"type\":\"get_metrics\"} \r\n",
			want:  pipeline.Command{Type: "get_metrics"},
		},
		{
			name:  "escaped key names are decoded and re-encoded",
			frame: `{"type":"get_state","sessionId":"s1","\u0061b\"c":1}`,
			want:  pipeline.Command{Type: "get_state", SessionID: "s1", Payload: json.RawMessage(`{"ab\"c":1}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ferr := decodeCommand([]byte(tt.frame), testSpecs)
			if ferr != nil {
				t.Fatalf("decodeCommand(%s) refused it: %+v", tt.frame, *ferr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeCommand(%s) (-want +got):\n%s", tt.frame, diff)
			}
			if len(got.Payload) > 0 && !json.Valid(got.Payload) {
				t.Errorf("payload is not JSON: %s", got.Payload)
			}
		})
	}
}

func deps(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"d%d"`, i)
	}
	return b.String()
}

func depList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("d%d", i)
	}
	return out
}

func TestDecodeCommandRefuses(t *testing.T) {
	long := strings.Repeat("x", 257)
	tests := []struct {
		name    string
		frame   string
		id      string // the id the failure response carries
		command string // the command it names
		msg     string
	}{
		// Not JSON, or not one object.
		{"empty frame", ``, "", "unknown", "Invalid JSON: empty frame"},
		{"blank frame", "  \n", "", "unknown", "Invalid JSON: empty frame"},
		{"truncated object", `{"type":"prompt"`, "", "unknown", "Invalid JSON: unexpected EOF"},
		{"syntax error", `{"type" "prompt"}`, "", "unknown", "Invalid JSON: invalid character '\"' after object key at offset 9"},
		{"bare word", `hello`, "", "unknown", "Invalid JSON: invalid character 'h' looking for beginning of value at offset 1"},
		{"array", `[{"type":"list_sessions"}]`, "", "unknown", "Invalid JSON: a frame must be a JSON object, not array"},
		{"string", `"list_sessions"`, "", "unknown", "Invalid JSON: a frame must be a JSON object, not string"},
		{"number", `42`, "", "unknown", "Invalid JSON: a frame must be a JSON object, not number"},
		{"null", `null`, "", "unknown", "Invalid JSON: a frame must be a JSON object"},
		{"two objects", `{"type":"list_sessions"}{"type":"list_sessions"}`, "", "unknown", "Invalid JSON: a frame must hold exactly one JSON object"},
		{"object then garbage", `{"type":"list_sessions"} x`, "", "unknown", "Invalid JSON: a frame must hold exactly one JSON object"},

		// type.
		{"missing type", `{"id":"a1"}`, "a1", "unknown", "Validation failed: type: is required"},
		{"type not a string", `{"type":7,"id":"a1"}`, "a1", "unknown", "Validation failed: type: must be a string"},
		{"unknown type", `{"type":"x"}`, "", "x", "Validation failed: type: Unknown command type 'x'"},
		{"unknown type keeps the id", `{"type":"frobnicate","id":"f1"}`, "f1", "frobnicate", "Validation failed: type: Unknown command type 'frobnicate'"},
		{"empty type", `{"type":""}`, "", "unknown", "Validation failed: type: Unknown command type ''"},

		// Wrong-typed fields.
		{"message as number", `{"type":"prompt","id":"p","sessionId":"s1","message":42}`, "p", "prompt", "Validation failed: message: must be a string"},
		{"message as object", `{"type":"steer","sessionId":"s1","message":{"text":"hi"}}`, "", "steer", "Validation failed: message: must be a string"},
		{"message too long", `{"type":"prompt","sessionId":"s1","message":"` + strings.Repeat("m", 200001) + `"}`, "", "prompt", "Validation failed: message: must be at most 200000 characters"},
		{"images not an array", `{"type":"prompt","sessionId":"s1","message":"hi","images":{}}`, "", "prompt", "Validation failed: images: must be an array"},
		{"enabled as string", `{"type":"set_auto_compaction","sessionId":"s1","enabled":"true"}`, "", "set_auto_compaction", "Validation failed: enabled: must be a boolean"},
		{"afterSeq negative", `{"type":"switch_session","sessionId":"s1","afterSeq":-1}`, "", "switch_session", "Validation failed: afterSeq: must be a non-negative integer"},
		{"afterSeq fractional", `{"type":"switch_session","sessionId":"s1","afterSeq":1.5}`, "", "switch_session", "Validation failed: afterSeq: must be a non-negative integer"},
		{"afterSeq as string", `{"type":"switch_session","sessionId":"s1","afterSeq":"3"}`, "", "switch_session", "Validation failed: afterSeq: must be a non-negative integer"},
		{"response not an object", `{"type":"extension_ui_response","sessionId":"s1","requestId":"r","response":[]}`, "", "extension_ui_response", "Validation failed: response: must be an object"},
		{"requestId too long", `{"type":"extension_ui_response","sessionId":"s1","requestId":"` + long + `","response":{}}`, "", "extension_ui_response", "Validation failed: requestId: must be at most 256 characters"},

		// dependsOn.
		{"dependsOn not an array", `{"type":"list_sessions","id":"a","dependsOn":"b"}`, "a", "list_sessions", "Validation failed: dependsOn: must be an array of strings"},
		{"dependsOn of numbers", `{"type":"list_sessions","id":"a","dependsOn":[1]}`, "a", "list_sessions", "Validation failed: dependsOn: must be an array of strings"},
		{"dependsOn over 32", `{"type":"list_sessions","id":"a","dependsOn":[` + deps(33) + `]}`, "a", "list_sessions", "Validation failed: dependsOn: at most 32 dependencies"},
		{"dependsOn without id", `{"type":"list_sessions","dependsOn":["b"]}`, "", "list_sessions", "Validation failed: dependsOn: requires the command to have an 'id'"},
		{"dependsOn with an empty entry", `{"type":"list_sessions","id":"a","dependsOn":["b",""]}`, "a", "list_sessions", "Validation failed: dependsOn: entries must be non-empty strings"},

		// ifSessionVersion.
		{"ifSessionVersion on list_sessions", `{"type":"list_sessions","ifSessionVersion":1}`, "", "list_sessions", "Validation failed: ifSessionVersion: Only supported for session-targeted commands"},
		{"ifSessionVersion on create_session", `{"type":"create_session","sessionId":"s1","ifSessionVersion":0}`, "", "create_session", "Validation failed: ifSessionVersion: Only supported for session-targeted commands"},
		{"ifSessionVersion negative", `{"type":"get_state","sessionId":"s1","ifSessionVersion":-1}`, "", "get_state", "Validation failed: ifSessionVersion: must be a non-negative integer"},
		{"ifSessionVersion fractional", `{"type":"get_state","sessionId":"s1","ifSessionVersion":0.5}`, "", "get_state", "Validation failed: ifSessionVersion: must be a non-negative integer"},
		{"ifSessionVersion as string", `{"type":"get_state","sessionId":"s1","ifSessionVersion":"1"}`, "", "get_state", "Validation failed: ifSessionVersion: must be a non-negative integer"},

		// id.
		{"id with the reserved prefix", `{"type":"list_sessions","id":"anon:1:2"}`, "anon:1:2", "list_sessions", "Validation failed: id: must not start with the reserved prefix 'anon:'"},
		{"id over 256 characters", `{"type":"list_sessions","id":"` + long + `"}`, long, "list_sessions", "Validation failed: id: must be at most 256 characters"},
		{"empty id", `{"type":"list_sessions","id":""}`, "", "list_sessions", "Validation failed: id: must be a non-empty string"},
		{"id not a string", `{"type":"list_sessions","id":5}`, "", "list_sessions", "Validation failed: id: must be a string"},

		// idempotencyKey.
		{"empty idempotencyKey", `{"type":"list_sessions","idempotencyKey":""}`, "", "list_sessions", "Validation failed: idempotencyKey: must be a non-empty string of at most 256 characters"},
		{"idempotencyKey too long", `{"type":"list_sessions","idempotencyKey":"` + long + `"}`, "", "list_sessions", "Validation failed: idempotencyKey: must be a non-empty string of at most 256 characters"},

		// sessionId.
		{"empty sessionId", `{"type":"get_state","sessionId":""}`, "", "get_state", "Validation failed: sessionId: Session ID must be a non-empty string"},
		{"sessionId too long", `{"type":"get_state","sessionId":"` + long + `"}`, "", "get_state", "Validation failed: sessionId: Session ID too long (max 256 characters)"},
		{"sessionId with a slash", `{"type":"get_state","sessionId":"../etc"}`, "", "get_state", "Validation failed: sessionId: Session ID must contain only alphanumeric characters, underscores, dashes, and dots"},
		{"sessionId with a space", `{"type":"create_session","sessionId":"a b"}`, "", "create_session", "Validation failed: sessionId: Session ID must contain only alphanumeric characters, underscores, dashes, and dots"},
		{"sessionId with a colon", `{"type":"get_state","sessionId":"a:b"}`, "", "get_state", "Validation failed: sessionId: Session ID must contain only alphanumeric characters, underscores, dashes, and dots"},
		{"sessionId not a string", `{"type":"get_state","sessionId":1}`, "", "get_state", "Validation failed: sessionId: must be a string"},
		{"session command without sessionId", `{"type":"get_state","id":"g"}`, "g", "get_state", "Validation failed: sessionId: Session commands must have a non-empty string 'sessionId'"},
		{"delete_session without sessionId", `{"type":"delete_session"}`, "", "delete_session", "Validation failed: sessionId: is required"},
		{"switch_session without sessionId", `{"type":"switch_session","afterSeq":1}`, "", "switch_session", "Validation failed: sessionId: is required"},

		// Required fields and allowed values.
		{"prompt without message", `{"type":"prompt","sessionId":"s1"}`, "", "prompt", "Validation failed: message: is required"},
		{"prompt with a null message", `{"type":"prompt","sessionId":"s1","message":null}`, "", "prompt", "Validation failed: message: is required"},
		{"set_model without modelId", `{"type":"set_model","sessionId":"s1","provider":"faux"}`, "", "set_model", "Validation failed: modelId: is required"},
		{"set_model without either", `{"type":"set_model","sessionId":"s1"}`, "", "set_model", "Validation failed: provider: is required; modelId: is required"},
		{"load_session without sessionPath", `{"type":"load_session"}`, "", "load_session", "Validation failed: sessionPath: is required"},
		{"streamingBehavior later", `{"type":"prompt","sessionId":"s1","message":"hi","streamingBehavior":"later"}`, "", "prompt", "Validation failed: streamingBehavior: must be one of steer, followUp"},
		{"mode not allowed", `{"type":"set_steering_mode","sessionId":"s1","mode":"some"}`, "", "set_steering_mode", "Validation failed: mode: must be one of all, one-at-a-time"},
		{"direction not allowed", `{"type":"cycle_model","sessionId":"s1","direction":"up"}`, "", "cycle_model", "Validation failed: direction: must be one of forward, backward"},

		// Several problems at once, in the order they are checked.
		{"several problems", `{"type":"prompt","id":"anon:x","dependsOn":"y","message":1}`, "anon:x", "prompt",
			"Validation failed: id: must not start with the reserved prefix 'anon:'; sessionId: Session commands must have a non-empty string 'sessionId'; " +
				"dependsOn: must be an array of strings; message: must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ferr := decodeCommand([]byte(tt.frame), testSpecs)
			if ferr == nil {
				t.Fatalf("decodeCommand(%.80s) accepted it, want %q", tt.frame, tt.msg)
			}
			if ferr.msg != tt.msg {
				t.Errorf("msg = %q\n want %q", ferr.msg, tt.msg)
			}
			if ferr.id != tt.id || ferr.command != tt.command {
				t.Errorf("id, command = %q, %q; want %q, %q", ferr.id, ferr.command, tt.id, tt.command)
			}
			// The failure frame a client gets is well-formed.
			f := failureFrame(ferr.id, ferr.command, ferr.msg)
			var m map[string]any
			if err := json.Unmarshal(f, &m); err != nil {
				t.Fatalf("failure frame is not JSON: %s", f)
			}
			if m["type"] != "response" || m["success"] != false || m["error"] != tt.msg || m["command"] != tt.command {
				t.Errorf("failure frame = %s", f)
			}
		})
	}
}

// A frame is exactly one JSON object (spec §3.1): trailing bytes that are
// not JSON make the frame invalid, whichever they are.
func TestDecodeCommandRefusesTrailingBytes(t *testing.T) {
	for _, frame := range []string{
		`{"type":"list_sessions"}}`,
		`{"type":"list_sessions"}]`,
		`{"type":"list_sessions"},`,
		`{"type":"list_sessions"} :`,
	} {
		if cmd, ferr := decodeCommand([]byte(frame), testSpecs); ferr == nil {
			t.Errorf("decodeCommand(%s) accepted a frame with trailing bytes: %+v", frame, cmd)
		}
	}
}

// What decodeCommand accepts must run: the handler decodes the payload
// into the union of every command's parameters, and a frame the decoder
// admitted must not fail there (frames.go: "Everything a handler reads is
// checked here, so a malformed command never reaches the pipeline").
func TestDecodeCommandAcceptedPayloadDecodes(t *testing.T) {
	for _, frame := range []string{
		// A declared integer field spelled as a float or with an exponent.
		`{"type":"switch_session","sessionId":"s1","afterSeq":3.0}`,
		`{"type":"switch_session","sessionId":"s1","afterSeq":1e2}`,
		// An extra field the command does not declare, whose name another
		// command uses with a different type.
		`{"type":"get_state","sessionId":"s1","message":5}`,
		`{"type":"list_sessions","enabled":"yes"}`,
		`{"type":"abort","sessionId":"s1","afterSeq":-1}`,
		// Array elements the decoder does not look into.
		`{"type":"prompt","sessionId":"s1","message":"hi","images":[1]}`,
		`{"type":"extension_ui_response","sessionId":"s1","requestId":"r","response":{"method":5}}`,
	} {
		cmd, ferr := decodeCommand([]byte(frame), testSpecs)
		if ferr != nil {
			continue // refused before admission: fine
		}
		var p params
		if err := testSpecs[cmd.Type].decode(cmd.Payload, &p); err != nil {
			t.Errorf("decodeCommand accepted %s, but its handler cannot read the payload: %v", frame, err)
		}
	}
}

func TestResponseFrame(t *testing.T) {
	tests := []struct {
		name string
		r    pipeline.Response
		want string
	}{
		{
			name: "success with everything",
			r: pipeline.Response{ID: "c1", Command: "set_model", Success: true, Data: json.RawMessage(`{"model":{"id":"x"}}`),
				SessionVersion: intp(4), Replayed: true},
			want: `{"id":"c1","type":"response","command":"set_model","success":true,"data":{"model":{"id":"x"}},"sessionVersion":4,"replayed":true}`,
		},
		{
			name: "success without id or data",
			r:    pipeline.Response{Command: "abort", Success: true, SessionVersion: intp(0)},
			want: `{"type":"response","command":"abort","success":true,"sessionVersion":0}`,
		},
		{
			name: "data null is kept",
			r:    pipeline.Response{Command: "cycle_model", Success: true, Data: json.RawMessage(`null`)},
			want: `{"type":"response","command":"cycle_model","success":true,"data":null}`,
		},
		{
			name: "failure: error text, data dropped",
			r: pipeline.Response{ID: "p", Command: "prompt", Data: json.RawMessage(`{"x":1}`),
				Err: fault.Errorf(fault.NotFound, "Session %s not found", "s9")},
			want: `{"id":"p","type":"response","command":"prompt","success":false,"error":"Session s9 not found"}`,
		},
		{
			name: "timeout",
			r: pipeline.Response{ID: "b", Command: "bash", TimedOut: true, SessionVersion: intp(2),
				Err: fault.Errorf(fault.Timeout, "Command 'bash' timed out after 5ms")},
			want: `{"id":"b","type":"response","command":"bash","success":false,"error":"Command 'bash' timed out after 5ms","sessionVersion":2,"timedOut":true}`,
		},
		{
			name: "internal errors are not shown",
			r:    pipeline.Response{Command: "get_state", Err: fault.Errorf(fault.Internal, "journal: disk full at /secret")},
			want: `{"type":"response","command":"get_state","success":false,"error":"Internal error"}`,
		},
		{
			name: "failure without an error",
			r:    pipeline.Response{Command: "get_state"},
			want: `{"type":"response","command":"get_state","success":false,"error":"unknown error"}`,
		},
		{
			name: "create_session success gets sessionVersion 0",
			r:    pipeline.Response{ID: "c", Command: "create_session", Success: true, Data: json.RawMessage(`{"sessionId":"s"}`)},
			want: `{"id":"c","type":"response","command":"create_session","success":true,"data":{"sessionId":"s"},"sessionVersion":0}`,
		},
		{
			name: "create_session keeps a version it has",
			r:    pipeline.Response{Command: "create_session", Success: true, SessionVersion: intp(0), Replayed: true},
			want: `{"type":"response","command":"create_session","success":true,"sessionVersion":0,"replayed":true}`,
		},
		{
			name: "create_session failure has no version",
			r:    pipeline.Response{Command: "create_session", Err: fault.Errorf(fault.Invalid, "Session s already exists")},
			want: `{"type":"response","command":"create_session","success":false,"error":"Session s already exists"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(responseFrame(tt.r)); got != tt.want {
				t.Errorf("responseFrame =\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

func TestFailureFrame(t *testing.T) {
	if got, want := string(failureFrame("", "unknown", "Message size 11 exceeds limit 10")),
		`{"type":"response","command":"unknown","success":false,"error":"Message size 11 exceeds limit 10"}`; got != want {
		t.Errorf("failureFrame = %s, want %s", got, want)
	}
	if got, want := string(failureFrame("i<1>", "prompt", "a & b")),
		`{"id":"i<1>","type":"response","command":"prompt","success":false,"error":"a & b"}`; got != want {
		t.Errorf("failureFrame = %s, want %s (HTML is not escaped)", got, want)
	}
}

// The pipeline hands lifecycleFrame a non-nil DependsOn ([] when the
// command has none: pipeline.emit), as in these events.
func TestLifecycleFrame(t *testing.T) {
	tests := []struct {
		name string
		ev   pipeline.Event
		want string
	}{
		{
			name: "accepted, no dependencies",
			ev:   pipeline.Event{Type: pipeline.CommandAccepted, CommandID: "c1", Command: "prompt", SessionID: "s1", DependsOn: []string{}, Lane: "session:s1"},
			want: `{"type":"command_accepted","data":{"commandId":"c1","commandType":"prompt","sessionId":"s1","dependsOn":[]}}`,
		},
		{
			name: "started with envelope fields; outcome fields are not set",
			ev: pipeline.Event{Type: pipeline.CommandStarted, CommandID: "c2", Command: "set_model", SessionID: "s1",
				DependsOn: []string{"c1"}, IfSessionVersion: intp(3), IdempotencyKey: "k", Success: true, SessionVersion: intp(9)},
			want: `{"type":"command_started","data":{"commandId":"c2","commandType":"set_model","sessionId":"s1","dependsOn":["c1"],"ifSessionVersion":3,"idempotencyKey":"k"}}`,
		},
		{
			name: "finished success",
			ev: pipeline.Event{Type: pipeline.CommandFinished, CommandID: "c2", Command: "set_model", SessionID: "s1",
				DependsOn: []string{}, Success: true, SessionVersion: intp(4), Replayed: true},
			want: `{"type":"command_finished","data":{"commandId":"c2","commandType":"set_model","sessionId":"s1","dependsOn":[],"success":true,"sessionVersion":4,"replayed":true}}`,
		},
		{
			name: "finished failure",
			ev: pipeline.Event{Type: pipeline.CommandFinished, CommandID: "b", Command: "bash", SessionID: "s1", DependsOn: []string{},
				TimedOut: true, Err: fault.Errorf(fault.Timeout, "Command 'bash' timed out after 1ms")},
			want: `{"type":"command_finished","data":{"commandId":"b","commandType":"bash","sessionId":"s1","dependsOn":[],"success":false,"error":"Command 'bash' timed out after 1ms","timedOut":true}}`,
		},
		{
			name: "finished internal failure",
			ev:   pipeline.Event{Type: pipeline.CommandFinished, CommandID: "g", Command: "get_state", DependsOn: []string{}, Err: fault.Errorf(fault.Internal, "boom")},
			want: `{"type":"command_finished","data":{"commandId":"g","commandType":"get_state","dependsOn":[],"success":false,"error":"Internal error"}}`,
		},
		{
			name: "create_session finished gets sessionVersion 0",
			ev:   pipeline.Event{Type: pipeline.CommandFinished, CommandID: "c", Command: "create_session", DependsOn: []string{}, Success: true},
			want: `{"type":"command_finished","data":{"commandId":"c","commandType":"create_session","dependsOn":[],"success":true,"sessionVersion":0}}`,
		},
		{
			name: "create_session accepted has no version",
			ev:   pipeline.Event{Type: pipeline.CommandAccepted, CommandID: "c", Command: "create_session", DependsOn: []string{}},
			want: `{"type":"command_accepted","data":{"commandId":"c","commandType":"create_session","dependsOn":[]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(lifecycleFrame(tt.ev)); got != tt.want {
				t.Errorf("lifecycleFrame =\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

func TestReadyAndShutdownFrames(t *testing.T) {
	if got, want := string(readyFrame("1.2.3")),
		`{"type":"server_ready","data":{"serverVersion":"1.2.3","protocolVersion":"1.0.0","transports":["websocket","stdio"]}}`; got != want {
		t.Errorf("readyFrame = %s, want %s", got, want)
	}
	if got, want := string(shutdownFrame(30*time.Second)),
		`{"type":"server_shutdown","data":{"reason":"graceful_shutdown","timeoutMs":30000}}`; got != want {
		t.Errorf("shutdownFrame = %s, want %s", got, want)
	}
}

func TestEventFrame(t *testing.T) {
	s := &codec{}
	tests := []struct {
		name string
		sid  string
		ev   session.Event
		want string
	}{
		{
			name: "state_changed",
			sid:  "s1",
			ev:   session.Event{Seq: 7, Type: session.EventStateChanged, State: session.StateIdle, Previous: session.StateRunning, Outcome: "completed"},
			want: `{"type":"event","sessionId":"s1","seq":7,"event":{"type":"state_changed","state":"idle","previous":"running","outcome":"completed"}}`,
		},
		{
			name: "session_changed",
			sid:  "a.b-c_d",
			ev:   session.Event{Seq: 1, Type: session.EventSessionChanged, SessionFile: "/x/y.jsonl"},
			want: `{"type":"event","sessionId":"a.b-c_d","seq":1,"event":{"type":"session_changed","sessionFile":"/x/y.jsonl"}}`,
		},
		{
			name: "interaction resolved by timeout",
			sid:  "s1",
			ev: session.Event{Seq: 12, Type: session.EventInteractionResolved, Interaction: &interaction.Event{
				Request: interaction.Request{ID: "r:1"}, Resolution: &interaction.Resolution{By: interaction.ResolvedTimeout}}},
			want: `{"type":"event","sessionId":"s1","seq":12,"event":{"type":"extension_ui_resolved","requestId":"r:1","outcome":"timeout"}}`,
		},
		{
			name: "interaction cancelled with a reason",
			sid:  "s1",
			ev: session.Event{Seq: 13, Type: session.EventInteractionResolved, Interaction: &interaction.Event{
				Request: interaction.Request{ID: "r:2"}, Resolution: &interaction.Resolution{By: interaction.ResolvedCancelled, Reason: "session closed"}}},
			want: `{"type":"event","sessionId":"s1","seq":13,"event":{"type":"extension_ui_resolved","requestId":"r:2","outcome":"cancelled","reason":"session closed"}}`,
		},
		{
			name: "interaction answered",
			sid:  "s1",
			ev: session.Event{Seq: 14, Type: session.EventInteractionResolved, Interaction: &interaction.Event{
				Request: interaction.Request{ID: "r:3"}, Resolution: &interaction.Resolution{By: interaction.ResolvedAnswered}}},
			want: `{"type":"event","sessionId":"s1","seq":14,"event":{"type":"extension_ui_resolved","requestId":"r:3","outcome":"answered"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Encode(tt.sid, tt.ev).Data
			if string(got) != tt.want {
				t.Errorf("eventFrame =\n %s\nwant\n %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("eventFrame is not JSON: %s", got)
			}
		})
	}
}

// A stream's updates may wait StreamLinger for company, in both formats;
// the message's end, tool events and the rest go at once.
func TestStreamUpdatesLinger(t *testing.T) {
	msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{{Type: llm.ContentText, Text: "hi"}}}
	update := func(typ llm.EventType) session.Event {
		return session.Event{Seq: 3, Type: session.EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate, Message: msg,
			Update: &llm.Event{Type: typ, ContentIndex: 0, Delta: "hi"}}}
	}
	tests := []struct {
		name string
		ev   session.Event
		want time.Duration
	}{
		{"text delta", update(llm.EventTextDelta), server.StreamLinger},
		{"thinking delta", update(llm.EventThinkingDelta), server.StreamLinger},
		{"text start", update(llm.EventTextStart), server.StreamLinger},
		{"message end", session.Event{Seq: 4, Type: session.EventType(agent.EventMessageEnd), Agent: &agent.Event{Type: agent.EventMessageEnd, Message: msg}}, 0},
		{"tool start", session.Event{Seq: 5, Type: session.EventType(agent.EventToolExecutionStart), Agent: &agent.Event{Type: agent.EventToolExecutionStart, ToolCallID: "t1", ToolName: "bash"}}, 0},
	}
	for _, delta := range []bool{false, true} {
		cd := &codec{delta: delta}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s delta=%v", tt.name, delta), func(t *testing.T) {
				f := cd.Encode("s1", tt.ev)
				if f.Encoded().Data == nil {
					t.Fatal("no frame")
				}
				if f.Linger != tt.want {
					t.Errorf("Linger %s, want %s", f.Linger, tt.want)
				}
			})
		}
	}
}

// BenchmarkEncodeDelta is the encoding of one stream delta, as fanOut does
// it once per event: the frame and what its queue needs to merge it.
func BenchmarkEncodeDelta(b *testing.B) {
	for _, delta := range []bool{false, true} {
		b.Run(fmt.Sprintf("delta=%v", delta), func(b *testing.B) {
			cd := &codec{delta: delta}
			msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{{Type: llm.ContentText, Text: strings.Repeat("w42 ", 100)}}}
			ev := session.Event{Seq: 1234, Type: session.EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate, Message: msg,
				Update: &llm.Event{Type: llm.EventTextDelta, Delta: "w42 "}}}
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for b.Loop() {
				if f := cd.Encode("bench-000123", ev); f.Data == nil && f.Merge == nil {
					b.Fatal("no frame")
				}
			}
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "allocs/event")
		})
	}
}

// A full-format delta is encoded when a writer takes it, by then the
// stream has moved on: the frame is still the message as it was at the
// event, the same bytes as encoding it at once.
func TestFullDeltaEncodedLaterIsTheEventsState(t *testing.T) {
	// Every field an assistant message's JSON carries is set, so the
	// copy is checked to keep each.
	msg := &llm.Message{Role: llm.RoleAssistant, Model: "m", API: llm.APIFaux, Provider: "p", ResponseID: "r", ErrorMessage: "e",
		StopReason: llm.StopLength, Timestamp: 1234, Usage: llm.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4, TotalTokens: 10, Cost: llm.Cost{Total: 0.5}},
		Content: []llm.Content{{Type: llm.ContentThinking, Thinking: "hm", ThinkingSignature: "sig"}, {Type: llm.ContentText, Text: "Hello \"you\"\n", TextSignature: "ts"},
			{Type: llm.ContentToolCall, ID: "t1", Name: "bash", Arguments: []byte(`{"a":1}`)}}}
	ev := session.Event{Seq: 7, Type: session.EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate, Message: msg,
		Update: &llm.Event{Type: llm.EventTextDelta, ContentIndex: 1, Delta: "\n"}}}
	cd := &codec{}
	want := string(cd.frame("s1", ev))
	f := cd.Encode("s1", ev)
	if f.Data != nil || f.Merge == nil || f.Size < len(want) {
		t.Fatalf("frame: data %q, merge %v, size %d (encoded: %d bytes); want it left to the writer, sized at least as large", f.Data, f.Merge != nil, f.Size, len(want))
	}
	// The stream goes on as a Builder does: new strings, a new block.
	msg.Content[1].Text += "more"
	msg.Content = append(msg.Content, llm.Content{Type: llm.ContentThinking, Thinking: "hm"})
	msg.Usage.Output = 42
	if got := string(f.Encoded().Data); got != want {
		t.Errorf("encoded later:\n %s\nwant\n %s", got, want)
	}
	// Joined with an earlier delta: the newest state, both deltas.
	if got := string(f.Merge(f.Key, f.Seq, "a\n", f.State)); !strings.Contains(got, `"delta":"a\n"`) || !strings.Contains(got, `"text":"Hello \"you\"\n"`) {
		t.Errorf("joined: %s", got)
	}
}
