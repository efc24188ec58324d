// Package pirpc is pi's RPC mode as an agentd face: JSON commands on one
// line each on stdin, responses and events on stdout, for one session.
// Programs written against `pi --mode rpc` (editor plugins, bots, web
// bridges) drive `agentd rpc` unchanged.
package pirpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/ndjson"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/picommand"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/settings"
)

// Models is what the face needs of the model registry.
type Models interface {
	// Available lists the models that can be used now, in a stable order.
	Available() []*llm.Model
}

// Options configure a Server.
type Options struct {
	Session *session.Session
	Models  Models
	// Settings, when set, receives the choices pi persists (model,
	// thinking level, queue modes, auto-compaction, auto-retry).
	Settings *settings.Store
	// MaxLineBytes bounds one command line (default 10 MiB).
	MaxLineBytes int
	// Delta makes message_update carry only the delta, not the whole
	// partial message twice: bytes per token stay constant however long
	// the answer grows.
	Delta bool
	// Cwd is where export_html writes by default.
	Cwd string
	// ExportsDir is the other directory export_html may write to (the
	// data dir's exports folder).
	ExportsDir string
	Logger     *slog.Logger
}

// Server speaks pi's RPC protocol for one session.
type Server struct {
	opt  Options
	s    *session.Session
	log  *slog.Logger
	out  *ndjson.Writer
	wg   sync.WaitGroup
	ctx  context.Context
	stop context.CancelFunc
	// inputClosed is set when the input has ended; from then on every
	// new interaction wakes Run to cancel it.
	inputClosed atomic.Bool
	wake        chan struct{}
	// inFlight counts the commands running off the read loop (wg has no
	// way to ask).
	inFlight atomic.Int64
}

// New returns a server for opt.Session.
func New(opt Options) *Server {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = 10 << 20
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{opt: opt, s: opt.Session, log: opt.Logger, wake: make(chan struct{}, 1)}
}

// Run serves commands from in until it ends or ctx is cancelled, writing
// responses and events to out.
//
// When in ends, the work already accepted finishes first, as a shell user
// piping a prompt in expects: the run in progress goes on to agent_end
// (follow-ups and retries included), and bash commands and a compaction
// complete. Nobody can answer a question or an approval any more, so
// those are cancelled (approvals are rejected with a reason the model
// sees). When ctx is cancelled, even during that wait, the run in
// progress is aborted at once and in-flight commands are cancelled.
// Either way everything written is flushed before Run returns.
func (srv *Server) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	srv.ctx, srv.stop = context.WithCancel(ctx)
	defer srv.stop()
	srv.out = ndjson.New(out)
	defer srv.out.Close()
	unsubscribe := srv.s.Subscribe(srv.onEvent)
	defer unsubscribe()

	lines, readErr := piwire.ReadLines(srv.ctx, in, srv.opt.MaxLineBytes, func() {
		srv.out.Write(piwire.Marshal(failure(nil, "parse", fmt.Sprintf("Failed to parse command: line exceeds the maximum size of %d bytes", srv.opt.MaxLineBytes))))
	})
	var err error
loop:
	for {
		select {
		case line := <-lines:
			srv.handleLine(line)
		case err = <-readErr:
			break loop
		case <-srv.ctx.Done():
			break loop
		}
	}
	var settled <-chan struct{}
	if errors.Is(err, io.EOF) {
		settled = srv.finish()
	}
	srv.stop()
	srv.s.Abort()
	srv.wg.Wait()
	if settled != nil {
		<-settled
	}
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// finish waits, after the input ended, for the accepted work to end or
// for ctx to be cancelled, whichever comes first. Every line read was
// handled before the end of input was seen, so nothing new starts: a
// prompt was accepted (its run registered) by the time its line was
// handled, and the commands that run off the loop are counted in wg.
// The returned channel is closed once the waiting goroutine is gone.
func (srv *Server) finish() <-chan struct{} {
	srv.inputClosed.Store(true)
	if srv.s.Running() || srv.inFlight.Load() > 0 {
		// Someone piping commands in sees why agentd has not exited yet.
		srv.log.Info("input ended: finishing the work in progress, then exiting (interrupt to abort it)")
	}
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		for srv.ctx.Err() == nil {
			_ = srv.s.Wait(srv.ctx)
			srv.wg.Wait()
			if !srv.s.Running() {
				return
			}
		}
	}()
	for {
		srv.cancelInteractions()
		select {
		case <-settled:
			return settled
		case <-srv.wake:
		case <-srv.ctx.Done():
			return settled
		}
	}
}

