package piserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/picommand"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
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

// ---- server commands ----

// sessionInfo is pi-server's SessionInfo: the server's id for the
// session, pi's session state, and agentd's additions.
type sessionInfo struct {
	// SessionID is the server's id, not the transcript's.
	SessionID string `json:"sessionId"`
	piwire.SessionState
	CreatedAt string `json:"createdAt"`
	// agentd's additions
	Cwd         string        `json:"cwd"`
	State       session.State `json:"state"`
	Seq         uint64        `json:"seq"`
	Subscribers int           `json:"subscribers"`
	// Loaded is false for a session known from before a restart that
	// no command has touched since; its first command loads it.
	Loaded bool `json:"loaded"`
}

func (s *Server) info(h *server.Hosted) sessionInfo {
	return s.infoAt(h, h.Session().Seq())
}

// infoAt is info with the seq the client was told about.
func (s *Server) infoAt(h *server.Hosted, seq uint64) sessionInfo {
	sess := h.Session()
	return sessionInfo{
		SessionID: h.ID(), SessionState: piwire.StateOf(sess),
		CreatedAt: h.Created().UTC().Format("2006-01-02T15:04:05.000Z"), Cwd: h.Cwd(), State: sess.State(),
		Seq: seq, Subscribers: h.Subscribers(), Loaded: true,
	}
}

// knownInfo describes a session known from before a restart and not
// loaded yet: it loads on its first command.
func knownInfo(k server.Known) sessionInfo {
	return sessionInfo{
		SessionID: k.ID, SessionState: piwire.SessionState{SessionName: k.Info.Name, SessionFile: k.File,
			ThinkingLevel: llm.ThinkingOff, MessageCount: k.Info.MessageCount},
		CreatedAt: k.Created.UTC().Format("2006-01-02T15:04:05.000Z"), Cwd: k.Cwd, State: session.StateIdle,
	}
}

func (s *Server) listSessions(_ context.Context, c *call) (any, error) {
	list := []sessionInfo{}
	who := c.who()
	for _, h := range s.srv.Sessions() {
		if who.MaySee(h.ID(), h.Owner()) {
			list = append(list, s.info(h))
		}
	}
	for _, k := range s.srv.KnownSessions() {
		if who.MaySee(k.ID, k.Owner) {
			list = append(list, knownInfo(k))
		}
	}
	return map[string]any{"sessions": list}, nil
}

// subscribe makes the command's connection watch h; what it sends waits
// for the command's response.
func (s *Server) subscribe(c *call, h *server.Hosted, after *uint64) server.Subscribed {
	if r, ok := c.cmd.Origin.(*server.Remote); ok {
		return r.Subscribe(h, after) // the client's own node subscribes it
	}
	o := c.origin()
	if o == nil || o.c.client == nil {
		return server.Subscribed{Seq: h.Session().Seq()}
	}
	return s.srv.Subscribe(o.c.client, h, s.codec, after, o.hold)
}

func (s *Server) createSession(ctx context.Context, c *call) (any, error) {
	h, err := s.srv.Create(ctx, server.CreateRequest{ID: c.cmd.SessionID, Cwd: c.p.Cwd, Who: c.who(), Sandbox: sandbox.Mode(c.p.Sandbox)})
	if err != nil {
		return nil, err
	}
	sub := s.subscribe(c, h, nil)
	return map[string]any{"sessionId": h.ID(), "sessionInfo": s.infoAt(h, sub.Seq)}, nil
}

func (s *Server) deleteSession(ctx context.Context, c *call) (any, error) {
	if !s.srv.Visible(c.cmd.SessionID, c.who()) {
		return nil, fault.Errorf(fault.NotFound, "Session %s not found", c.cmd.SessionID)
	}
	if err := s.srv.Delete(ctx, c.cmd.SessionID); err != nil {
		if fault.CodeOf(err) == fault.Internal {
			// The session is gone; only closing its file failed.
			s.srv.Logger().Warn("closing session", "session", c.cmd.SessionID, "err", err)
		} else {
			return nil, err
		}
	}
	return map[string]any{"deleted": true}, nil
}

