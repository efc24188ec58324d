package piserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/health"
	"github.com/agentd-dev/agentd/interaction"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/pipeline"
	"github.com/agentd-dev/agentd/piwire"
	"github.com/agentd-dev/agentd/session"
	"github.com/agentd-dev/agentd/transcript"
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
		return pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: %s", shapeProblem(err))
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
		return pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: %s", shapeProblem(err))
	}
	return nil
}

// call is one command being run.
type call struct {
	cmd pipeline.Command
	p   params
	e   *entry // the session, for session commands
}

// params is the union of every command's fields; the decoder has checked
// the types of the ones the command declares.
type params struct {
	Message            *string       `json:"message"`
	Images             []llm.Content `json:"images"`
	StreamingBehavior  string        `json:"streamingBehavior"`
	Cwd                string        `json:"cwd"`
	AfterSeq           *float64      `json:"afterSeq"` // a non-negative integer (checked)
	SessionPath        string        `json:"sessionPath"`
	Provider           string        `json:"provider"`
	ModelID            string        `json:"modelId"`
	Direction          string        `json:"direction"`
	Level              string        `json:"level"`
	Mode               string        `json:"mode"`
	Name               *string       `json:"name"`
	CustomInstructions string        `json:"customInstructions"`
	Enabled            *bool         `json:"enabled"`
	Command            *string       `json:"command"`
	ExcludeFromContext bool          `json:"excludeFromContext"`
	OutputPath         string        `json:"outputPath"`
	ParentSession      string        `json:"parentSession"`
	EntryID            string        `json:"entryId"`
	RequestID          string        `json:"requestId"`
	Response           *uiAnswer     `json:"response"`
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
			fields: []field{{name: "cwd", kind: kString, max: 4096}}},
		// delete_session does not wait behind the session's running work:
		// closing the session stops it.
		"delete_session": {needsID: true, class: pipeline.ClassMutate, run: s.deleteSession, bypass: always},
		// switch_session does not wait for the session's running prompt:
		// watching a session mid-run is its point.
		"switch_session":       {needsID: true, class: pipeline.ClassControl, readOnly: true, run: s.switchSession, fields: []field{{name: "afterSeq", kind: kInt}}},
		"get_metrics":          server(pipeline.ClassRead, s.metrics),
		"health_check":         server(pipeline.ClassRead, s.healthCheck),
		"list_stored_sessions": server(pipeline.ClassRead, s.listStored),
		"load_session":         server(pipeline.ClassMutate, s.loadSession, field{name: "sessionPath", kind: kString, required: true, max: 4096}),

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
		"abort":                   control(s.abort),
		"get_state":               {session: true, class: pipeline.ClassControl, readOnly: true, run: s.getState},
		"get_messages":            read(s.getMessages),
		"set_model":               mutate(s.setModel, field{name: "provider", kind: kString, required: true}, field{name: "modelId", kind: kString, required: true}),
		"cycle_model":             mutate(s.cycleModel, field{name: "direction", kind: kString, oneOf: []string{"forward", "backward"}}),
		"set_thinking_level":      mutate(s.setThinking, field{name: "level", kind: kString, required: true}),
		"cycle_thinking_level":    mutate(s.cycleThinking),
		"set_session_name":        mutate(s.setName, field{name: "name", kind: kString, required: true, max: 256}),
		"set_steering_mode":       mutate(s.setQueueMode, field{name: "mode", kind: kString, required: true, oneOf: []string{"all", "one-at-a-time"}}),
		"set_follow_up_mode":      mutate(s.setQueueMode, field{name: "mode", kind: kString, required: true, oneOf: []string{"all", "one-at-a-time"}}),
		"compact":                 long(s.compact, field{name: "customInstructions", kind: kString}),
		"abort_compaction":        control(s.abortCompaction),
		"set_auto_compaction":     mutate(s.setAuto, field{name: "enabled", kind: kBool, required: true}),
		"set_auto_retry":          mutate(s.setAuto, field{name: "enabled", kind: kBool, required: true}),
		"abort_retry":             control(s.abortRetry),
		"bash":                    long(s.bash, field{name: "command", kind: kString, required: true, max: 20000}, field{name: "excludeFromContext", kind: kBool}),
		"abort_bash":              control(s.abortBash),
		"get_session_stats":       read(s.stats),
		"export_html":             mutate(s.exportHTML, field{name: "outputPath", kind: kString, max: 4096}),
		"new_session":             long(s.newSession, field{name: "parentSession", kind: kString, max: 4096}),
		"switch_session_file":     long(s.switchFile, field{name: "sessionPath", kind: kString, required: true, max: 4096}),
		"fork":                    long(s.fork, field{name: "entryId", kind: kString, required: true}),
		"clone":                   long(s.clone),
		"get_fork_messages":       read(s.forkMessages),
		"get_last_assistant_text": read(s.lastText),
		"get_context_usage":       read(s.contextUsage),
		"get_available_models":    read(s.availableModels),
		"get_commands":            read(func(context.Context, *call) (any, error) { return map[string]any{"commands": []any{}}, nil }),
		"get_skills":              read(func(context.Context, *call) (any, error) { return map[string]any{"skills": []any{}}, nil }),
		"get_tools":               read(s.tools),
		"list_session_files":      read(s.sessionFiles),
		"extension_ui_response": {session: true, class: pipeline.ClassControl, readOnly: true, run: s.uiResponse,
			fields: []field{{name: "requestId", kind: kString, required: true, max: 256}, {name: "response", kind: kObject, required: true}}},
	}
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
			Class: spec.class, Lane: lane, Mutating: mutating, Timeout: spec.timeout, Bypass: spec.bypass,
			Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
				c := &call{cmd: cmd}
				if err := spec.decode(cmd.Payload, &c.p); err != nil {
					return nil, err
				}
				if spec.session {
					e, err := s.lookup(ctx, cmd.SessionID)
					if err != nil {
						return nil, err
					}
					c.e = e
				}
				v, err := spec.run(ctx, c)
				if err != nil {
					return nil, clientError(err)
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

// clientError makes sure what reaches a client is written for it: the
// engine's errors are, so their text is kept.
func clientError(err error) error {
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		return pe
	}
	return &pipeline.Error{Code: pipeline.CodeFailed, Message: err.Error()}
}