// inputEnded is what the model is told when an approval it waits for can
// no longer be given.
const inputEnded = "nobody can answer: the client closed agentd rpc's input"

// cancelInteractions ends the pending interactions once no client can
// answer them. It runs on Run's goroutine, never inside onEvent: answering
// emits an event, and onEvent runs under the session's emit lock.
func (srv *Server) cancelInteractions() {
	for _, req := range srv.s.Interactions() {
		resp := interaction.Response{Cancelled: true}
		if req.Kind == interaction.KindApproval {
			resp = interaction.Response{Verdict: interaction.VerdictReject, Feedback: inputEnded}
		}
		err := srv.s.Answer(req.ID, resp)
		switch {
		case err == nil:
			srv.log.Info("cancelled an interaction after the end of input", "id", req.ID, "kind", req.Kind)
		case !errors.Is(err, interaction.ErrAlreadyResolved) && !errors.Is(err, interaction.ErrNotFound):
			srv.log.Warn("cancelling an interaction after the end of input", "id", req.ID, "err", err)
		}
	}
}

// response is pi's response frame.
type response struct {
	ID      *rawID `json:"id,omitempty"`
	Type    string `json:"type"`
	Command string `json:"command,omitempty"`
	Success bool   `json:"success"`
	Data    any    `json:"data,omitempty"`
	Error   string `json:"error,omitempty"`
}

// withData is a success with data; success without data leaves "data"
// out (JSON null data, cycle_model's with one model, is a
// json.RawMessage that answer writes as it is).
type withData struct {
	ID      *rawID `json:"id,omitempty"`
	Type    string `json:"type"`
	Command string `json:"command"`
	Success bool   `json:"success"`
	Data    any    `json:"data"`
}

func success(id *rawID, cmd string, data any) any {
	if data == nil {
		return response{ID: id, Type: "response", Command: cmd, Success: true}
	}
	return withData{ID: id, Type: "response", Command: cmd, Success: true, Data: data}
}

func failure(id *rawID, cmd, msg string) response {
	return response{ID: id, Type: "response", Command: cmd, Success: false, Error: msg}
}

func (srv *Server) reply(v any) { srv.out.Write(piwire.Marshal(v)) }

// fail answers a command that failed: the one place rpc maps an error to
// the client. A fault.Error is written for the client and goes out as
// its message; anything else (a bug, a disk that failed) is logged with
// the session and the command, and the client reads "Internal error".
func (srv *Server) fail(id *rawID, typ string, err error) {
	fe := fault.Public(err)
	msg := fe.Message
	if fe.Code == fault.Internal {
		srv.log.Error("command failed", "session", srv.s.ID(), "command", typ, "err", err)
		msg = "Internal error"
	}
	srv.reply(failure(id, typ, msg))
}

// async runs a command that waits (abort, compact, bash) without holding
// up the commands after it.
func (srv *Server) async(f func()) {
	srv.wg.Add(1)
	srv.inFlight.Add(1)
	go func() {
		defer srv.wg.Done()
		defer srv.inFlight.Add(-1)
		f()
	}()
}

// command is the union of every command's fields: pi's shared ones and
// the answer fields of pi's extension UI responses.
type command struct {
	ID   *rawID  `json:"id"`
	Type *string `json:"type"`
	piwire.Fields
	Value     *string `json:"value"`
	Confirmed *bool   `json:"confirmed"`
	Cancelled bool    `json:"cancelled"`
}

