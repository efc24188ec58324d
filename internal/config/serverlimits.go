package config

import "time"

// ServerLimits are the fields of server.Limits, field for field, so that
// cli converts one into the other (server.Limits(sc.ServerLimits())) and
// the compiler checks they still match: config holds plain values and
// does not import the server, which would bring sessions, NATS and the
// sandbox in with it (the same shape as NATSCredentials).
type ServerLimits struct {
	MaxSessions         int
	MaxConnections      int
	MaxFrameBytes       int
	SessionRate         int
	GlobalRate          int
	ControlRate         int
	UIResponseRate      int
	MaxPending          int
	MaxQueuedBytes      int
	MaxQueuedBytesTotal int64
	ShutdownTimeout     time.Duration
	DependencyTimeout   time.Duration
	IdempotencyTTL      time.Duration
	ReadTimeout         time.Duration
	MutateTimeout       time.Duration
	LongCommandTimeout  time.Duration
}

// ServerLimits are the limits serve's flags set on the server. The
// server fills a zero with its default; where a flag's 0 means "none"
// (the rate limits), the server's word for that is a negative number.
// The limits no flag sets (UIResponseRate, ReadTimeout, MutateTimeout)
// stay zero: the server's defaults.
func (s Serve) ServerLimits() ServerLimits {
	return ServerLimits{
		MaxSessions:         s.MaxSessions,
		MaxConnections:      s.MaxConnections,
		MaxFrameBytes:       s.MaxFrameBytes,
		SessionRate:         offIsNegative(s.RateLimit),
		GlobalRate:          offIsNegative(s.GlobalRateLimit),
		ControlRate:         offIsNegative(s.ControlRateLimit),
		MaxPending:          s.MaxPending,
		MaxQueuedBytes:      s.MaxQueuedBytes,
		MaxQueuedBytesTotal: s.MaxQueuedTotal,
		ShutdownTimeout:     s.ShutdownTimeout,
		DependencyTimeout:   s.DependencyTimeout,
		IdempotencyTTL:      s.IdempotencyTTL,
		LongCommandTimeout:  s.CommandTimeout,
	}
}

// offIsNegative maps a flag's "0 disables" to the server's "negative
// disables" (its 0 is "the default").
func offIsNegative(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
