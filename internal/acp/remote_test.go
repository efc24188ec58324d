package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// piScript is a pi-server on 127.0.0.1 that answers the bridge's
// commands from a script: what it sends for a prompt, and what it got.
type piScript struct {
	t *testing.T
	// onPrompt writes the frames of a run; ask is the approval dialog it
	// waits on, "" for none.
	events []string
	ask    string
	after  []string

	mu       sync.Mutex
	commands []map[string]any
	answered chan map[string]any // for the test
	resume   chan struct{}       // for the rest of the run
	// kill, closed, drops the connection as a dying server would.
	kill chan struct{}
}

func (p *piScript) serve(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := r.Context()
	if p.kill != nil {
		go func() {
			select {
			case <-p.kill:
				_ = ws.CloseNow()
			case <-ctx.Done():
			}
		}()
	}
	write := func(s string) { _ = ws.Write(ctx, websocket.MessageText, []byte(s)) }
	write(`{"type":"server_ready","data":{"protocolVersion":"1.0.0"}}`)
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var cmd map[string]any
		_ = json.Unmarshal(b, &cmd)
		p.mu.Lock()
		p.commands = append(p.commands, cmd)
		p.mu.Unlock()
		id, _ := cmd["id"].(string)
		ok := func(typ, data string) {
			write(fmt.Sprintf(`{"type":"response","id":%q,"command":%q,"success":true,"data":%s}`, id, typ, data))
		}
		ev := func(e string) { write(`{"type":"event","sessionId":"s1","seq":1,"event":` + e + `}`) }
		switch cmd["type"] {
		case "create_session":
			ok("create_session", `{"sessionId":"s1","sessionInfo":{"sessionId":"s1","cwd":"/w","model":{"contextWindow":1000}}}`)
		case "get_messages":
			ok("get_messages", `{"messages":[]}`)
		case "prompt":
			write(fmt.Sprintf(`{"type":"command_started","data":{"commandId":%q}}`, id))
			for _, e := range p.events {
				ev(e)
			}
			if p.ask == "" {
				for _, e := range p.after {
					ev(e)
				}
				ok("prompt", `{"outcome":"completed"}`)
				continue
			}
			ev(p.ask)
			// The answer comes on this connection; the rest of the run
			// after it.
			go func(promptID string) {
				select {
				case <-p.resume:
				case <-ctx.Done():
					return
				}
				for _, e := range p.after {
					ev(e)
				}
				write(fmt.Sprintf(`{"type":"response","id":%q,"command":"prompt","success":true,"data":{"outcome":"completed"}}`, promptID))
			}(id)
		case "extension_ui_response":
			ok("extension_ui_response", `null`)
			p.answered <- cmd
			p.resume <- struct{}{}
		default:
			write(fmt.Sprintf(`{"type":"response","id":%q,"command":%q,"success":false,"error":"not scripted"}`, id, cmd["type"]))
		}
	}
}

// The bridge turns pi-server's frames into the same session/update and
// permission requests the local face sends, and answers the approval
// dialog with pi-server's option.
func TestRemoteBridgesARun(t *testing.T) {
	tests := []struct {
		option string
		want   string // the select value sent back
	}{
		{AllowOnce, "Allow"},
		{AllowAlways, "Always allow this tool in this session"},
		{RejectOnce, "The user rejected this call."},
	}
	for _, tc := range tests {
		t.Run(tc.option, func(t *testing.T) {
			p := &piScript{t: t, answered: make(chan map[string]any, 1), resume: make(chan struct{}, 1),
				events: []string{
					`{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"Let me look"}}`,
					`{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"bash","arguments":{"command":"ls -la"}}],"stopReason":"toolUse","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}},"timestamp":1}}`,
				},
				ask: `{"type":"extension_ui_request","requestId":"r1","method":"select","title":"Allow bash: ls -la?","message":"{\"command\":\"ls -la\"}","options":["Allow","Always allow this tool in this session","Skip","Reject"]}`,
				after: []string{
					`{"type":"extension_ui_resolved","requestId":"r1","outcome":"answered"}`,
					`{"type":"tool_execution_start","toolCallId":"call_1","toolName":"bash","args":{"command":"ls -la"}}`,
					`{"type":"tool_execution_end","toolCallId":"call_1","toolName":"bash","result":{"content":[{"type":"text","text":"total 0"}]},"isError":false}`,
					`{"type":"state_changed","state":"idle","previous":"running","outcome":"completed"}`,
				}}
			hs := httptest.NewServer(http.HandlerFunc(p.serve))
			defer hs.Close()
			r, err := DialRemote(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http")+"/", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			c := startAgentWith(t, Options{Remote: r, Version: "test", MaxLineBytes: 1 << 20})
			c.answer = selected(tc.option)
			sid := c.newSession("/w")
			if sid != "s1" {
				t.Fatalf("sessionId %q", sid)
			}
			res := result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "list"}}}))
			if res["stopReason"] != "end_turn" {
				t.Fatalf("stopReason %v", res)
			}
			asked := <-c.asked
			tcall := asked["toolCall"].(map[string]any)
			if tcall["toolCallId"] != "call_1" || tcall["title"] != "ls -la" || tcall["kind"] != "execute" {
				t.Fatalf("permission request: %v", asked)
			}
			a := <-p.answered
			if got := a["response"].(map[string]any)["value"]; got != tc.want || a["requestId"] != "r1" {
				t.Fatalf("answer sent: %v, want value %q", a, tc.want)
			}
			var kinds []string
			for _, u := range c.takeUpdates() {
				kinds = append(kinds, fmt.Sprint(u["sessionUpdate"], ":", u["status"]))
			}
			want := "agent_message_chunk:<nil> usage_update:<nil> tool_call:pending tool_call_update:completed"
			if got := strings.Join(kinds, " "); got != want {
				t.Fatalf("updates %s, want %s", got, want)
			}
		})
	}
}

// A server that goes away ends the turn with an error that says so.
func TestRemoteLostEndsTheTurn(t *testing.T) {
	p := &piScript{t: t, answered: make(chan map[string]any, 1), resume: make(chan struct{}, 1), kill: make(chan struct{}),
		ask: `{"type":"extension_ui_request","requestId":"r1","method":"confirm","title":"Sure?"}`}
	hs := httptest.NewServer(http.HandlerFunc(p.serve))
	defer hs.Close()
	r, err := DialRemote(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http")+"/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := startAgentWith(t, Options{Remote: r, Version: "test", MaxLineBytes: 1 << 20})
	sid := c.newSession("/w")
	id := c.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "x"}}})
	go func() {
		<-c.asked
		close(p.kill)
	}()
	f := c.wait(id)
	e, _ := f["error"].(map[string]any)
	if !strings.Contains(fmt.Sprint(e["message"]), "connection to agentd serve ended") {
		t.Fatalf("prompt after the server went away: %v", f)
	}
}

// A URL where nothing listens is a clear error.
func TestDialRemoteDown(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/"
	hs.Close()
	_, err := DialRemote(context.Background(), url, "", nil)
	if err == nil || !strings.Contains(err.Error(), "is `agentd serve` running there?") {
		t.Fatalf("err = %v", err)
	}
}