func (srv *Server) handleLine(line []byte) {
	if len(strings.TrimSpace(string(line))) == 0 {
		return
	}
	var probe any
	if err := json.Unmarshal(line, &probe); err != nil {
		srv.reply(failure(nil, "parse", "Failed to parse command: "+piwire.DescribeJSONError(err)))
		return
	}
	obj, isObj := probe.(map[string]any)
	var c command
	if isObj {
		if err := json.Unmarshal(line, &c); err != nil {
			cmdType, _ := obj["type"].(string)
			var id *rawID
			var env struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(line, &env) == nil && len(env.ID) > 0 {
				var r rawID
				if r.UnmarshalJSON(env.ID) == nil {
					id = &r
				}
			}
			srv.reply(failure(id, cmdType, "Invalid command: "+piwire.DescribeJSONError(err)))
			return
		}
	}
	if c.Type == nil {
		srv.reply(response{Type: "response", Success: false, Error: "Unknown command: undefined"})
		return
	}
	srv.dispatch(&c)
}

func (srv *Server) dispatch(c *command) {
	id, typ := c.ID, *c.Type
	switch typ {
	case "prompt", "steer", "follow_up":
		if err := picommand.CheckMessage(typ, &c.Fields); err != nil {
			srv.fail(id, typ, err)
			return
		}
		if commands.Of(srv.s).IsBuiltin(*c.Message) {
			srv.async(func() { srv.runBuiltin(id, typ, *c.Message) })
			return
		}
		if typ == "prompt" {
			srv.prompt(id, &c.Fields)
			return
		}
	case "cycle_model":
		// pi's RPC mode cycles forward only.
		data, err := picommand.CycleModel(srv.env(), false)
		srv.answer(id, typ, data, err)
		return
	case "set_thinking_level":
		level, err := llm.ParseThinkingLevel(c.Level)
		if err != nil {
			// The parser's text is pi's message for a bad level.
			srv.fail(id, typ, fault.Wrap(fault.Invalid, err, err.Error()))
			return
		}
		srv.answer(id, typ, nil, picommand.SetThinking(srv.env(), level))
		return
	case "bash":
		srv.bash(id, typ, c.Command)
		return
	case "extension_ui_response":
		srv.answerUI(c)
		return
	}
	if _, ok := picommand.Lookup(typ); !ok {
		srv.reply(failure(nil, typ, "Unknown command: "+typ))
		return
	}
	if waits[typ] {
		f := c.Fields
		srv.async(func() { srv.run(id, typ, &f) })
		return
	}
	srv.run(id, typ, &c.Fields)
}

// waits are the commands that wait for the session (an abort for the
// run to end, a compaction for the model): they run off the read loop,
// so the commands after them are not held up.
var waits = map[string]bool{"abort": true, "abort_retry": true, "compact": true}

// env is what the shared pi commands run against.
func (srv *Server) env() picommand.Env {
	return picommand.Env{Session: srv.s, Models: srv.opt.Models, Settings: srv.opt.Settings, Logger: srv.log,
		Export: func(path string, overwrite bool) (string, error) {
			return srv.s.ExportHTMLFile(session.ExportRequest{Path: path, Cwd: srv.opt.Cwd, ExportsDir: srv.opt.ExportsDir, Overwrite: overwrite})
		}}
}

// run runs one of the shared pi commands and answers it.
func (srv *Server) run(id *rawID, typ string, f *piwire.Fields) {
	data, _, err := picommand.Run(srv.ctx, srv.env(), typ, f)
	srv.answer(id, typ, data, err)
}