// ---- server commands ----

// sessionInfo is pi-server's SessionInfo, with agentd's additions.
type sessionInfo struct {
	SessionID     string            `json:"sessionId"`
	SessionName   string            `json:"sessionName,omitempty"`
	SessionFile   string            `json:"sessionFile,omitempty"`
	Model         *llm.Model        `json:"model,omitempty"`
	ThinkingLevel llm.ThinkingLevel `json:"thinkingLevel"`
	IsStreaming   bool              `json:"isStreaming"`
	MessageCount  int               `json:"messageCount"`
	CreatedAt     string            `json:"createdAt"`
	// agentd's additions
	Cwd                   string          `json:"cwd"`
	State                 session.State   `json:"state"`
	IsCompacting          bool            `json:"isCompacting"`
	SteeringMode          agent.QueueMode `json:"steeringMode"`
	FollowUpMode          agent.QueueMode `json:"followUpMode"`
	AutoCompactionEnabled bool            `json:"autoCompactionEnabled"`
	PendingMessageCount   int             `json:"pendingMessageCount"`
	Seq                   uint64          `json:"seq"`
	Subscribers           int             `json:"subscribers"`
}

func (s *Server) info(e *entry) sessionInfo {
	st := e.sess.Settings()
	state := e.sess.State()
	e.mu.Lock()
	subs := len(e.subs)
	e.mu.Unlock()
	return sessionInfo{
		SessionID: e.id, SessionName: e.sess.Name(), SessionFile: e.sess.File(), Model: e.sess.Model(),
		ThinkingLevel: e.sess.Thinking(), IsStreaming: e.sess.Running(), MessageCount: len(e.sess.Messages()),
		CreatedAt: e.created.UTC().Format("2006-01-02T15:04:05.000Z"), Cwd: e.cwd, State: state,
		IsCompacting: state == session.StateCompacting, SteeringMode: st.SteeringMode, FollowUpMode: st.FollowUpMode,
		AutoCompactionEnabled: st.AutoCompaction, PendingMessageCount: e.sess.PendingCount(), Seq: e.sess.Seq(),
		Subscribers: subs,
	}
}

