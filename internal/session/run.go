package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
)

// Behavior says what to do with a prompt that arrives while a run is in
// progress.
type Behavior string

// Prompt behaviours while streaming, as pi's streamingBehavior.
const (
	BehaviorNone     Behavior = ""
	BehaviorSteer    Behavior = "steer"
	BehaviorFollowUp Behavior = "followUp"
)

// UserMessage builds a user message from text and images.
func UserMessage(text string, images []llm.Content) *llm.Message {
	content := make([]llm.Content, 0, 1+len(images))
	content = append(content, llm.Text(text))
	content = append(content, images...)
	return &llm.Message{Role: llm.RoleUser, Content: content, Timestamp: time.Now().UnixMilli()}
}

// Prompt starts a run with a user message, or queues it as a steering or
// follow-up message when a run is in progress and b says so. It returns
// once the prompt is accepted; the run goes on in the background and
// reports through events. While a run is in progress and b is empty it
// fails with ErrBusy.
func (s *Session) Prompt(m *llm.Message, b Behavior) error {
	return s.PromptThen(m, b, nil)
}

// PromptThen is Prompt with a callback run once the prompt is accepted
// and before the run emits its first event, so a face can answer the
// command before agent_start reaches the client.
//
// A conversation that ends with tool calls that never ran (pending
// approvals after a restart) moves on: each gets a result saying it was
// not run, so the context stays valid, before the run starts.
func (s *Session) PromptThen(m *llm.Message, b Behavior, accepted func()) error {
	if accepted == nil {
		accepted = func() {}
	}
	m, err := s.expand(m)
	if err != nil {
		return err
	}
	s.parkMu.Lock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.parkMu.Unlock()
		return ErrClosed
	}
	if wake, ending := s.runEndingLocked(); ending && b == "" {
		// The run is past its agent_end: this prompt is the next one.
		s.mu.Unlock()
		s.parkMu.Unlock()
		<-wake
		return s.PromptThen(m, b, accepted)
	}
	if s.runDone != nil {
		s.mu.Unlock()
		s.parkMu.Unlock()
		var err error
		switch b {
		case BehaviorSteer:
			err = s.agent.Steer(m) // its queue_update goes out before the answer, as pi's
		case BehaviorFollowUp:
			err = s.agent.FollowUp(m)
		default:
			return ErrBusy
		}
		if err != nil {
			return err
		}
		accepted()
		return nil
	}
	sl := s.takeSlotLocked()
	s.mu.Unlock()
	accepted()
	s.settleLocked(reasonMovedOn, true)
	s.parkMu.Unlock()
	s.launch(sl, func(ctx context.Context) ([]*llm.Message, error) { return s.agent.Prompt(ctx, m) })
	return nil
}

// runSlot is the claim on the session's one run: while it is held,
// prompts are refused or queued and Abort cancels it.
type runSlot struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// takeSlotLocked claims the run slot; s.mu is held, the session is open
// and no run is in progress.
func (s *Session) takeSlotLocked() runSlot {
	ctx, cancel := context.WithCancelCause(context.Background())
	sl := runSlot{ctx, cancel, make(chan struct{})}
	s.runCancel, s.runDone = cancel, sl.done
	s.wg.Add(1)
	return sl
}

// dropSlot gives back a slot no run was started in; nothing was emitted.
func (s *Session) dropSlot(sl runSlot) {
	s.mu.Lock()
	s.runCancel, s.runDone = nil, nil
	s.mu.Unlock()
	sl.cancel(nil)
	close(sl.done)
	s.wg.Done()
}

// launch starts the run in sl on its own goroutine: start begins the
// agent's run (Prompt, Resume), and the session's retries and compaction
// follow as for any run.
func (s *Session) launch(sl runSlot, start func(context.Context) ([]*llm.Message, error)) {
	s.setState(StateRunning, "")
	s.mu.Lock()
	parked := len(s.runParked) > 0
	s.mu.Unlock()
	if parked {
		s.syncSuspended()
	}
	go func() {
		defer s.wg.Done()
		outcome := s.run(sl.ctx, start)
		s.checkpointEnd()
		sl.cancel(nil)
		s.mu.Lock()
		s.runCancel, s.runDone = nil, nil
		wake := s.runEnd.wake
		s.runEnd = runEnd{}
		s.lastOutcome = outcome
		bash := s.pendingBash
		s.pendingBash = nil
		left := s.runParked
		s.runParked, s.runAuto = nil, false
		s.mu.Unlock()
		s.forget(left)
		for _, bm := range bash {
			s.appendOutsideRun(bm)
		}
		s.setState(StateIdle, outcome)
		if wake != nil {
			close(wake) // the prompts sent after agent_end start now
		}
		close(sl.done)
	}()
}