// switchSession subscribes the connection (held until the response is
// sent, so the events it missed follow the response in order) and
// answers with the session's state.
func (s *Server) switchSession(ctx context.Context, c *call) (any, error) {
	h, err := s.srv.SessionFor(ctx, c.cmd.SessionID, c.who())
	if err != nil {
		return nil, err
	}
	var after *uint64
	if c.p.AfterSeq != nil {
		a := uint64(*c.p.AfterSeq)
		after = &a
	} else if o := c.origin(); o != nil && o.c.client != nil && h.Subscribed(o.c.client) {
		// Already watching: the live events keep coming.
		info := s.info(h)
		return map[string]any{"sessionInfo": info, "seq": info.Seq}, nil
	}
	sub := s.subscribe(c, h, after)
	info := s.infoAt(h, sub.Seq)
	switch {
	case after == nil:
		return map[string]any{"sessionInfo": info, "seq": sub.Seq}, nil
	case sub.Resumed:
		return map[string]any{"sessionInfo": info, "seq": sub.Seq, "resumed": true}, nil
	}
	// The cursor is older than the log, or beyond the session's last
	// event: the client rebuilds from the whole context instead.
	b := []byte(`{"sessionInfo":`)
	b = append(b, piwire.Marshal(info)...)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, sub.Seq, 10)
	b = append(b, `,"resumed":false,"cursorTooOld":true,"messages":`...)
	b = piwire.AppendMessages(b, h.Session().Messages())
	return json.RawMessage(append(b, '}')), nil
}

func (s *Server) loadSession(ctx context.Context, c *call) (any, error) {
	h, err := s.srv.Load(ctx, server.LoadRequest{ID: c.cmd.SessionID, Path: c.p.SessionPath, Who: c.who()})
	if err != nil {
		return nil, err
	}
	sub := s.subscribe(c, h, nil)
	return map[string]any{"sessionId": h.ID(), "sessionInfo": s.infoAt(h, sub.Seq)}, nil
}

// storedSession is one entry of list_stored_sessions (spec §20.1).
type storedSession struct {
	SessionID    string `json:"sessionId"`
	SessionName  string `json:"sessionName,omitempty"`
	SessionFile  string `json:"sessionFile"`
	SessionPath  string `json:"sessionPath"`
	Cwd          string `json:"cwd"`
	CreatedAt    string `json:"createdAt"`
	ModifiedAt   string `json:"modifiedAt,omitempty"`
	MessageCount int    `json:"messageCount"`
	FileExists   bool   `json:"fileExists"`
	Loaded       bool   `json:"loaded"`
}

func (s *Server) listStored(context.Context, *call) (any, error) {
	list, err := s.srv.Stored()
	if err != nil {
		return nil, err
	}
	out := make([]storedSession, 0, len(list))
	for _, st := range list {
		w := storedSession{SessionID: st.ID, SessionName: st.Name, SessionFile: st.File, SessionPath: st.File,
			Cwd: st.Cwd, CreatedAt: st.Created.UTC().Format(time.RFC3339Nano), MessageCount: st.MessageCount,
			FileExists: st.Exists, Loaded: st.Loaded}
		if !st.Modified.IsZero() {
			w.ModifiedAt = st.Modified.UTC().Format(time.RFC3339Nano)
		}
		if w.Cwd == "" {
			w.Cwd = "/unknown"
		}
		out = append(out, w)
	}
	return map[string]any{"sessions": out}, nil
}

// stores describes the server's stores with agentd's own figures, under
// pi-server's names where agentd has the same thing.
func (s *Server) stores() map[string]any {
	srv := s.srv
	ps := srv.Pipeline().Stats()
	pendingUI := 0
	for _, h := range srv.Sessions() {
		pendingUI += len(h.Session().Interactions())
	}
	queued, budget := srv.QueuedBytes()
	out := map[string]any{
		"replay": map[string]any{"inFlightCount": ps.InFlight, "inFlightWithIdCount": ps.InFlightByID,
			"outcomeCount": ps.Outcomes, "idempotencyCacheSize": ps.IdempotencyKeys, "outcomeBytes": ps.OutcomeBytes,
			"maxCommandOutcomes": ps.MaxOutcomes, "maxInFlightPerConnection": srv.Limits().MaxPending,
			"inFlightRejections": srv.Rejected(server.RejectPending)},
		"version":      map[string]any{"sessionCount": ps.Versions},
		"execution":    map[string]any{"laneCount": ps.Lanes},
		"extensionUI":  map[string]any{"pendingCount": pendingUI},
		"sessionStore": map[string]any{"loadedCount": srv.SessionCount(), "knownCount": srv.KnownCount()},
		"sendQueues":   map[string]any{"queuedBytes": queued, "budgetBytes": budget, "budgetCuts": srv.SendBudgetCuts()},
	}
	if j, ok := srv.Journal().(interface{ Info() pipeline.JournalInfo }); ok {
		ji := j.Info()
		out["journal"] = map[string]any{"path": ji.Path, "durable": ji.Durable, "bytes": ji.Bytes, "records": ji.Records, "compactions": ji.Compactions}
	}
	return out
}

