package server

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

func wireInt(n int) *int { return &n }

// What crosses NATS between nodes, byte for byte as agentd sent it when
// the pipeline's types carried these field names themselves: a node of
// one version reads what a node of the other sends. Each message is
// encoded and compared, then decoded and encoded again.
func TestClusterWireFormat(t *testing.T) {
	cmd := pipeline.Command{Type: "prompt", ID: "c1", SessionID: "s1", DependsOn: []string{"c0"}, IfSessionVersion: wireInt(2),
		IdempotencyKey: "k1", Payload: json.RawMessage(`{"message":"<hi> & bye"}`)}
	who := Principal{Subject: "alice", Scoped: true, Sessions: []string{"s1"}}
	finished := pipeline.Event{Type: pipeline.CommandFinished, CommandID: "c1", Command: "prompt", SessionID: "s1", DependsOn: []string{"c0"},
		IfSessionVersion: wireInt(2), IdempotencyKey: "k1", Lane: "session:s1", Success: false,
		Err: fault.New(fault.Failed, "boom <x>"), Replayed: true, TimedOut: true, SessionVersion: wireInt(4)}
	accepted := pipeline.Event{Type: pipeline.CommandAccepted, CommandID: "anon:1:1", Command: "get_state", DependsOn: []string{}, Lane: "server"}
	for _, tt := range []struct {
		name string
		msg  any
		want string
	}{
		{"envelope", &envelope{Cmd: toClusterCommand(cmd), Who: who, From: "n1", Hops: 1, Via: "n0"}, `{"cmd":{"type":"prompt","id":"c1","sessionId":"s1","dependsOn":["c0"],"ifSessionVersion":2,"idempotencyKey":"k1","payload":{"message":"\u003chi\u003e \u0026 bye"}},"who":{"Subject":"alice","Scoped":true,"Sessions":["s1"]},"from":"n1","hops":1,"via":"n0"}`},
		{"envelope minimal", &envelope{Cmd: toClusterCommand(pipeline.Command{Type: "get_state", SessionID: "s1"}), From: "n1", Hops: 1}, `{"cmd":{"type":"get_state","sessionId":"s1"},"who":{"Subject":"","Scoped":false,"Sessions":null},"from":"n1","hops":1}`},
		{"reply", &reply{Resp: toClusterResponse(pipeline.Response{ID: "c1", Command: "prompt", Success: true, Data: json.RawMessage(`{"a":1}`),
			SessionVersion: wireInt(3), Replayed: true, TimedOut: true, DataDropped: true}),
			Sub: &remoteSub{SessionID: "s1", After: 9}, Seq: 12}, `{"resp":{"id":"c1","command":"prompt","success":true,"data":{"a":1},"sessionVersion":3,"replayed":true,"timedOut":true,"dataDropped":true},"sub":{"sessionId":"s1","after":9},"seq":12}`},
		{"reply failed", &reply{Resp: toClusterResponse(pipeline.Response{Command: "prompt", Err: fault.New(fault.NotFound, "Session s1 not found")})}, `{"resp":{"command":"prompt","success":false,"error":{"code":"not_found","message":"Session s1 not found"}}}`},
		{"notice finished", &notice{From: "n1", Via: "n0", Event: toClusterEvent(finished)}, `{"from":"n1","via":"n0","event":{"type":"command_finished","commandId":"c1","command":"prompt","sessionId":"s1","dependsOn":["c0"],"ifSessionVersion":2,"idempotencyKey":"k1","lane":"session:s1","error":{"code":"failed","message":"boom \u003cx\u003e"},"replayed":true,"timedOut":true,"sessionVersion":4}}`},
		{"notice accepted", &notice{From: "n1", Event: toClusterEvent(accepted)}, `{"from":"n1","event":{"type":"command_accepted","commandId":"anon:1:1","command":"get_state","dependsOn":[],"lane":"server"}}`},
		{"notice frame", &notice{From: "n1", Face: "piserver", Frame: json.RawMessage(`{"type":"x"}`)}, `{"from":"n1","face":"piserver","frame":{"type":"x"}}`},
		{"notice note", &notice{From: "n1", Face: "rest", Note: json.RawMessage(`{"deleted":"a1","conversation":"c1"}`)}, `{"from":"n1","face":"rest","note":{"deleted":"a1","conversation":"c1"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("encoded\n %s\nwant\n %s", b, tt.want)
			}
			back := reflect.New(reflect.TypeOf(tt.msg).Elem()).Interface()
			if err := json.Unmarshal([]byte(tt.want), back); err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(back); string(again) != tt.want {
				t.Errorf("decoded and encoded again\n %s\nwant\n %s", again, tt.want)
			}
		})
	}
}