// Steer queues a message for delivery after the current turn. With no
// run in progress it waits in the queue for the next prompt's run, as in
// pi. A message the queue limits refuse fails with an *agent.LimitError
// whose text is for the client.
func (s *Session) Steer(m *llm.Message) error { return s.queue(m, BehaviorSteer) }

// FollowUp queues a message for when the agent would stop.
func (s *Session) FollowUp(m *llm.Message) error { return s.queue(m, BehaviorFollowUp) }

func (s *Session) queue(m *llm.Message, b Behavior) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	m, err := s.expand(m)
	if err != nil {
		return err
	}
	if b == BehaviorSteer {
		return s.agent.Steer(m)
	}
	return s.agent.FollowUp(m)
}

// Running reports whether a run is in progress.
func (s *Session) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runDone != nil
}

// LastOutcome is how the most recent run ended, "" before the first run
// ends. Once Wait has returned for a run, it is that run's outcome.
func (s *Session) LastOutcome() Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOutcome
}

// Wait blocks until no run is in progress or ctx ends.
func (s *Session) Wait(ctx context.Context) error {
	s.mu.Lock()
	done := s.runDone
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abort stops the run in progress (the model stream is closed, running
// tools are killed, a retry wait or compaction is cancelled, pending
// interactions are cancelled) and returns once the run has ended.
//
// With no run in progress, the tool calls the conversation ends with that
// wait for a person (pending approvals after a restart) are settled as
// not run, each with a result saying it was cancelled, and nothing runs;
// the state goes to idle with the outcome cancelled.
func (s *Session) Abort() {
	s.parkMu.Lock()
	s.mu.Lock()
	cancel, done := s.runCancel, s.runDone
	compactCancel := s.compactCancel
	s.mu.Unlock()
	if compactCancel != nil {
		compactCancel()
	}
	if cancel == nil {
		s.mu.Lock()
		parked := len(s.parked) > 0
		s.mu.Unlock()
		if parked {
			s.settleLocked(reasonAborted, true)
			s.mu.Lock()
			s.lastOutcome = OutcomeCancelled
			s.mu.Unlock()
			s.setState(StateIdle, OutcomeCancelled)
		}
		s.parkMu.Unlock()
		return
	}
	s.parkMu.Unlock()
	s.stopRun(cancel, done, errAborted)
}

// stopRun cancels the run in progress with cause and waits for its end.
// Everything waiting for a person is cancelled but the parked requests no
// run has taken over: an edit or a navigation in progress (they hold the
// run slot too) decides what becomes of those.
func (s *Session) stopRun(cancel func(error), done chan struct{}, cause error) {
	cancel(cause)
	s.mu.Lock()
	parked := s.parked
	s.mu.Unlock()
	if len(parked) == 0 {
		s.broker.CancelAll(cause.Error())
	} else {
		for _, r := range s.broker.Pending() {
			if !slices.ContainsFunc(parked, func(p parkedCall) bool { return p.id == r.ID }) {
				_ = s.broker.CancelWith(r.ID, cause.Error())
			}
		}
	}
	s.agent.Abort()
	<-done
}

// Why a run or a waiting call ended, as the model and clients are told.
const (
	reasonAborted = "the run was aborted"
	reasonMovedOn = "the conversation moved on"
	reasonClosed  = "the session closed"
)

var errAborted = errors.New(reasonAborted)

// AbortRetry cancels a retry wait in progress; the run ends with the
// error that caused the retry.
func (s *Session) AbortRetry() {
	s.mu.Lock()
	retrying := s.state == StateRetrying
	s.mu.Unlock()
	if retrying {
		s.Abort()
	}
}

// run is one prompt's whole life: the agent run, retries of transient
// errors, compaction when the context overflowed or passed the
// threshold. It returns the outcome.
func (s *Session) run(ctx context.Context, start func(context.Context) ([]*llm.Message, error)) Outcome {
	s.prepareSources(ctx)
	added, err := start(ctx)
	if err != nil {
		s.log.Error("agent run", "err", err)
		return OutcomeFailed
	}
	attempt := 0
	overflowRetried := false
	defer func() {
		s.mu.Lock()
		s.retryAttempt = 0
		s.mu.Unlock()
	}()
	for {
		last := lastAssistant(added)
		if last == nil || last.StopReason != llm.StopError {
			break
		}
		s.mu.Lock()
		e := s.lastErr
		retry := s.retry
		s.mu.Unlock()
		if e == nil {
			break
		}
		if e.ContextOverflow() && !overflowRetried {
			overflowRetried = true
			s.dropLast(last)
			if _, err := s.compactNow(ctx, "overflow", "", true); err != nil {
				break
			}
			s.setState(StateRunning, "")
			if added, err = s.agent.Continue(ctx); err != nil {
				break
			}
			continue
		}
		if !retry.Enabled || !e.Retryable() || ctx.Err() != nil {
			break
		}
		if attempt >= retry.MaxRetries {
			s.emit(Event{Type: EventAutoRetryEnd, Success: false, Attempt: attempt, FinalError: last.ErrorMessage})
			return OutcomeFailed
		}
		attempt++
		delay := retryDelay(retry, attempt, e.RetryAfter)
		s.setRunEnded(false)
		s.setState(StateRetrying, "")
		s.emit(Event{Type: EventAutoRetryStart, Attempt: attempt, MaxAttempts: retry.MaxRetries, DelayMs: delay.Milliseconds(), ErrorMessage: last.ErrorMessage})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.emit(Event{Type: EventAutoRetryEnd, Success: false, Attempt: attempt, FinalError: "Retry cancelled"})
			return OutcomeCancelled
		}
		s.setState(StateRunning, "")
		// The failed message stays in the transcript but leaves the
		// context, so the retry asks the same question again.
		s.dropLast(last)
		s.mu.Lock()
		s.retryAttempt = attempt // onAgent sends auto_retry_end when the answer ends
		s.mu.Unlock()
		if added, err = s.agent.Continue(ctx); err != nil {
			break
		}
		if l := lastAssistant(added); l != nil && l.StopReason != llm.StopError {
			break
		}
	}
	last := lastAssistant(added)
	outcome := OutcomeCompleted
	switch {
	case ctx.Err() != nil || (last != nil && last.StopReason == llm.StopAborted):
		return OutcomeCancelled
	case last != nil && last.StopReason == llm.StopError:
		outcome = OutcomeFailed
	}
	if outcome == OutcomeCompleted {
		s.maybeAutoCompact(ctx)
	}
	return outcome
}

func lastAssistant(ms []*llm.Message) *llm.Message {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == llm.RoleAssistant {
			return ms[i]
		}
	}
	return nil
}