func (s *Server) startupRecovery(context.Context, *call) (any, error) {
	return s.srv.Pipeline().StartupRecovery(), nil
}

func (s *Server) commandHistory(_ context.Context, c *call) (any, error) {
	q := pipeline.HistoryQuery{SessionID: c.p.SessionIDFilter, CommandID: c.p.CommandID,
		FromTimestamp: c.p.FromTimestamp, ToTimestamp: c.p.ToTimestamp}
	if c.p.Limit != nil {
		q.Limit = *c.p.Limit
		if q.Limit == 0 {
			q.Limit = -1 // an explicit 0 is out of range, not the default
		}
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return s.srv.Pipeline().CommandHistory(q), nil
}

func (s *Server) healthCheck(context.Context, *call) (any, error) {
	hc := s.srv.Health().Check()
	lim := s.srv.Limits()
	nSess, nConn := s.srv.SessionCount(), s.srv.ClientCount()
	if nSess*10 >= lim.MaxSessions*9 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("Session count at %d/%d (90%%+)", nSess, lim.MaxSessions))
	}
	if nConn*10 >= lim.MaxConnections*9 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("Connection count at %d/%d (90%%+)", nConn, lim.MaxConnections))
	}
	if z := s.srv.Zombies(); z > 0 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("%d zombie sessions detected", z))
	}
	cl := s.srv.ClusterStatus()
	if cl != nil && !cl.Connected {
		hc.Issues = append(hc.Issues, fmt.Sprintf("Cluster node %s is not connected to NATS", cl.Node))
	}
	hc.Healthy = len(hc.Issues) == 0
	if cl != nil {
		return struct {
			health.HealthCheck
			Cluster *server.ClusterStatus `json:"cluster"`
		}{hc, cl}, nil
	}
	return hc, nil
}

func (s *Server) metrics(context.Context, *call) (any, error) {
	srv := s.srv
	lim := srv.Limits()
	cm := srv.Breakers().Metrics()
	breakers := []any{}
	for name, st := range cm.CircuitBreakers {
		breakers = append(breakers, map[string]any{"providerName": name, "state": st.State, "failureCount": st.Failures,
			"consecutiveFailures": st.ConsecutiveFailures, "totalCalls": st.Requests, "totalRejected": st.Rejected})
	}
	bash := cm.BashCircuitBreaker
	rej := func(r server.Rejection) int64 { return srv.Rejected(r) }
	return map[string]any{
		"sessionCount": srv.SessionCount(), "connectionCount": srv.ClientCount(), "totalCommandsExecuted": srv.Executed(),
		"commandsRejected": map[string]int64{
			"sessionLimit": rej(server.RejectSessionLimit), "messageSize": rej(server.RejectMessageSize),
			"rateLimit": rej(server.RejectRate), "globalRateLimit": rej(server.RejectGlobalRate),
			"connectionLimit": rej(server.RejectConnectionLimit), "extensionUIResponseRateLimit": rej(server.RejectUIRate),
			"controlRateLimit": rej(server.RejectControl), "pendingLimit": rej(server.RejectPending),
			"sendBudget": srv.SendBudgetCuts(),
		},
		"zombieSessionsDetected": srv.Zombies(),
		// agentd never unloads an idle session by itself: a zombie stays
		// until a client deletes it or the server stops.
		"zombieSessionsCleaned":  0,
		"doubleUnregisterErrors": srv.DoubleDetaches(),
		"pendingConnectionCount": s.handshakes.Load(),
		"rateLimitUsage":         map[string]int{"globalCount": srv.RateUsage(), "globalLimit": lim.GlobalRate},
		"circuitBreakers":        breakers,
		"bashCircuitBreaker": map[string]any{"enabled": true, "globalState": bash.State, "globalFailureCount": bash.Failures,
			"totalCalls": bash.Requests, "totalRejected": bash.Rejected},
		"stores":   s.stores(),
		"uptimeMs": time.Since(srv.Started()).Milliseconds(),
	}, nil
}

// ---- session commands ----