func (s *Server) listSessions(context.Context, *call) (any, error) {
	list := []sessionInfo{}
	for _, e := range s.entries() {
		list = append(list, s.info(e))
	}
	return map[string]any{"sessions": list}, nil
}

func newSessionID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "session-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

func (s *Server) createSession(ctx context.Context, c *call) (any, error) {
	id := c.cmd.SessionID
	if id == "" {
		id = newSessionID()
	}
	cwd := c.p.Cwd
	if cwd == "" {
		cwd = s.opt.Cwd
	} else {
		if strings.HasPrefix(cwd, "~") || strings.ContainsRune(cwd, 0) || hasDotDot(cwd) {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: cwd: CWD contains potentially dangerous path components")
		}
		if err := absDir(cwd); err != nil {
			return nil, err
		}
	}
	e, err := s.addSession(ctx, id, SessionSpec{Cwd: cwd})
	if err != nil {
		return nil, err
	}
	return map[string]any{"sessionId": id, "sessionInfo": s.info(e)}, nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func (s *Server) deleteSession(ctx context.Context, c *call) (any, error) {
	if _, err := s.lookup(ctx, c.cmd.SessionID); err != nil {
		return nil, err // also waits for a create admitted before this
	}
	if err := s.removeSession(c.cmd.SessionID); err != nil {
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			return nil, err
		}
		s.log.Warn("closing session", "session", c.cmd.SessionID, "err", err)
	}
	return map[string]any{"deleted": true}, nil
}

// switchSession answers with the session's state; the connection is
// subscribed after the response is sent (see afterResponse), so the
// events it missed follow the response in order.
func (s *Server) switchSession(ctx context.Context, c *call) (any, error) {
	e, err := s.lookup(ctx, c.cmd.SessionID)
	if err != nil {
		return nil, err
	}
	info := s.info(e)
	if c.p.AfterSeq == nil {
		return map[string]any{"sessionInfo": info, "seq": info.Seq}, nil
	}
	if _, ok := e.sess.EventsSince(uint64(*c.p.AfterSeq)); ok {
		return map[string]any{"sessionInfo": info, "seq": info.Seq, "resumed": true}, nil
	}
	// The cursor is older than the log: the client rebuilds from the
	// whole context instead.
	b := []byte(`{"sessionInfo":`)
	b = append(b, piwire.Marshal(info)...)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, info.Seq, 10)
	b = append(b, `,"resumed":false,"cursorTooOld":true,"messages":`...)
	b = piwire.AppendMessages(b, e.sess.Messages())
	return json.RawMessage(append(b, '}')), nil
}

func (s *Server) loadSession(ctx context.Context, c *call) (any, error) {
	path, err := s.checkSessionPath(c.p.SessionPath)
	if err != nil {
		return nil, err
	}
	info, err := transcript.ReadInfo(path)
	if err != nil {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Failed to load session from %s: not a session file", c.p.SessionPath)
	}
	for _, e := range s.entries() {
		if e.sess.File() == path {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Session file %s is already loaded as session %s", c.p.SessionPath, e.id)
		}
	}
	id := c.cmd.SessionID
	if id == "" {
		id = info.ID
		if x, ok := s.index.get(path); ok {
			id = x.ID
		}
	}
	cwd := info.Cwd
	if st, err := os.Stat(cwd); cwd == "" || err != nil || !st.IsDir() {
		cwd = s.opt.Cwd
	}
	e, err := s.addSession(ctx, id, SessionSpec{Cwd: cwd, Open: path})
	if err != nil {
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			return nil, err
		}
		s.log.Warn("load_session", "path", path, "err", err)
		return nil, pipeline.Errorf(pipeline.CodeFailed, "Failed to load session from %s", c.p.SessionPath)
	}
	return map[string]any{"sessionId": id, "sessionInfo": s.info(e)}, nil
}

