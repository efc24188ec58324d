// Package picommand is pi's commands run against a session, once for both
// pi faces: pi's RPC mode (package pirpc) and pi-server (package
// piserver). A command here checks its fields with the messages pi's RPC
// mode answers, does what it does to the session and returns the data of
// its answer; its errors are fault.Errors, which each face maps once.
//
// What is left to a face is what truly differs between them: the frame
// around a command (ids, pi-server's sessionId routing, idempotency keys,
// lanes and control classes), which session it runs on, when it answers
// (rpc answers some commands off its read loop), and pi-server's schema:
// pi-server checks every frame against its field table first, with its
// own "Validation failed: ..." messages, and then calls a command's Run
// without Check.
package picommand

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/settings"
)

// Models is what commands need of the model registry.
type Models interface {
	// Available lists the models that can be used now, in a stable order.
	Available() []*llm.Model
}

// Env is what a command runs against.
type Env struct {
	Session *session.Session
	Models  Models
	// Settings, when set, receives the choices pi persists (model,
	// thinking level, queue modes, auto-compaction, auto-retry); pi-server
	// keeps none.
	Settings *settings.Store
	// Logger, when set, hears of a setting that could not be saved.
	Logger *slog.Logger
	// Export writes the session as HTML to path (overwrite: whether it
	// may replace a file) and returns the path written: each face knows
	// where its exports may go.
	Export func(path string, overwrite bool) (string, error)
}

// persist saves a choice the way pi does: a failure to save does not
// undo the change, it is logged.
func (e Env) persist(f func(*settings.Settings)) {
	if e.Settings == nil {
		return
	}
	if err := e.Settings.Update(f); err != nil && e.Logger != nil {
		e.Logger.Warn("saving settings", "err", err)
	}
}

// Null is the data of an answer whose data is JSON null (cycle_model
// with one model), as opposed to an answer without data (nil).
var Null = json.RawMessage("null")

// Command is one pi command.
type Command struct {
	// Check, when set, refuses fields the command cannot run with, in
	// pi's words (fault.Invalid).
	Check func(typ string, f *piwire.Fields) error
	// Run does the command and returns its answer's data: nil for none,
	// a json.RawMessage to be sent as it is, or a value to marshal.
	Run func(ctx context.Context, e Env, typ string, f *piwire.Fields) (any, error)
}

// Lookup returns the command named typ.
func Lookup(typ string) (Command, bool) {
	c, ok := table()[typ]
	return c, ok
}

// Run checks the fields of command typ and runs it. It reports ok false
// for a command this layer does not have.
func Run(ctx context.Context, e Env, typ string, f *piwire.Fields) (data any, ok bool, err error) {
	c, ok := table()[typ]
	if !ok {
		return nil, false, nil
	}
	if c.Check != nil {
		if err := c.Check(typ, f); err != nil {
			return nil, true, err
		}
	}
	data, err = c.Run(ctx, e, typ, f)
	return data, true, err
}

// require is pi's message for a missing field: "fork requires an
// \"entryId\"".
func require(ok bool, typ, what string) error {
	if ok {
		return nil
	}
	return fault.Errorf(fault.Invalid, "%s requires %s", typ, what)
}
