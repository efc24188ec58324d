package session

// BashTimeoutSeconds exposes bashTimeoutSeconds to the tests.
var BashTimeoutSeconds = bashTimeoutSeconds

// CPUTime exposes cpuTime to the benchmarks.
var CPUTime = cpuTime

// LogCopy exposes logCopy: what the event log kept of an event before
// it stored deltas compactly, and what a replay must still give.
var LogCopy = logCopy
