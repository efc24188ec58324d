package loadgen

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// phases is what the phases of a run against one server share (runWS,
// runREST): the options, the report being filled, the run's logger and
// problem tally, the mock and the server it launched, and the bench's
// HTTP client. Its methods are the steps both runs take alike.
type phases struct {
	o     Options
	rep   Report
	log   *slog.Logger
	probs tally
	mk    *mock
	srv   *server
	hc    *http.Client
}

// newPhases starts the phases of a run whose report begins as rep.
func newPhases(o Options, rep Report, log *slog.Logger) phases {
	return phases{o: o, rep: rep, log: log, probs: tally{log: log}}
}

// launched takes the mock and the server of run, and the server's
// memory before any load as the baseline.
func (p *phases) launched(run *launched) {
	p.mk, p.srv = run.mk, run.srv
	p.rep.RSSBaseline, p.rep.RSSAnonBaseline = run.base.RSS, run.base.Anon
}

// firstAndIdle measures the server once the bench's first session exists
// (so that no figure per session carries the server's one-time
// initialisation), then creates o.IdleSessions idle sessions with create
// and measures their cost each. It returns the last reading, from which
// the sessions' cost is measured.
func (p *phases) firstAndIdle(ctx context.Context, create func(ctx context.Context, id string) error) (memory, error) {
	prev, err := settledMemory(ctx, p.srv.pid(), p.o.Settle)
	if err != nil {
		return prev, err
	}
	p.rep.RSSFirstSession = prev.RSS
	if p.o.IdleSessions > 0 {
		for i := range p.o.IdleSessions {
			if err := create(ctx, fmt.Sprintf("bench-idle-%06d", i)); err != nil {
				return prev, err
			}
		}
		m, err := settledMemory(ctx, p.srv.pid(), p.o.Settle)
		if err != nil {
			return prev, err
		}
		p.rep.IdleSessions, p.rep.RSSPerIdleSession = p.o.IdleSessions, (m.RSS-prev.RSS)/int64(p.o.IdleSessions)
		prev = m
	}
	return prev, nil
}

// sessionsMemory measures the server with the load's n sessions created
// (a failed create holds nothing, so n counts those that exist), their
// cost each from prev, and returns the reading.
func (p *phases) sessionsMemory(ctx context.Context, prev memory, n int64) (memory, error) {
	idle, err := settledMemory(ctx, p.srv.pid(), p.o.Settle)
	if err != nil {
		return idle, err
	}
	p.rep.RSSSessions = idle.RSS
	if n > 0 {
		p.rep.RSSPerSession = (idle.RSS - prev.RSS) / n
	}
	return idle, nil
}

// idleWait is phase 2b: o.IdleWait with every connection still open,
// the server's CPU and memory read meanwhile.
func (p *phases) idleWait(ctx context.Context) error {
	if p.o.IdleWait <= 0 {
		return nil
	}
	p.log.Info("idle wait", "for", p.o.IdleWait)
	return idleReadings(ctx, p.srv, p.o.IdleWait, &p.rep, p.log)
}

// stopped records how the server's stop went (srv.stop's code, time and
// whether it had to be killed), its warnings, and the model's requests.
func (p *phases) stopped(code int, took time.Duration, killed bool) {
	p.rep.ServerExit, p.rep.Shutdown = code, took
	if killed {
		p.probs.add("server killed", fmt.Sprintf("server did not exit within %s of SIGTERM; killed", p.o.ShutdownGrace))
	} else if code != 0 {
		p.probs.add("server exit code", fmt.Sprintf("server exited with code %d after SIGTERM; stderr:\\n%s", code, p.srv.log.tail()))
	}
	p.rep.ServerWarnings, p.rep.ServerWarningSamples = p.srv.log.problemLines()
	p.rep.ModelRequests = p.mk.requestCount()
}