func (s *Server) listStored(context.Context, *call) (any, error) {
	list, err := s.storedSessions()
	if err != nil {
		return nil, err
	}
	return map[string]any{"sessions": list}, nil
}

func (s *Server) healthCheck(context.Context, *call) (any, error) {
	hc := s.opt.Health.Check()
	s.mu.RLock()
	nSess, nConn := len(s.sessions), len(s.conns)
	s.mu.RUnlock()
	if nSess*10 >= s.lim.MaxSessions*9 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("Session count at %d/%d (90%%+)", nSess, s.lim.MaxSessions))
	}
	if nConn*10 >= s.lim.MaxConnections*9 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("Connection count at %d/%d (90%%+)", nConn, s.lim.MaxConnections))
	}
	if z := s.zombies(); z > 0 {
		hc.Issues = append(hc.Issues, fmt.Sprintf("%d zombie sessions detected", z))
	}
	hc.Healthy = len(hc.Issues) == 0
	return hc, nil
}

// zombies counts idle sessions no command has touched for 5 minutes and
// no client watches.
func (s *Server) zombies() int {
	cut := time.Now().Add(-5 * time.Minute).UnixMilli()
	n := 0
	for _, e := range s.entries() {
		e.mu.Lock()
		watched := len(e.subs) > 0
		e.mu.Unlock()
		if !watched && !e.sess.Running() && e.lastCmd.Load() < cut {
			n++
		}
	}
	return n
}

func (s *Server) metrics(context.Context, *call) (any, error) {
	s.mu.RLock()
	nSess, nConn := len(s.sessions), len(s.conns)
	s.mu.RUnlock()
	r := &s.rejected
	cm := s.opt.Breakers.Metrics()
	breakers := []any{}
	for name, st := range cm.CircuitBreakers {
		breakers = append(breakers, map[string]any{"providerName": name, "state": st.State, "failureCount": st.Failures,
			"consecutiveFailures": st.ConsecutiveFailures, "totalCalls": st.Requests, "totalRejected": st.Rejected})
	}
	bash := cm.BashCircuitBreaker
	return map[string]any{
		"sessionCount": nSess, "connectionCount": nConn, "totalCommandsExecuted": s.executed.Load(),
		"commandsRejected": map[string]int64{
			"sessionLimit": r.sessionLimit.Load(), "messageSize": r.messageSize.Load(), "rateLimit": r.rateLimit.Load(),
			"globalRateLimit": r.globalRateLimit.Load(), "connectionLimit": r.connectionLimit.Load(),
			"extensionUIResponseRateLimit": r.uiRateLimit.Load(), "pendingLimit": r.pending.Load(),
		},
		"zombieSessionsDetected": s.zombies(),
		"rateLimitUsage":         map[string]int{"globalCount": s.rates.usage(), "globalLimit": s.lim.GlobalRate},
		"circuitBreakers":        breakers,
		"bashCircuitBreaker": map[string]any{"enabled": true, "globalState": bash.State, "globalFailureCount": bash.Failures,
			"totalCalls": bash.Requests, "totalRejected": bash.Rejected},
		"uptimeMs": time.Since(s.started).Milliseconds(),
	}, nil
}

// ---- session commands ----