// dropLast removes a failed assistant message from the context (not the
// transcript).
func (s *Session) dropLast(m *llm.Message) {
	msgs := s.agent.Messages()
	if n := len(msgs); n > 0 && msgs[n-1] == m {
		_ = s.agent.SetMessages(msgs[:n-1])
	}
	s.mu.Lock()
	if n := len(s.items); n > 0 && s.items[n-1].msg == m {
		s.items = s.items[:n-1]
	}
	s.mu.Unlock()
}

// retryDelay is base·2^(attempt-1), or what the provider asked for if
// that is longer, capped at MaxDelay.
func retryDelay(r RetrySettings, attempt int, after time.Duration) time.Duration {
	d := r.BaseDelay << (attempt - 1)
	if after > d {
		d = after
	}
	if r.MaxDelay > 0 && d > r.MaxDelay {
		d = r.MaxDelay
	}
	return d
}

func (s *Session) maybeAutoCompact(ctx context.Context) {
	s.mu.Lock()
	settings, model := s.compact, s.model
	s.mu.Unlock()
	if !settings.Enabled || ctx.Err() != nil {
		return
	}
	tokens := compaction.ContextTokens(s.agent.Messages())
	if !compaction.ShouldCompact(tokens, model.ContextWindow, settings) {
		return
	}
	if _, err := s.compactNow(ctx, "threshold", "", false); err != nil {
		s.log.Warn("automatic compaction failed", "err", err)
	}
}

// Compact summarises the older part of the conversation now. It fails
// while a run is in progress.
func (s *Session) Compact(ctx context.Context, instructions string) (*CompactionResult, error) {
	s.mu.Lock()
	if s.runDone != nil {
		s.mu.Unlock()
		return nil, fault.New(fault.Busy, "cannot compact while the agent is processing; abort first")
	}
	s.mu.Unlock()
	return s.compactNow(ctx, "manual", instructions, false)
}

// compactionFault says why a compaction did not happen as a client sees
// it, as pi does: nothing to compact, the model's failure to summarise,
// the abort. Recording the result is the server's own failure and stays
// internal.
func compactionFault(err error) error {
	switch {
	case fault.As(err) != nil:
		return err
	case errors.Is(err, compaction.ErrNothingToCompact), errors.Is(err, compaction.ErrAlreadyCompacted):
		return fault.Wrap(fault.Invalid, err, err.Error())
	}
	return fault.Wrap(fault.Failed, err, err.Error())
}

