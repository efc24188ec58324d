package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// idleReadings waits wait with every connection open and idle, reading
// the server's RSS on the way (rep.RSSIdleSamples), and then takes the
// idle readings: RSS, RssAnon and the live heap from the server's
// /metrics. A server that cannot say its live heap (an older agentd)
// leaves HeapLiveIdle zero.
func idleReadings(ctx context.Context, srv *server, wait time.Duration, rep *Report, log *slog.Logger) error {
	samples, err := watchIdle(ctx, srv.pid(), wait)
	if err != nil {
		return err
	}
	rep.RSSIdleSamples = samples
	rep.RSSIdle = samples[len(samples)-1].RSS
	if m, err := readMemory(srv.pid()); err == nil {
		rep.RSSAnonIdle = m.Anon
	}
	live, err := liveHeap(ctx, srv.addr)
	if err != nil {
		log.Warn("live heap after the idle wait", "err", err)
		return nil
	}
	rep.HeapLiveIdle = live
	log.Info("idle", "rss", rep.RSSIdle, "rss_anon", rep.RSSAnonIdle, "heap_live", live)
	return nil
}

// liveHeap reads go_gc_heap_live_bytes from the /metrics of the server
// at addr.
func liveHeap(ctx context.Context, addr string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("/metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return metricValue(bufio.NewScanner(resp.Body), "go_gc_heap_live_bytes")
}

// metricValue finds the sample of an unlabelled metric in the
// Prometheus text format.
func metricValue(sc *bufio.Scanner, name string) (int64, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s %q: %w", name, v, err)
		}
		return int64(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s on /metrics", name)
}