func (s *Server) prompt(ctx context.Context, c *call) (any, error) {
	m, err := userMessage(c.p)
	if err != nil {
		return nil, err
	}
	sess := c.e.sess
	if b := s.opt.Breakers.Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, pipeline.Errorf(pipeline.CodeFailed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	switch c.p.StreamingBehavior {
	case "steer":
		return nil, sess.PromptThen(m, session.BehaviorSteer, nil)
	case "followUp":
		return nil, sess.PromptThen(m, session.BehaviorFollowUp, nil)
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
	for i, img := range p.Images {
		if img.Type != llm.ContentImage || img.Data == "" || img.MimeType == "" {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: images[%d]: must be {type: \"image\", data, mimeType}", i)
		}
	}
	return session.UserMessage(*p.Message, p.Images), nil
}

func (s *Server) steer(_ context.Context, c *call) (any, error) {
	m, err := userMessage(c.p)
	if err != nil {
		return nil, err
	}
	if c.cmd.Type == "steer" {
		return nil, c.e.sess.Steer(m)
	}
	return nil, c.e.sess.FollowUp(m)
}

func (s *Server) abort(_ context.Context, c *call) (any, error) {
	c.e.sess.Abort()
	return nil, nil
}

func (s *Server) getState(_ context.Context, c *call) (any, error) { return s.info(c.e), nil }

func (s *Server) getMessages(_ context.Context, c *call) (any, error) {
	b := append([]byte(nil), `{"messages":`...)
	b = piwire.AppendMessages(b, c.e.sess.Messages())
	return json.RawMessage(append(b, '}')), nil
}

func (s *Server) findModel(provider, id string) *llm.Model {
	for _, m := range s.opt.Models.Available() {
		if m.Provider == provider && m.ID == id {
			return m
		}
	}
	return nil
}

func (s *Server) setModel(_ context.Context, c *call) (any, error) {
	m := s.findModel(c.p.Provider, c.p.ModelID)
	if m == nil {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Model not found: %s/%s", c.p.Provider, c.p.ModelID)
	}
	if err := c.e.sess.SetModel(m); err != nil {
		return nil, err
	}
	return map[string]any{"model": m}, nil
}

func (s *Server) cycleModel(_ context.Context, c *call) (any, error) {
	next, ok, err := c.e.sess.CycleModel(s.opt.Models.Available(), c.p.Direction == "backward")
	if err != nil || !ok {
		return null, err
	}
	return map[string]any{"model": next, "thinkingLevel": c.e.sess.Thinking(), "isScoped": false}, nil
}

func (s *Server) setThinking(_ context.Context, c *call) (any, error) {
	level := c.p.Level
	if level == "none" {
		level = string(llm.ThinkingOff)
	}
	l, err := llm.ParseThinkingLevel(level)
	if err != nil {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: level: %v", err)
	}
	if _, err := c.e.sess.SetThinking(l); err != nil {
		return nil, err
	}
	return nil, nil
}

func (s *Server) cycleThinking(_ context.Context, c *call) (any, error) {
	got, ok, err := c.e.sess.CycleThinking()
	if err != nil || !ok {
		return null, err
	}
	return map[string]any{"level": got}, nil
}

func (s *Server) setName(_ context.Context, c *call) (any, error) {
	name := strings.TrimSpace(*c.p.Name)
	if name == "" {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: name: must not be empty")
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: name: must not contain control characters")
	}
	return nil, c.e.sess.SetName(name)
}

func (s *Server) setQueueMode(_ context.Context, c *call) (any, error) {
	mode := agent.QueueMode(c.p.Mode)
	if c.cmd.Type == "set_steering_mode" {
		c.e.sess.SetQueueModes(mode, "")
	} else {
		c.e.sess.SetQueueModes("", mode)
	}
	return nil, nil
}

func (s *Server) compact(ctx context.Context, c *call) (any, error) {
	sess := c.e.sess
	if b := s.opt.Breakers.Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, pipeline.Errorf(pipeline.CodeFailed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	res, err := sess.Compact(ctx, c.p.CustomInstructions)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Server) abortCompaction(_ context.Context, c *call) (any, error) {
	c.e.sess.AbortCompaction()
	return nil, nil
}

func (s *Server) setAuto(_ context.Context, c *call) (any, error) {
	if c.cmd.Type == "set_auto_compaction" {
		c.e.sess.SetAutoCompaction(*c.p.Enabled)
	} else {
		c.e.sess.SetAutoRetry(*c.p.Enabled)
	}
	return nil, nil
}

func (s *Server) abortRetry(_ context.Context, c *call) (any, error) {
	c.e.sess.AbortRetry()
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
	report, err := s.opt.Breakers.Bash().Allow()
	if err != nil {
		return nil, pipeline.Errorf(pipeline.CodeFailed, "%s; retry later", health.BashOpenText)
	}
	m, err := c.e.sess.Bash(ctx, *c.p.Command, c.p.ExcludeFromContext)
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

func (s *Server) abortBash(_ context.Context, c *call) (any, error) {
	c.e.sess.AbortBash()
	return nil, nil
}

func (s *Server) stats(_ context.Context, c *call) (any, error) {
	return piwire.SessionStats(c.e.sess.Stats()), nil
}

func (s *Server) exportHTML(_ context.Context, c *call) (any, error) {
	path, err := c.e.sess.ExportHTMLFile(c.e.cwd, c.p.OutputPath)
	if err != nil {
		return nil, err
	}
	return map[string]string{"path": path}, nil
}

// reindex records the file a session moved to (new, switch, fork, clone).
func (s *Server) reindex(e *entry) {
	s.index.put(indexEntry{ID: e.id, File: e.sess.File(), Cwd: e.cwd, Created: time.Now()})
}

func (s *Server) newSession(_ context.Context, c *call) (any, error) {
	if err := c.e.sess.NewSession(c.p.ParentSession); err != nil {
		return nil, err
	}
	s.reindex(c.e)
	return map[string]bool{"cancelled": false}, nil
}

func (s *Server) switchFile(_ context.Context, c *call) (any, error) {
	path, err := s.checkSessionPath(c.p.SessionPath)
	if err != nil {
		return nil, err
	}
	if err := c.e.sess.Switch(path); err != nil {
		return nil, err
	}
	s.reindex(c.e)
	return map[string]bool{"cancelled": false}, nil
}

func (s *Server) fork(_ context.Context, c *call) (any, error) {
	text, err := c.e.sess.Fork(c.p.EntryID)
	if err != nil {
		return nil, err
	}
	s.reindex(c.e)
	return map[string]any{"text": text, "cancelled": false}, nil
}

func (s *Server) clone(_ context.Context, c *call) (any, error) {
	if err := c.e.sess.Clone(); err != nil {
		return nil, err
	}
	s.reindex(c.e)
	return map[string]bool{"cancelled": false}, nil
}

func (s *Server) forkMessages(_ context.Context, c *call) (any, error) {
	type fm struct {
		EntryID string `json:"entryId"`
		Text    string `json:"text"`
	}
	out := []fm{}
	for _, m := range c.e.sess.ForkMessages() {
		out = append(out, fm{m.EntryID, m.Text})
	}
	return map[string]any{"messages": out}, nil
}

func (s *Server) lastText(_ context.Context, c *call) (any, error) {
	text, ok := c.e.sess.LastAssistantText()
	var v any
	if ok {
		v = text
	}
	return map[string]any{"text": v}, nil
}

func (s *Server) contextUsage(_ context.Context, c *call) (any, error) {
	st := c.e.sess.Stats()
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

func (s *Server) availableModels(context.Context, *call) (any, error) {
	models := s.opt.Models.Available()
	if models == nil {
		models = []*llm.Model{}
	}
	return map[string]any{"models": models}, nil
}

func (s *Server) tools(_ context.Context, c *call) (any, error) {
	type t struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	out := []t{}
	for _, tl := range c.e.sess.Agent().Config().Tools {
		sp := tl.Spec()
		out = append(out, t{sp.Name, sp.Description})
	}
	return map[string]any{"tools": out}, nil
}

func (s *Server) sessionFiles(_ context.Context, c *call) (any, error) {
	type file struct {
		Path       string `json:"path"`
		Name       string `json:"name"`
		ModifiedAt string `json:"modifiedAt"`
	}
	out := []file{}
	if s.opt.SessionsDir != "" {
		infos, err := transcript.List(transcript.SessionDir(s.opt.SessionsDir, c.e.cwd))
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
	if !requestIDRe.MatchString(rid) {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: requestId: must match ^[a-zA-Z0-9:_.-]+$")
	}
	a := c.p.Response
	if a == nil {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response: is required")
	}
	var ans piwire.Answer
	switch a.Method {
	case "cancelled":
		ans.Cancelled = true
	case "select", "input", "editor":
		if a.Value == nil {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response.value: is required for %s", a.Method)
		}
		ans.Value = a.Value
	case "confirm":
		if a.Confirmed == nil {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response.confirmed: is required for confirm")
		}
		ans.Confirmed = a.Confirmed
	case "interview":
		if a.Responses == nil {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response.responses: is required for interview")
		}
		ans.Responses = a.Responses
	default:
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response.method: must be one of select, confirm, input, editor, interview, cancelled")
	}
	req, ok := c.e.sess.InteractionByID(rid)
	if !ok {
		// Not pending: answered, timed out or never asked. Answering a
		// settled request changes nothing and says which it is.
		if err := c.e.sess.Answer(rid, interaction.Response{Cancelled: true}); errors.Is(err, interaction.ErrAlreadyResolved) {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Request %s already settled", rid)
		}
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "No pending UI request with id %s", rid)
	}
	resp, err := ans.Response(req)
	if err != nil {
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response: %v", err)
	}
	if err := c.e.sess.Answer(rid, resp); err != nil {
		if errors.Is(err, interaction.ErrAlreadyResolved) || errors.Is(err, interaction.ErrNotFound) {
			return nil, pipeline.Errorf(pipeline.CodeInvalid, "Request %s already settled", rid)
		}
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: response: %v", err)
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

// onLifecycle broadcasts the pipeline's lifecycle events (spec §6.2).
// A connection that asked for its own lifecycle events only does not get
// the others': with N clients each sending commands, global broadcast
// costs N frames per event.
func (s *Server) onLifecycle(ev pipeline.Event) {
	f := lifecycleFrame(ev)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c := range s.conns {
		if !c.ownLifecycle || ev.Origin == any(c) {
			c.send(f)
		}
	}
}

// afterResponse does what follows a command's response: subscriptions
// and the session_created / session_deleted broadcasts.
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
		if e, err := s.lookup(context.Background(), d.SessionID); err == nil {
			s.subscribe(c, e, true, reportedSeq(d.SessionInfo))
		}
		if cmd.Type == "create_session" && !r.Replayed {
			s.broadcast(piwire.Marshal(frame{"session_created", d}))
		}
	case "switch_session":
		if e, err := s.lookup(context.Background(), cmd.SessionID); err == nil {
			var p params
			_ = json.Unmarshal(cmd.Payload, &p)
			var d struct {
				Seq          uint64 `json:"seq"`
				CursorTooOld bool   `json:"cursorTooOld"`
			}
			_ = json.Unmarshal(r.Data, &d)
			switch {
			case p.AfterSeq != nil && !d.CursorTooOld:
				s.subscribe(c, e, true, uint64(*p.AfterSeq))
			case e.subscribed(c):
				// Already watching: the live events keep coming.
			default:
				// Resuming from the seq the response reported means
				// nothing emitted between the response and this
				// subscription is lost.
				s.subscribe(c, e, true, d.Seq)
			}
		}
	case "delete_session":
		if !r.Replayed {
			s.broadcast(piwire.Marshal(frame{"session_deleted", map[string]string{"sessionId": cmd.SessionID}}))
		}
	}
}
