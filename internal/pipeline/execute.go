package pipeline

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// sweep drops expired outcomes now and then; p.mu is held.
func (p *Pipeline) sweep(now time.Time) {
	if now.Before(p.nextSweep) {
		return
	}
	p.nextSweep = now.Add(time.Minute)
	p.out.sweep(now)
}

func (p *Pipeline) runLane(l *lane) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(l.queue) == 0 {
			l.running = false
			delete(p.lanes, l.name)
			p.mu.Unlock()
			return
		}
		f := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		p.mu.Unlock()
		if f.barrier != nil {
			p.passBarrier(f)
			continue
		}
		p.execute(f)
	}
}

// timeoutGrace bounds how long a lane waits for a timed-out handler to
// return after its context was cancelled.
const timeoutGrace = 5 * time.Second

type result struct {
	data json.RawMessage
	err  error
}

func (p *Pipeline) execute(f *flight) {
	if p.hard.Err() != nil {
		p.finish(f, Response{Err: errShuttingDown()})
		return
	}
	// A rerun is the same command, whose dependencies held when it first
	// ran; they may have expired since.
	if !f.rerun {
		if e := p.awaitDeps(f); e != nil {
			p.finish(f, Response{Err: e})
			return
		}
	}
	sid := f.cmd.SessionID
	p.mu.Lock()
	v, ok := p.versions[sid]
	if want := f.cmd.IfSessionVersion; want != nil {
		if !ok {
			p.mu.Unlock()
			p.finish(f, Response{Err: errSessionNotFound(sid)})
			return
		}
		if v != *want {
			p.mu.Unlock()
			p.finish(f, Response{Err: fault.Errorf(fault.VersionMismatch,
				"Session version mismatch: expected %d, got %d", *want, v)})
			return
		}
	}
	f.hadSession = sid != "" && ok
	p.mu.Unlock()

	if !f.rerun {
		p.accept(f)
		p.emit(f, CommandStarted, nil)
	}
	timeout := p.timeouts[f.h.Class]
	if f.h.Timeout != 0 {
		timeout = f.h.Timeout
	}
	ctx, cancel := context.WithCancelCause(p.hard)
	defer cancel(context.Canceled)
	res := make(chan result, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				res <- result{err: fault.Errorf(fault.Internal, "handler panic: %v", r)}
			}
		}()
		data, err := f.h.Run(ctx, f.cmd)
		res <- result{data, err}
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case r := <-res:
		if r.err != nil {
			e := fault.As(r.err)
			if e == nil {
				// Not meant for the client: the operator reads the
				// cause, the client "Internal error".
				p.log.Error("command failed", "command", f.cmd.Type, "session", f.cmd.SessionID, "err", r.err)
				e = fault.Public(r.err)
			}
			p.finish(f, Response{Err: e})
		} else {
			p.finish(f, Response{Success: true, Data: r.data})
		}
	case <-timer:
		// Terminal: the late completion is discarded (spec §11).
		cancel(ErrTimeout)
		p.finish(f, Response{TimedOut: true, Err: fault.Errorf(fault.Timeout,
			"Command '%s' timed out after %dms", f.cmd.Type, timeout.Milliseconds())})
		// The client has its answer; the lane waits a little for the
		// cancelled handler to let go (a killed bash, a closed stream), so
		// the next command does not find the session still busy.
		grace := time.NewTimer(timeoutGrace)
		defer grace.Stop()
		select {
		case <-res:
		case <-grace.C:
		}
	case <-p.hard.Done():
		p.finish(f, Response{Err: errShuttingDown()})
	}
}