// answer replies to a command with its data, or its error.
func (srv *Server) answer(id *rawID, typ string, data any, err error) {
	if err != nil {
		srv.fail(id, typ, err)
		return
	}
	if raw, ok := data.(json.RawMessage); ok {
		// Sent as it is: get_messages' data is written by hand.
		b := append([]byte(nil), `{`...)
		if id != nil {
			b = append(b, `"id":`...)
			b = append(b, *id...)
			b = append(b, ',')
		}
		b = append(b, `"type":"response","command":`...)
		b = llm.AppendJSONString(b, typ)
		b = append(b, `,"success":true,"data":`...)
		b = append(b, raw...)
		srv.out.Write(append(b, '}'))
		return
	}
	srv.reply(success(id, typ, data))
}

// prompt starts a run, or queues the message as streamingBehavior says
// while one is running; pi answers once the prompt is accepted.
func (srv *Server) prompt(id *rawID, f *piwire.Fields) {
	const typ = "prompt"
	b, err := picommand.Behavior(f.StreamingBehavior)
	if err != nil {
		srv.fail(id, typ, err)
		return
	}
	m := session.UserMessage(*f.Message, f.Images)
	if err := srv.s.PromptThen(m, b, func() { srv.reply(success(id, typ, nil)) }); err != nil {
		srv.fail(id, typ, err)
	}
}

// bash runs a shell command, off the read loop. pi's answer leaves out
// the exit code of a command that was killed.
func (srv *Server) bash(id *rawID, typ string, command *string) {
	if command == nil {
		srv.fail(id, typ, fault.Errorf(fault.Invalid, "%s requires a \"command\" string", typ))
		return
	}
	srv.async(func() {
		m, err := srv.s.Bash(srv.ctx, *command, false)
		if err != nil {
			srv.fail(id, typ, err)
			return
		}
		srv.reply(success(id, typ, bashResult{Output: m.Output, ExitCode: m.ExitCode, Cancelled: m.Cancelled, Truncated: m.Truncated, FullOutputPath: m.FullOutputPath}))
	})
}

// uiRequestFrame is pi's extension_ui_request: the dialog with an "id".
type uiRequestFrame struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	piwire.Dialog
}

type bashResult struct {
	Output         string `json:"output"`
	ExitCode       *int   `json:"exitCode,omitempty"`
	Cancelled      bool   `json:"cancelled"`
	Truncated      bool   `json:"truncated"`
	FullOutputPath string `json:"fullOutputPath,omitempty"`
}

// onEvent turns session events into lines. It runs on the session's
// emitting goroutine and only encodes and queues: a slow reader of
// stdout never stalls the session.
func (srv *Server) onEvent(ev session.Event) {
	if ev.Type == session.EventInteractionRequested {
		if d, ok := piwire.NewDialog(ev.Interaction.Request, false); ok {
			srv.out.Write(piwire.Marshal(uiRequestFrame{Type: "extension_ui_request", ID: ev.Interaction.Request.ID, Dialog: d}))
		}
		if srv.inputClosed.Load() {
			select {
			case srv.wake <- struct{}{}:
			default: // a wake-up is already pending; it covers this one
			}
		}
		return
	}
	if line := piwire.AppendEvent(nil, ev, srv.opt.Delta); line != nil {
		srv.out.Write(line)
	}
}

// answerUI routes an extension_ui_response to the pending interaction.
func (srv *Server) answerUI(c *command) {
	if c.ID == nil {
		return
	}
	uid := c.ID.text()
	req, ok := srv.s.InteractionByID(uid)
	if !ok {
		return // pi ignores responses to unknown ids
	}
	resp, err := piwire.Answer{Value: c.Value, Confirmed: c.Confirmed, Cancelled: c.Cancelled}.Response(req)
	if err != nil {
		srv.log.Warn("extension_ui_response", "id", uid, "err", err)
		return
	}
	if err := srv.s.Answer(uid, resp); err != nil && !errors.Is(err, interaction.ErrAlreadyResolved) {
		srv.log.Warn("extension_ui_response", "id", uid, "err", err)
	}
}
