package piserver

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"strconv"
	"time"

	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

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
	return recoveryData(s.srv.Pipeline().StartupRecovery()), nil
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
	return historyData(s.srv.Pipeline().CommandHistory(q)), nil
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