// compactNow runs one compaction and emits its start and end.
func (s *Session) compactNow(ctx context.Context, reason, instructions string, willRetry bool) (*CompactionResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.compactCancel != nil {
		s.mu.Unlock()
		return nil, fault.New(fault.Busy, "a compaction is already running")
	}
	s.compactCancel = cancel
	if s.runEnd.ended {
		s.wakeRunEndLocked() // a compaction after agent_end: the run goes on
	}
	prevState := s.state
	items := append([]item(nil), s.items...)
	model, settings := s.model, s.compact
	prevDetails := s.prevDetails
	f := s.file
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.compactCancel = nil
		s.mu.Unlock()
	}()

	s.setState(StateCompacting, "")
	s.emit(Event{Type: EventCompactionStart, Reason: reason})
	end := func(res *CompactionResult, err error) (*CompactionResult, error) {
		ev := Event{Type: EventCompactionEnd, Reason: reason, Compaction: res, WillRetry: willRetry && err == nil}
		if err != nil {
			if ctx.Err() != nil {
				ev.Aborted = true
			} else {
				ev.ErrorMessage = err.Error()
			}
		}
		s.emit(ev)
		if prevState == StateCompacting {
			prevState = StateIdle
		}
		s.setState(prevState, "")
		return res, err
	}

	var prev *compaction.Previous
	in := make([]compaction.Item, 0, len(items))
	for i, it := range items {
		if i == 0 && it.msg.Role == llm.RoleCompactionSummary {
			prev = &compaction.Previous{EntryID: it.id, Summary: it.msg.Summary, Details: prevDetails}
			if len(items) > 1 {
				prev.FirstKeptEntryID = items[1].id
			}
			in = append(in, compaction.Item{EntryID: it.id})
			continue
		}
		in = append(in, compaction.Item{EntryID: it.id, Message: it.msg})
	}
	// pi refuses when the newest entry of the path is the compaction: the
	// context holds the summary first, so the transcript's leaf says it.
	if prev != nil && f != nil && f.Leaf() == prev.EntryID {
		return end(nil, compactionFault(compaction.ErrAlreadyCompacted))
	}
	plan, err := compaction.Prepare(in, prev, settings)
	if err != nil {
		return end(nil, compactionFault(err))
	}
	var opts llm.StreamOptions
	if s.cfg.Options != nil {
		if opts, err = s.cfg.Options(ctx, model); err != nil {
			return end(nil, compactionFault(err))
		}
	}
	result, err := compaction.Summarize(ctx, compaction.StreamFunc(s.cfg.Stream), model, opts, plan, instructions)
	if err != nil {
		return end(nil, compactionFault(err))
	}
	details := result.Details
	detailsJSON, _ := jsonMarshal(details)
	id, err := f.AppendCompaction(result.Summary, result.FirstKeptEntryID, result.TokensBefore, detailsJSON, false)
	if err != nil {
		return end(nil, fmt.Errorf("recording the compaction: %w", err))
	}
	// Rebuild the context the way a reload would: summary, then the kept
	// messages.
	summary := &llm.Message{Role: llm.RoleCompactionSummary, Summary: result.Summary, TokensBefore: result.TokensBefore, Timestamp: time.Now().UnixMilli()}
	newItems := []item{{id, summary}}
	kept := false
	for _, it := range items {
		if it.id == result.FirstKeptEntryID {
			kept = true
		}
		if kept {
			newItems = append(newItems, it)
		}
	}
	msgs := make([]*llm.Message, len(newItems))
	for i, it := range newItems {
		msgs[i] = it.msg
	}
	if err := s.agent.SetMessages(msgs); err != nil {
		return end(nil, err)
	}
	s.mu.Lock()
	s.items = newItems
	s.prevDetails = &details
	s.mu.Unlock()
	return end(&CompactionResult{Summary: result.Summary, FirstKeptEntryID: result.FirstKeptEntryID, TokensBefore: result.TokensBefore, Details: details}, nil)
}

// AbortCompaction cancels a compaction in progress.
func (s *Session) AbortCompaction() {
	s.mu.Lock()
	c := s.compactCancel
	s.mu.Unlock()
	if c != nil {
		c()
	}
}

// Agent exposes the agent for read-only inspection in tests and faces.
func (s *Session) Agent() *agent.Agent { return s.agent }
