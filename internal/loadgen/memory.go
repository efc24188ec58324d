package loadgen

import (
	"context"
	"fmt"
	"time"
)

// settledMemory reads pid's memory once its RSS has held still for
// settle (within rssTolerance), so that an idle reading does not catch
// the server halfway through work or a collection; it gives up waiting
// after ten times settle. A negative settle reads at once.
func settledMemory(ctx context.Context, pid int, settle time.Duration) (memory, error) {
	m, err := readMemory(pid)
	if err != nil || settle < 0 {
		return m, err
	}
	poll := min(100*time.Millisecond, max(settle/10, time.Millisecond))
	t := time.NewTicker(poll)
	defer t.Stop()
	anchor, since, giveUp := m.RSS, time.Now(), time.Now().Add(10*settle)
	for {
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("waiting for the server's memory to settle: %w", ctx.Err())
		case now := <-t.C:
			if m, err = readMemory(pid); err != nil {
				return m, err
			}
			if d := m.RSS - anchor; d > rssTolerance || d < -rssTolerance {
				anchor, since = m.RSS, now
			}
			if now.Sub(since) >= settle || now.After(giveUp) {
				return m, nil
			}
		}
	}
}

// rssTolerance is how far RSS may move and still count as still: 32
// pages, under 1 KiB per session at N=40.
const rssTolerance = 128 << 10

// watchIdle reads pid's RSS every tenth of wait (at most every 10 s) for
// wait; the last sample is at wait.
func watchIdle(ctx context.Context, pid int, wait time.Duration) ([]RSSSample, error) {
	step := min(10*time.Second, max(wait/10, time.Millisecond))
	start := time.Now()
	t := time.NewTimer(step)
	defer t.Stop()
	var samples []RSSSample
	for {
		select {
		case <-ctx.Done():
			return samples, fmt.Errorf("idle wait: %w", ctx.Err())
		case <-t.C:
		}
		m, err := readMemory(pid)
		if err != nil {
			return samples, err
		}
		el := time.Since(start)
		samples = append(samples, RSSSample{After: el, RSS: m.RSS})
		if el >= wait {
			return samples, nil
		}
		t.Reset(min(step, wait-el))
	}
}
