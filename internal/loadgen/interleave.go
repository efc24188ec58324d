package loadgen

import (
	"context"
	"fmt"
	"slices"
)

// BaselineRound is one round of an interleaved measure: the face's
// events/s in one agentd run and coder/websocket's messages/s in the
// baseline run next to it, with as many connections, messages per
// connection and bytes per message.
type BaselineRound struct {
	// First says which of the two ran first in the round: "agentd" or
	// "baseline"; the rounds alternate.
	First          string         `json:"first"`
	EventsPerSec   float64        `json:"events_per_sec"`
	Baseline       BaselineReport `json:"baseline"`
	Fraction       float64        `json:"fraction"`
	ServerLoadCPU  CPUUse         `json:"server_load_cpu"`
	AgentdDuration float64        `json:"agentd_load_seconds"`
}

// RunInterleaved measures the face of o and coder/websocket's own rate
// in alternating rounds, so that both see the same contention on a busy
// machine: agentd then the baseline, then the baseline then agentd, and
// so on, rounds times. Each round's baseline has the shape of the face's
// streams (its connections, messages per connection and mean message
// size) from the agentd run of that round, or, when the baseline goes
// first, of the round before. The report is the last agentd run's, with
// every round in BaselineRounds, the last baseline in Baseline, and the
// median of the rounds' fractions in BaselineFraction.
func RunInterleaved(ctx context.Context, o Options, rounds int) (Report, error) {
	if rounds < 1 {
		return Report{}, fmt.Errorf("baseline rounds %d: must be at least 1", rounds)
	}
	if o.ClusterNodes > 1 {
		return Report{}, fmt.Errorf("cluster nodes %d: no baseline for a cluster", o.ClusterNodes)
	}
	o.Baseline = false // this runs the baseline itself
	o, err := o.withDefaults()
	if err != nil {
		return Report{}, err
	}
	var (
		last  Report
		shape BaselineOptions
		all   []BaselineRound
	)
	base := func() (BaselineReport, error) {
		b, err := Baseline(ctx, shape)
		if err != nil {
			return b, fmt.Errorf("baseline: %w", err)
		}
		return b, nil
	}
	for i := range rounds {
		var r BaselineRound
		var b BaselineReport
		if i%2 == 1 {
			r.First = "baseline"
			if b, err = base(); err != nil {
				return last, err
			}
		} else {
			r.First = "agentd"
		}
		rep, err := Run(ctx, o)
		if err != nil {
			return rep, err
		}
		last = rep
		conns, msgs, size, rate := faceStreams(rep, o)
		if conns == 0 || msgs == 0 {
			return rep, fmt.Errorf("baseline: the %s run received nothing to compare with", faceName(o))
		}
		shape = BaselineOptions{Binary: o.BaselineBinary, Connections: conns, Messages: msgs, Size: size,
			DialConcurrency: o.DialConcurrency, Timeout: o.LoadTimeout, StartTimeout: o.StartTimeout, Logger: o.Logger}
		if i%2 == 0 {
			if b, err = base(); err != nil {
				return last, err
			}
		}
		r.EventsPerSec, r.Baseline, r.ServerLoadCPU, r.AgentdDuration = rate, b, rep.LoadCPU, rep.Duration.Seconds()
		if b.MessagesPerSec > 0 {
			r.Fraction = rate / b.MessagesPerSec
		}
		all = append(all, r)
	}
	last.BaselineRounds = all
	last.Baseline = &all[len(all)-1].Baseline
	last.BaselineFraction = median(all, func(r BaselineRound) float64 { return r.Fraction })
	if last.SessionEventsPerSec > 0 && last.Baseline.MessagesPerSec > 0 {
		last.SessionEventsFraction = last.SessionEventsPerSec / last.Baseline.MessagesPerSec
	}
	return last, nil
}

// faceStreams is what the face of o delivered in rep: connections,
// messages per connection, mean message size and messages per second.
// pi: every frame on the sessions' connections; session-ws: the
// watchers' messages; REST: the SSE watchers' events.
func faceStreams(rep Report, o Options) (conns, msgs, size int, rate float64) {
	var n, bytes int64
	switch {
	case rep.REST != nil:
		conns, n, bytes, rate = rep.REST.Watchers-rep.REST.Failed, sumValues(rep.REST.Events), rep.REST.Bytes, rep.REST.EventsPerSec
	case rep.SessionWS != nil:
		conns, n, bytes, rate = rep.SessionWS.Watchers-rep.SessionWS.Failed, sumValues(rep.SessionWS.Messages), rep.SessionWS.Bytes, rep.SessionWS.MessagesPerSec
	default:
		conns, n, bytes, rate = o.Sessions, rep.Frames, rep.Bytes, rep.EventsPerSec
	}
	if conns <= 0 || n <= 0 {
		return 0, 0, 0, 0
	}
	return conns, int(max(1, n/int64(conns))), int(max(1, bytes/n)), rate
}

func faceName(o Options) string {
	switch {
	case o.REST:
		return "rest"
	case o.Watchers > 0:
		return "session-ws"
	default:
		return "pi"
	}
}

func sumValues(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// median is the median of f over rs (the mean of the middle two for an
// even count).
func median[T any](rs []T, f func(T) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