// pi runs a session command through the shared pi command layer
// (package picommand): the frame was checked against pi-server's schema
// when it arrived, so the layer's own checks (pi's RPC wording) are not
// run again.
func (s *Server) pi(ctx context.Context, c *call) (any, error) {
	cmd, ok := picommand.Lookup(c.cmd.Type)
	if !ok {
		return nil, fault.Errorf(fault.Internal, "no shared pi command %s", c.cmd.Type)
	}
	return cmd.Run(ctx, s.env(c), c.cmd.Type, &c.p.Fields)
}

// env is what the shared pi commands run against: the call's session.
// pi-server keeps no settings of pi's.
func (s *Server) env(c *call) picommand.Env {
	return picommand.Env{Session: c.h.Session(), Models: s.opt.Models, Logger: s.srv.Logger(), Export: c.h.ExportHTML}
}

func (s *Server) prompt(ctx context.Context, c *call) (any, error) {
	if out, ok, err := s.builtin(ctx, c); ok {
		return out, err
	}
	m, err := userMessage(c.p)
	if err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Failed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	b, err := picommand.Behavior(c.p.StreamingBehavior) // the schema allowed only these
	if err != nil {
		return nil, err
	}
	if b != session.BehaviorNone {
		// Queued behind the run in progress, or run now: answered at once.
		return nil, sess.PromptThen(m, b, nil)
	}
	if err := sess.PromptThen(m, session.BehaviorNone, nil); err != nil {
		return nil, err
	}
	// The prompt holds its lane until the run ends, as pi-server's does:
	// command_finished tells clients the answer is complete, and dependsOn
	// on a prompt waits for its whole run.
	if err := sess.Wait(ctx); err != nil {
		sess.Abort()
		return nil, err
	}
	return map[string]any{"outcome": sess.LastOutcome()}, nil
}

func userMessage(p params) (*llm.Message, error) {
	if err := checkImages(p); err != nil {
		return nil, err
	}
	return session.UserMessage(*p.Message, p.Images), nil
}

// checkImages checks what the schema cannot: that each image has its
// data and type (pi-server's message; pi's RPC mode words it its own way).
func checkImages(p params) error {
	for i, img := range p.Images {
		if img.Type != llm.ContentImage || img.Data == "" || img.MimeType == "" {
			return fault.Errorf(fault.Invalid, "Validation failed: images[%d]: must be {type: \"image\", data, mimeType}", i)
		}
	}
	return nil
}

func (s *Server) steer(ctx context.Context, c *call) (any, error) {
	if out, ok, err := s.builtin(ctx, c); ok {
		return out, err
	}
	if err := checkImages(c.p); err != nil {
		return nil, err
	}
	return s.pi(ctx, c)
}

func (s *Server) getState(_ context.Context, c *call) (any, error) { return s.info(c.h), nil }

// setModel answers {"model": ...}, where pi's RPC mode answers the model.
func (s *Server) setModel(_ context.Context, c *call) (any, error) {
	m, err := picommand.SetModel(s.env(c), c.p.Provider, c.p.ModelID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"model": m}, nil
}

// cycleModel takes pi-server's direction; pi's RPC mode cycles forward.
func (s *Server) cycleModel(_ context.Context, c *call) (any, error) {
	return picommand.CycleModel(s.env(c), c.p.Direction == "backward")
}

func (s *Server) setThinking(_ context.Context, c *call) (any, error) {
	level := c.p.Level
	if level == "none" {
		level = string(llm.ThinkingOff)
	}
	l, err := llm.ParseThinkingLevel(level)
	if err != nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: level: %v", err)
	}
	return nil, picommand.SetThinking(s.env(c), l)
}

// setName checks the name with pi-server's messages (and refuses control
// characters, which pi allows) before the layer sets it.
func (s *Server) setName(ctx context.Context, c *call) (any, error) {
	name := strings.TrimSpace(*c.p.Name)
	if name == "" {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: name: must not be empty")
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: name: must not contain control characters")
	}
	return s.pi(ctx, c)
}

func (s *Server) compact(ctx context.Context, c *call) (any, error) {
	sess := c.h.Session()
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Failed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	return s.pi(ctx, c)
}

func (s *Server) abortCompaction(_ context.Context, c *call) (any, error) {
	c.h.Session().AbortCompaction()
	return nil, nil
}