// awaitDeps checks f's dependencies (spec §9) when f is about to run.
func (p *Pipeline) awaitDeps(f *flight) *fault.Error {
	if len(f.cmd.DependsOn) == 0 {
		return nil
	}
	var deadline <-chan time.Time
	for _, d := range f.cmd.DependsOn {
		p.mu.Lock()
		if o := p.out.byID(d, time.Now()); o != nil {
			ok, e := o.resp.Success, o.resp.Err
			p.mu.Unlock()
			if !ok {
				return fault.Errorf(fault.Dependency, "Dependency '%s' failed: %s", d, errText(e))
			}
			continue
		}
		df := p.byID[d]
		p.mu.Unlock()
		if df == nil {
			return fault.Errorf(fault.Dependency, "Dependency '%s' is unknown", d)
		}
		if df == f {
			return fault.Errorf(fault.Dependency, "Command '%s' cannot depend on itself", d)
		}
		if f.lane != "" && df.lane == f.lane {
			// f holds its lane, so d is queued behind it: waiting would deadlock.
			return fault.Errorf(fault.Dependency, "Dependency '%s' is queued in the same lane and cannot be awaited from this command", d)
		}
		if deadline == nil {
			t := time.NewTimer(p.depTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-df.done:
			if !df.resp.Success {
				return fault.Errorf(fault.Dependency, "Dependency '%s' failed: %s", d, errText(df.resp.Err))
			}
		case <-deadline:
			return fault.Errorf(fault.Dependency, "Command 'dependsOn:%s' timed out after %dms", d, p.depTimeout.Milliseconds())
		case <-p.hard.Done():
			return errShuttingDown()
		}
	}
	return nil
}

// keepable is what of resp is kept for replay (see the package doc).
func (p *Pipeline) keepable(h Handler, resp Response) Response {
	if h.Keep != nil {
		resp = h.Keep(resp)
	}
	limit := p.keepData
	if h.ReadOnly {
		limit = p.keepRead
	}
	if len(resp.Data) > limit {
		resp.Data = nil
		resp.DataDropped = true
	}
	return resp
}

// finish stores f's terminal outcome (durably, if identified), emits
// command_finished and responds, exactly once. It runs on a pipeline
// goroutine: a lane, a control command's, or a courier.
func (p *Pipeline) finish(f *flight, resp Response) {
	sid := f.cmd.SessionID
	p.mu.Lock()
	if f.finished {
		p.mu.Unlock()
		return
	}
	f.finished = true
	resp.ID, resp.Command = f.cmd.ID, f.cmd.Type
	resp.Replayed = f.rerun
	// Versions ride on successes only: a failure changed nothing, and
	// pi-server's clients read a sessionVersion as "now at".
	if v, ok := p.versions[sid]; ok && sid != "" && resp.Success {
		if f.h.Mutating && f.hadSession {
			v++
			p.versions[sid] = v
		}
		resp.SessionVersion = &v
	}
	p.mu.Unlock()

	now := time.Now()
	kept := p.keepable(f.h, resp)
	if f.durable() {
		err := p.journal.Append(Record{
			Op: OpFinish, Command: f.cmd.Type, ID: f.cmd.ID, Scope: f.scope, Key: f.cmd.IdempotencyKey,
			Fingerprint: f.fp, Response: &kept, At: now,
			KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil && p.onJErr != nil {
			p.onJErr(err)
		}
	}

	p.mu.Lock()
	if !f.rerun {
		if f.cmd.ID != "" && p.byID[f.cmd.ID] == f {
			delete(p.byID, f.cmd.ID)
		}
		if f.keyIdx != "" && p.byKey[f.keyIdx] == f {
			delete(p.byKey, f.keyIdx)
		}
		if f.durable() {
			o := &outcome{fp: f.fp, resp: kept}
			if f.cmd.ID != "" {
				o.id, o.idExpires = f.cmd.ID, now.Add(p.retention)
			}
			if f.keyIdx != "" {
				o.key, o.keyExpires = f.keyIdx, now.Add(p.ttl)
			}
			p.out.put(o)
		}
	}
	waiters := f.waiters
	f.waiters = nil
	f.resp = resp
	close(f.done)
	p.mu.Unlock()

	p.accept(f)
	p.emit(f, CommandFinished, &resp)
	if len(waiters) > 0 {
		p.mu.Lock()
		for _, w := range waiters {
			p.deliverLocked(w.cmd.Sender, func() { p.answerReplay(w, resp) })
		}
		p.mu.Unlock()
	}
	f.respond(resp)
	p.mu.Lock()
	p.inFlight--
	p.mu.Unlock()
	p.flights.Done()
}

// errText is a dependency's error for the message of its dependents.
func errText(e *fault.Error) string {
	if e == nil || e.Message == "" {
		return "unknown error"
	}
	return e.Message
}
