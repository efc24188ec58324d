package pipeline

import (
	"reflect"
)

// courier runs the callbacks of one Sender in order on a goroutine of its
// own: immediate answers (rejections, conflicts, replays) of commands one
// connection sent back to back arrive in the order sent, and a callback
// that blocks holds up only its own connection.
type courier struct {
	queue []func()
}

// deliverLocked queues fn on the courier of sender, starting it if it is
// idle; p.mu is held. A sender that cannot be a map key shares the
// courier of commands without one.
func (p *Pipeline) deliverLocked(sender any, fn func()) {
	if sender != nil && !reflect.ValueOf(sender).Comparable() {
		sender = nil
	}
	c := p.couriers[sender]
	if c == nil {
		c = &courier{}
		p.couriers[sender] = c
		if p.couriersIdle == nil {
			p.couriersIdle = make(chan struct{})
		}
		go p.runCourier(sender, c)
	}
	c.queue = append(c.queue, fn)
}

// runCourier runs c's callbacks until its queue is empty. Couriers are
// waited for by Shutdown through couriersIdle rather than p.wg, because
// commands rejected after Shutdown returned still need one.
func (p *Pipeline) runCourier(sender any, c *courier) {
	for {
		p.mu.Lock()
		if len(c.queue) == 0 {
			delete(p.couriers, sender)
			if len(p.couriers) == 0 {
				close(p.couriersIdle)
				p.couriersIdle = nil
			}
			p.mu.Unlock()
			return
		}
		fn := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		p.mu.Unlock()
		fn()
	}
}

// waitCouriers returns once no courier runs.
func (p *Pipeline) waitCouriers() {
	for {
		p.mu.Lock()
		idle := p.couriersIdle
		p.mu.Unlock()
		if idle == nil {
			return
		}
		<-idle
	}
}

// answerReplay answers f with a stored outcome (spec §7.4, §5.1); it runs
// on f's courier.
func (p *Pipeline) answerReplay(f *flight, r Response) {
	p.accept(f)
	r.ID = f.cmd.ID // never leak the stored id
	r.Replayed = true
	p.emit(f, CommandFinished, &r)
	f.respond(r)
}

// accept emits f's command_accepted unless that was done already: by its
// courier soon after admission, or by whichever goroutine gets to f first.
func (p *Pipeline) accept(f *flight) {
	f.accepted.Do(func() { p.emit(f, CommandAccepted, nil) })
}

func (p *Pipeline) emit(f *flight, t EventType, r *Response) {
	lane := f.lane
	if lane == "" {
		lane = f.scope
	}
	id := f.cmd.ID
	if id == "" {
		id = f.anon
	}
	deps := f.cmd.DependsOn
	if deps == nil {
		deps = []string{}
	}
	ev := Event{Type: t, CommandID: id, Command: f.cmd.Type, SessionID: f.cmd.SessionID, DependsOn: deps,
		IfSessionVersion: f.cmd.IfSessionVersion, IdempotencyKey: f.cmd.IdempotencyKey, Lane: lane, Origin: f.cmd.Origin,
		Announced: f.cmd.Announced && (t == CommandAccepted || t == CommandStarted)}
	if r != nil {
		ev.Success, ev.Err, ev.Replayed, ev.TimedOut, ev.SessionVersion = r.Success, r.Err, r.Replayed, r.TimedOut, r.SessionVersion
	}
	hev := ev
	if r != nil && r.Err != nil && f.h.Keep != nil {
		// The history answers anyone who asks for it: it has the error
		// as kept for replays, not as its sender read it.
		hev.Err = f.h.Keep(*r).Err
	}
	p.hist.record(hev, f.fp, f.cmd.ID != "")
	if p.emitFn != nil {
		p.emitFn(ev)
	}
}
