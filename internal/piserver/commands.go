package piserver

import (
	"context"
	"encoding/json"
	"github.com/agentd-dev/agentd/internal/fault"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
)

// commandSpec is one command: what the decoder checks and how the
// pipeline runs it.
type commandSpec struct {
	session bool // a session command: lane session:<id>, sessionId required
	needsID bool // a server command that names a session
	fields  []field
	class   pipeline.Class
	// readOnly commands leave the session version alone.
	readOnly bool
	bypass   func(pipeline.Command) bool
	timeout  time.Duration
	run      func(ctx context.Context, c *call) (any, error)
	// keep is the handler's pipeline.Handler.Keep.
	keep func(pipeline.Response) pipeline.Response
}

// decode reads the fields the command declares, and only those: a field
// another command uses, sent here with another type, is ignored as any
// unknown field is.
func (spec *commandSpec) decode(payload json.RawMessage, p *params) error {
	if len(payload) == 0 || len(spec.fields) == 0 {
		return nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(payload, &all); err != nil {
		return fault.Errorf(fault.Invalid, "Validation failed: %s", shapeProblem(err))
	}
	b := []byte{'{'}
	for _, f := range spec.fields {
		raw, ok := all[f.name]
		if !ok {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(llm.AppendJSONString(b, f.name), ':')
		b = append(b, raw...)
	}
	if err := json.Unmarshal(append(b, '}'), p); err != nil {
		return fault.Errorf(fault.Invalid, "Validation failed: %s", shapeProblem(err))
	}
	return nil
}

// call is one command being run.
type call struct {
	cmd pipeline.Command
	p   params
	h   *server.Hosted // the session, for session commands
}

// origin is the command's origin, nil for commands submitted without one.
func (c *call) origin() *origin {
	o, _ := c.cmd.Origin.(*origin)
	return o
}

// who is the principal the command's connection authenticated as;
// commands without a connection (replays after a restart) act for the
// server.
func (c *call) who() server.Principal {
	if o := c.origin(); o != nil {
		return o.c.who
	}
	if r, ok := c.cmd.Origin.(*server.Remote); ok {
		return r.Who // sent by a client of another cluster node
	}
	return server.Principal{}
}

// params is the union of every command's fields; the decoder has checked
// the types of the ones the command declares.
type params struct {
	piwire.Fields
	Cwd             string    `json:"cwd"`
	Sandbox         string    `json:"sandbox"`  // create_session: a stricter mode than the server's
	AfterSeq        *float64  `json:"afterSeq"` // a non-negative integer (checked)
	Direction       string    `json:"direction"`
	RequestID       string    `json:"requestId"`
	Response        *uiAnswer `json:"response"`
	Limit           *int      `json:"limit"`
	SessionIDFilter string    `json:"sessionIdFilter"`
	CommandID       string    `json:"commandId"`
	FromTimestamp   *int64    `json:"fromTimestamp"`
	ToTimestamp     *int64    `json:"toTimestamp"`
}

type uiAnswer struct {
	Method    string         `json:"method"`
	Value     *string        `json:"value"`
	Confirmed *bool          `json:"confirmed"`
	Responses map[string]any `json:"responses"`
}

func always(pipeline.Command) bool { return true }

// null is a response whose data is JSON null (cycle_model with one model).
var null = json.RawMessage("null")

var (
	fMessage = field{name: "message", kind: kString, required: true, max: 200000}
	fImages  = field{name: "images", kind: kArray}
)

func (s *Server) commands() map[string]*commandSpec {
	read := func(run func(context.Context, *call) (any, error)) *commandSpec {
		return &commandSpec{session: true, class: pipeline.ClassRead, readOnly: true, run: run}
	}
	// peek reads what a client needs to show a session (its modes,
	// models and commands) without waiting in the session's lane behind
	// a run, as get_state does: an editor opening a session whose run
	// waits for an approval asks these before it can answer it.
	peek := func(run func(context.Context, *call) (any, error)) *commandSpec {
		return &commandSpec{session: true, class: pipeline.ClassControl, readOnly: true, run: run}
	}
	mutate := func(run func(context.Context, *call) (any, error), fields ...field) *commandSpec {
		return &commandSpec{session: true, class: pipeline.ClassMutate, fields: fields, run: run}
	}
	control := func(run func(context.Context, *call) (any, error), fields ...field) *commandSpec {
		return &commandSpec{session: true, class: pipeline.ClassControl, fields: fields, run: run}
	}
	long := func(run func(context.Context, *call) (any, error), fields ...field) *commandSpec {
		return &commandSpec{session: true, class: pipeline.ClassLong, fields: fields, run: run}
	}
	server := func(class pipeline.Class, run func(context.Context, *call) (any, error), fields ...field) *commandSpec {
		return &commandSpec{class: class, fields: fields, run: run}
	}
	m := map[string]*commandSpec{
		// Server commands (spec §17.1).
		"list_sessions": server(pipeline.ClassRead, s.listSessions),
		"create_session": {class: pipeline.ClassMutate, timeout: -1, run: s.createSession,
			fields: []field{{name: "cwd", kind: kString, max: 4096}, {name: "sandbox", kind: kString, max: 32}}},
		// delete_session does not wait behind the session's running work:
		// closing the session stops it.
		"delete_session": {needsID: true, class: pipeline.ClassMutate, run: s.deleteSession, bypass: always},
		// switch_session does not wait for the session's running prompt:
		// watching a session mid-run is its point.
		"switch_session":       {needsID: true, class: pipeline.ClassControl, readOnly: true, run: s.switchSession, fields: []field{{name: "afterSeq", kind: kInt}}},
		"get_metrics":          server(pipeline.ClassRead, s.metrics),
		"health_check":         server(pipeline.ClassRead, s.healthCheck),
		"list_stored_sessions": server(pipeline.ClassRead, s.listStored),
		"get_startup_recovery": server(pipeline.ClassRead, s.startupRecovery),
		"get_command_history": server(pipeline.ClassRead, s.commandHistory,
			field{name: "limit", kind: kInt}, field{name: "sessionIdFilter", kind: kString, max: 256},
			field{name: "commandId", kind: kString, max: 256}, field{name: "fromTimestamp", kind: kInt}, field{name: "toTimestamp", kind: kInt}),
		"load_session": server(pipeline.ClassMutate, s.loadSession, field{name: "sessionPath", kind: kString, required: true, max: 4096}),

		// Session commands (spec §17.2).
		"prompt": {session: true, class: pipeline.ClassLong, run: s.prompt,
			fields: []field{fMessage, fImages, {name: "streamingBehavior", kind: kString, oneOf: []string{"steer", "followUp"}}},
			bypass: func(c pipeline.Command) bool {
				var p struct {
					StreamingBehavior string `json:"streamingBehavior"`
				}
				_ = json.Unmarshal(c.Payload, &p)
				return p.StreamingBehavior != ""
			}},
		"steer":                   control(s.steer, fMessage, fImages),
		"follow_up":               control(s.steer, fMessage, fImages),
		"abort":                   control(s.pi),
		"get_state":               {session: true, class: pipeline.ClassControl, readOnly: true, run: s.getState},
		"get_messages":            read(s.pi),
		"set_model":               mutate(s.setModel, field{name: "provider", kind: kString, required: true}, field{name: "modelId", kind: kString, required: true}),
		"cycle_model":             mutate(s.cycleModel, field{name: "direction", kind: kString, oneOf: []string{"forward", "backward"}}),
		"set_thinking_level":      mutate(s.setThinking, field{name: "level", kind: kString, required: true}),
		"cycle_thinking_level":    mutate(s.pi),
		"set_session_name":        mutate(s.setName, field{name: "name", kind: kString, required: true, max: 256}),
		"set_steering_mode":       mutate(s.pi, field{name: "mode", kind: kString, required: true, oneOf: []string{"all", "one-at-a-time"}}),
		"set_follow_up_mode":      mutate(s.pi, field{name: "mode", kind: kString, required: true, oneOf: []string{"all", "one-at-a-time"}}),
		"compact":                 long(s.compact, field{name: "customInstructions", kind: kString}),
		"abort_compaction":        control(s.abortCompaction),
		"set_auto_compaction":     mutate(s.pi, field{name: "enabled", kind: kBool, required: true}),
		"set_auto_retry":          mutate(s.pi, field{name: "enabled", kind: kBool, required: true}),
		"abort_retry":             control(s.pi),
		"bash":                    long(s.bash, field{name: "command", kind: kString, required: true, max: 20000}, field{name: "excludeFromContext", kind: kBool}),
		"abort_bash":              control(s.pi),
		"get_session_stats":       read(s.pi),
		"export_html":             mutate(s.pi, field{name: "outputPath", kind: kString, max: 4096}, field{name: "overwrite", kind: kBool}),
		"new_session":             long(s.pi, field{name: "parentSession", kind: kString, max: 4096}),
		"switch_session_file":     long(s.switchFile, field{name: "sessionPath", kind: kString, required: true, max: 4096}),
		"fork":                    long(s.pi, field{name: "entryId", kind: kString, required: true}),
		"clone":                   long(s.pi),
		"get_fork_messages":       read(s.pi),
		"get_tree":                read(s.getTree),
		"navigate_tree":           long(s.navigateTree, fTargetID, fTreeOptions),
		"get_last_assistant_text": read(s.pi),
		"get_context_usage":       read(s.contextUsage),
		"get_available_models":    peek(s.pi),
		"get_commands":            peek(s.pi),
		"get_skills":              peek(s.pi),
		// get_tools names why an MCP server did not start, which may quote
		// its secret: the answer is not kept, and a replay asks again.
		"get_tools":          {session: true, class: pipeline.ClassRead, readOnly: true, run: s.tools, keep: pipeline.RunAgain},
		"list_session_files": read(s.sessionFiles),
		// agentd's: a session's mode (see package modes).
		"get_modes": peek(s.pi),
		"set_mode":  mutate(s.pi, field{name: "mode", kind: kString, required: true, max: 64}),
		"extension_ui_response": {session: true, class: pipeline.ClassControl, readOnly: true, run: s.uiResponse,
			fields: []field{{name: "requestId", kind: kString, required: true, max: 256}, {name: "response", kind: kObject, required: true}}},
	}
	// agentd's checkpoint commands (piwire.CheckpointCommand): a turn's
	// diff is a read; a revert and its undo change the files and may
	// move the conversation, one at a time in the session's lane.
	fTurn := field{name: "turn", kind: kString, max: 200}
	m[piwire.CmdGetCheckpoints] = read(s.pi)
	m[piwire.CmdGetTurnDiff] = &commandSpec{session: true, class: pipeline.ClassRead, readOnly: true, run: s.pi, fields: []field{fTurn}}
	m[piwire.CmdRevertTurn] = mutate(s.pi, fTurn, field{name: "truncate", kind: kBool})
	m[piwire.CmdUndoRevert] = mutate(s.pi)
	// The long commands of a session: one at a time in its lane, and the
	// command timeout applies to them.
	return m
}

// registry turns the command specs into pipeline handlers.
func (s *Server) registry() pipeline.Registry {
	s.commandSpecs = s.commands()
	reg := pipeline.Registry{}
	for name, spec := range s.commandSpecs {
		spec := spec
		lane := pipeline.LaneServer
		if spec.session {
			lane = pipeline.LaneSession
		}
		mutating := !spec.readOnly && (spec.session || name == "load_session")
		reg[name] = pipeline.Handler{
			Class: spec.class, Lane: lane, Mutating: mutating, Timeout: spec.timeout, Bypass: spec.bypass, Keep: spec.keep,
			// Reads can be run again on replay instead of keeping a large
			// answer in the journal.
			ReadOnly: spec.class == pipeline.ClassRead,
			Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
				c := &call{cmd: cmd}
				if err := spec.decode(cmd.Payload, &c.p); err != nil {
					return nil, s.clientError(cmd, err)
				}
				if spec.session {
					h, err := s.srv.SessionFor(ctx, cmd.SessionID, c.who())
					if err != nil {
						return nil, s.clientError(cmd, err)
					}
					c.h = h
				}
				v, err := spec.run(ctx, c)
				if err != nil {
					return nil, s.clientError(cmd, err)
				}
				switch v := v.(type) {
				case nil:
					return nil, nil
				case json.RawMessage:
					return v, nil
				}
				return piwire.Marshal(v), nil
			},
		}
	}
	return reg
}

// clientError is the one place pi-server maps a command's error for the
// client: a fault.Error is written for the client and goes out as it is;
// anything else (a bug, a disk that failed) is logged with the session
// and the command, and the client reads "Internal error" (errorText).
func (s *Server) clientError(cmd pipeline.Command, err error) error {
	fe := fault.Public(err)
	if fe.Code == fault.Internal {
		s.srv.Logger().Error("command failed", "session", cmd.SessionID, "command", cmd.Type, "err", err)
	}
	return fe
}