type bashResult struct {
	ExitCode       int    `json:"exitCode"`
	Output         string `json:"output"`
	Cancelled      bool   `json:"cancelled"`
	Truncated      bool   `json:"truncated,omitempty"`
	FullOutputPath string `json:"fullOutputPath,omitempty"`
}

func (s *Server) bash(ctx context.Context, c *call) (any, error) {
	report, err := s.srv.Breakers().Bash().Allow()
	if err != nil {
		return nil, fault.Errorf(fault.Failed, "%s; retry later", health.BashOpenText)
	}
	m, err := c.h.Session().Bash(ctx, *c.p.Command, c.p.ExcludeFromContext)
	switch {
	case errors.Is(context.Cause(ctx), pipeline.ErrTimeout):
		report(health.ErrBashTimeout)
	case err != nil && !errors.Is(err, session.ErrBashRunning) && ctx.Err() == nil:
		report(err)
	default:
		report(nil)
	}
	if err != nil {
		return nil, err
	}
	r := bashResult{Output: m.Output, Cancelled: m.Cancelled, Truncated: m.Truncated, FullOutputPath: m.FullOutputPath}
	if m.ExitCode != nil {
		r.ExitCode = *m.ExitCode
	}
	return r, nil
}

func (s *Server) switchFile(_ context.Context, c *call) (any, error) {
	if err := s.srv.SwitchFile(c.h, c.p.SessionPath); err != nil {
		return nil, err
	}
	return map[string]bool{"cancelled": false}, nil
}

func (s *Server) contextUsage(_ context.Context, c *call) (any, error) {
	st := c.h.Session().Stats()
	if st.ContextWindow <= 0 {
		return null, nil
	}
	type usage struct {
		Tokens        *int64   `json:"tokens"`
		ContextWindow int64    `json:"contextWindow"`
		Percent       *float64 `json:"percent"`
	}
	u := usage{ContextWindow: st.ContextWindow}
	if !st.ContextUnknown {
		u.Tokens, u.Percent = &st.ContextTokens, &st.ContextPercent
	}
	return u, nil
}

func (s *Server) tools(_ context.Context, c *call) (any, error) {
	type t struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	out := []t{}
	for _, tl := range c.h.Session().Agent().Config().Tools {
		sp := tl.Spec()
		out = append(out, t{sp.Name, sp.Description})
	}
	// A tool source that gives none (an MCP server that failed to start)
	// is listed with its cause, so a person sees what is missing.
	return map[string]any{"tools": out, "unavailable": c.h.Session().UnavailableTools()}, nil
}

func (s *Server) sessionFiles(_ context.Context, c *call) (any, error) {
	type file struct {
		Path       string `json:"path"`
		Name       string `json:"name"`
		ModifiedAt string `json:"modifiedAt"`
	}
	out := []file{}
	if dir := s.srv.SessionsDir(); dir != "" {
		infos, err := transcript.List(transcript.SessionDir(dir, c.h.Cwd()))
		if err != nil {
			return nil, fmt.Errorf("listing session files: %w", err)
		}
		for _, in := range infos {
			out = append(out, file{in.Path, filepath.Base(in.Path), in.Modified.UTC().Format("2006-01-02T15:04:05.000Z")})
		}
	}
	return map[string]any{"files": out}, nil
}

func (s *Server) uiResponse(_ context.Context, c *call) (any, error) {
	rid := c.p.RequestID
	if !idChars(rid, true) {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: requestId: must match ^[a-zA-Z0-9:_.-]+$")
	}
	a := c.p.Response
	if a == nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: is required")
	}
	var ans piwire.Answer
	switch a.Method {
	case "cancelled":
		ans.Cancelled = true
	case "select", "input", "editor":
		if a.Value == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.value: is required for %s", a.Method)
		}
		ans.Value = a.Value
	case "confirm":
		if a.Confirmed == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.confirmed: is required for confirm")
		}
		ans.Confirmed = a.Confirmed
	case "interview":
		if a.Responses == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.responses: is required for interview")
		}
		ans.Responses = a.Responses
	default:
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response.method: must be one of select, confirm, input, editor, interview, cancelled")
	}
	req, ok := c.h.Session().InteractionByID(rid)
	if !ok {
		// Not pending: answered, timed out or never asked. Answering a
		// settled request changes nothing and says which it is.
		if err := c.h.Session().Answer(rid, interaction.Response{Cancelled: true}); errors.Is(err, interaction.ErrAlreadyResolved) {
			return nil, fault.Errorf(fault.Invalid, "Request %s already settled", rid)
		}
		return nil, fault.Errorf(fault.Invalid, "No pending UI request with id %s", rid)
	}
	resp, err := ans.Response(req)
	if err != nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: %v", err)
	}
	if err := c.h.Session().Answer(rid, resp); err != nil {
		if errors.Is(err, interaction.ErrAlreadyResolved) || errors.Is(err, interaction.ErrNotFound) {
			return nil, fault.Errorf(fault.Invalid, "Request %s already settled", rid)
		}
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: %v", err)
	}
	return nil, nil
}

