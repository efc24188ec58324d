package pipeline

import (
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// Submit admits cmd and arranges for respond to be called exactly once
// with its outcome. Submit never calls respond or Emit itself: both run on
// goroutines the pipeline owns, so the caller may hold what they wait for.
// For one command the order is command_accepted, command_started (when it
// runs), command_finished, then respond. Commands rejected before
// admission (shutdown, validation) are answered with no lifecycle events.
// The immediate answers (rejections, conflicts, replays) of commands with
// the same Sender are delivered in submission order. respond must not
// block for long: it holds up the answers of its Sender.
func (p *Pipeline) Submit(cmd Command, respond func(Response)) {
	if respond == nil {
		respond = func(Response) {}
	}
	h, verr := p.validate(cmd)
	f := &flight{cmd: cmd, h: h, respond: respond, done: make(chan struct{})}
	if verr == nil {
		// A server command that names a session (create, delete, load) is
		// ordered with that session's commands, so a client may send
		// create_session and its first prompt back to back.
		f.scope = "server"
		if h.Lane == LaneSession || cmd.SessionID != "" {
			f.scope = "session:" + cmd.SessionID
		}
		if h.Class != ClassControl && (h.Bypass == nil || !h.Bypass(cmd)) {
			f.lane = f.scope
		}
		if cmd.IdempotencyKey != "" {
			f.keyIdx = f.scope + "\x00" + cmd.IdempotencyKey
		}
		f.fp = Fingerprint(p.fpKey, cmd)
	}
	now := time.Now()

	p.mu.Lock()
	if p.closing {
		verr = errShuttingDown()
	}
	if verr != nil {
		p.deliverLocked(cmd.Sender, func() { respond(Response{ID: cmd.ID, Command: cmd.Type, Err: verr}) })
		p.mu.Unlock()
		return
	}
	if cmd.ID == "" {
		p.anonSeq++
		f.anon = fmt.Sprintf("anon:%s:%d", p.anonBase, p.anonSeq)
	}
	p.sweep(now)
	// Replay or conflict (spec §8): by id first, then by idempotency key.
	var (
		hit      *outcome
		waitFor  *flight
		conflict *fault.Error
	)
	if cmd.ID != "" {
		if o := p.out.byID(cmd.ID, now); o != nil {
			if !p.answers(o, f) {
				conflict = errConflictID(cmd.ID, o.resp.Command, cmd.Type)
			} else {
				hit = o
			}
		} else if o := p.byID[cmd.ID]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictID(cmd.ID, o.cmd.Type, cmd.Type)
			} else {
				waitFor = o
			}
		}
	}
	if hit == nil && waitFor == nil && conflict == nil && f.keyIdx != "" {
		if o := p.out.byKey(f.keyIdx, now); o != nil {
			if !p.answers(o, f) {
				conflict = errConflictKey(cmd.IdempotencyKey, o.resp.Command, cmd.Type)
			} else {
				hit = o
			}
		} else if o := p.byKey[f.keyIdx]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictKey(cmd.IdempotencyKey, o.cmd.Type, cmd.Type)
			} else {
				waitFor = o
			}
		}
	}
	switch {
	case conflict != nil:
		p.deliverLocked(cmd.Sender, func() {
			p.accept(f)
			r := Response{ID: cmd.ID, Command: cmd.Type, Err: conflict}
			p.emit(f, CommandFinished, &r)
			respond(r)
		})
		p.mu.Unlock()
		return
	case waitFor != nil:
		// Answered with the first one's outcome when it finishes.
		waitFor.waiters = append(waitFor.waiters, f)
		p.deliverLocked(cmd.Sender, func() { p.accept(f) })
		p.mu.Unlock()
		return
	case hit != nil && !(hit.resp.DataDropped && h.ReadOnly):
		r := hit.resp
		p.deliverLocked(cmd.Sender, func() { p.answerReplay(f, r) })
		p.mu.Unlock()
		return
	case hit != nil:
		f.rerun = true
	default:
		if cmd.Admit != nil {
			if err := cmd.Admit(); err != nil {
				p.deliverLocked(cmd.Sender, func() { respond(Response{ID: cmd.ID, Command: cmd.Type, Err: err}) })
				p.mu.Unlock()
				return
			}
		}
		if cmd.ID != "" {
			p.byID[cmd.ID] = f
		}
		if f.keyIdx != "" {
			p.byKey[f.keyIdx] = f
		}
	}
	p.flights.Add(1)
	p.inFlight++
	p.deliverLocked(cmd.Sender, func() { p.accept(f) })
	p.mu.Unlock()

	if f.durable() {
		err := p.journal.Append(Record{
			Op: OpBegin, Command: cmd.Type, ID: cmd.ID, Scope: f.scope, Key: cmd.IdempotencyKey,
			Fingerprint: f.fp, At: now, KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil {
			p.mu.Lock()
			p.deliverLocked(cmd.Sender, func() { p.finish(f, Response{Err: fault.Errorf(fault.Internal, "journal: %v", err)}) })
			p.mu.Unlock()
			return
		}
	}
	p.mu.Lock()
	if f.lane == "" {
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.execute(f)
		}()
		return
	}
	l := p.lanes[f.lane]
	if l == nil {
		l = &lane{name: f.lane}
		p.lanes[f.lane] = l
	}
	l.queue = append(l.queue, f)
	if !l.running {
		l.running = true
		p.wg.Add(1)
		go p.runLane(l)
	}
	p.mu.Unlock()
}

// Do submits cmd and waits for its response.
func (p *Pipeline) Do(cmd Command) Response {
	ch := make(chan Response, 1)
	p.Submit(cmd, func(r Response) { ch <- r })
	return <-ch
}

func (f *flight) durable() bool { return !f.rerun && (f.cmd.ID != "" || f.keyIdx != "") }

func (f *flight) expires(p *Pipeline, now time.Time) time.Time {
	return now.Add(max(p.ttl, p.retention))
}

func (p *Pipeline) validate(cmd Command) (Handler, *fault.Error) {
	if cmd.Type == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: type is required")
	}
	h, ok := p.reg[cmd.Type]
	if !ok || h.Run == nil {
		return Handler{}, fault.Errorf(fault.UnknownCommand, "Validation failed: type: Unknown command type '%s'", cmd.Type)
	}
	if h.Lane == LaneSession && cmd.SessionID == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: sessionId is required for %s", cmd.Type)
	}
	if cmd.IfSessionVersion != nil && cmd.SessionID == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: ifSessionVersion requires sessionId")
	}
	for _, d := range cmd.DependsOn {
		if d == "" {
			return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: dependsOn entries must be non-empty")
		}
	}
	return h, nil
}

func (f *flight) keyExpiresAt(p *Pipeline, now time.Time) time.Time {
	if f.keyIdx == "" {
		return time.Time{}
	}
	return now.Add(p.ttl)
}
