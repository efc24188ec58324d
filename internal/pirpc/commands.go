package pirpc

import (
	"strconv"
	"sync/atomic"
)

// notices numbers the notify frames of built-in commands.
var notices atomic.Int64

// notifyFrame is pi's fire-and-forget extension_ui_request "notify":
// how pi's RPC mode shows a command's output.
type notifyFrame struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	Method     string `json:"method"`
	Message    string `json:"message"`
	NotifyType string `json:"notifyType"`
}

// runBuiltin runs a built-in command sent as a prompt: its output goes
// out as a notify, then the command's answer (pi's extension commands
// answer the same way).
func (srv *Server) runBuiltin(id *rawID, typ, text string) {
	out, _, err := srv.s.RunCommand(srv.ctx, text)
	if err != nil {
		srv.fail(id, typ, err)
		return
	}
	if out != "" {
		n := notices.Add(1)
		srv.reply(notifyFrame{Type: "extension_ui_request", ID: "agentd-command-" + strconv.FormatInt(n, 10), Method: "notify", Message: out, NotifyType: "info"})
	}
	srv.reply(success(id, typ, nil))
}