// ---- events around commands ----

// reportedSeq is the "seq" of a response's data or of a sessionInfo: the
// last event the client was told about.
func reportedSeq(data json.RawMessage) uint64 {
	var d struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(data, &d)
	return d.Seq
}

// afterResponse does what follows a command's response: the
// session_created / session_deleted broadcasts, and, for a replayed
// create, load or switch (whose handler did not run this time), the
// subscription the original made.
func (s *Server) afterResponse(c *conn, cmd pipeline.Command, r pipeline.Response) {
	if !r.Success {
		return
	}
	switch cmd.Type {
	case "create_session", "load_session":
		var d struct {
			SessionID   string          `json:"sessionId"`
			SessionInfo json.RawMessage `json:"sessionInfo"`
		}
		if json.Unmarshal(r.Data, &d) != nil {
			return
		}
		if r.Replayed {
			s.resubscribe(c, d.SessionID, reportedSeq(d.SessionInfo))
		}
		if cmd.Type == "create_session" && !r.Replayed {
			s.srv.Broadcast(face, piwire.Marshal(frame{"session_created", d}))
		}
	case "switch_session":
		if r.Replayed {
			var d struct {
				Seq uint64 `json:"seq"`
			}
			_ = json.Unmarshal(r.Data, &d)
			s.resubscribe(c, cmd.SessionID, d.Seq)
		}
	case "delete_session":
		if !r.Replayed {
			s.srv.Broadcast(face, piwire.Marshal(frame{"session_deleted", map[string]string{"sessionId": cmd.SessionID}}))
		}
	}
}

// resubscribe subscribes c to session id after the seq a replayed
// response reported. It runs on the pipeline's goroutine, off the
// connection's reader, and gives up quickly: a session deleted since, or
// unknown after a restart, is simply not watched.
func (s *Server) resubscribe(c *conn, id string, seq uint64) {
	ctx, cancel := context.WithTimeout(s.srv.Context(), 5*time.Second)
	defer cancel()
	h, err := s.srv.SessionFor(ctx, id, c.who)
	if err != nil || c.client == nil {
		return
	}
	if !h.Subscribed(c.client) {
		s.srv.Subscribe(c.client, h, s.codec, &seq, nil)
	}
}

// log records a command at info: who sent it, what it was, how it ended
// and how long it took. Prompt text and other payloads only at debug.
func (s *Server) log(cmd pipeline.Command, r pipeline.Response, took time.Duration) {
	log := s.srv.Logger()
	attrs := []any{"command", cmd.Type, "ms", took.Milliseconds(), "success", r.Success}
	if cmd.ID != "" {
		attrs = append(attrs, "id", cmd.ID)
	}
	if cmd.SessionID != "" {
		attrs = append(attrs, "session", cmd.SessionID)
	}
	if o, _ := cmd.Origin.(*origin); o != nil {
		attrs = append(attrs, "transport", o.c.transport)
		if o.c.remote != "" {
			attrs = append(attrs, "remote", o.c.remote)
		}
	}
	if r.Replayed {
		attrs = append(attrs, "replayed", true)
	}
	if cmd.Type == "bash" {
		// A shell command run for a client is what an operator most needs
		// to see; it is not conversation text.
		var p struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(cmd.Payload, &p)
		if len(p.Command) > 500 {
			p.Command = p.Command[:500] + "…"
		}
		attrs = append(attrs, "shell", p.Command)
	}
	if r.Err != nil {
		attrs = append(attrs, "error", r.Err.Message)
	}
	if cmd.Type == "get_state" || cmd.Type == "health_check" || cmd.Type == "get_metrics" {
		log.Debug("command", attrs...) // polled: at info they would drown the rest
		return
	}
	if log.Enabled(context.Background(), slog.LevelDebug) && len(cmd.Payload) > 0 {
		attrs = append(attrs, "payload", string(cmd.Payload))
	}
	log.Info("command", attrs...)
}
