package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUUse is the CPU time spent during a phase: by the server, by this
// process (the clients and the mock model), and by everything else on the machine, out of
// what the machine's cores had. On a shared machine Others says whether
// a figure was measured undisturbed.
type CPUUse struct {
	Server   time.Duration `json:"server_ns"`
	Bench    time.Duration `json:"bench_ns"`
	Others   time.Duration `json:"others_ns"`
	Capacity time.Duration `json:"capacity_ns"`
}

// cpuMark is a reading of the counters CPUUse is the difference of.
type cpuMark struct {
	busy, total   time.Duration // the machine's, from /proc/stat
	server, bench time.Duration
}

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// architecture Go supports.
const userHZ = 100

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// readCPU reads the machine's, pid's and this process's CPU times. Linux
// only.
func readCPU(pid int) (cpuMark, error) {
	var m cpuMark
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m, fmt.Errorf("cpu times: %w", err)
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return m, fmt.Errorf("cpu times: /proc/stat starts %q", line)
	}
	// user nice system idle iowait irq softirq steal ...
	for i, s := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return m, fmt.Errorf("cpu times: /proc/stat field %d: %w", i+1, err)
		}
		m.total += ticks(n)
		if i != 3 && i != 4 { // idle, iowait
			m.busy += ticks(n)
		}
	}
	ps, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return m, fmt.Errorf("cpu times of pid %d: %w", pid, err)
	}
	// The command name may hold spaces and parentheses: fields count
	// from the last ')'.
	rest := ps[bytes.LastIndexByte(ps, ')')+1:]
	pf := strings.Fields(string(rest))
	// state is field 3 of the whole line, pf[0]; utime and stime are 14
	// and 15.
	if len(pf) < 13 {
		return m, fmt.Errorf("cpu times of pid %d: short /proc stat", pid)
	}
	for _, s := range pf[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return m, fmt.Errorf("cpu times of pid %d: %w", pid, err)
		}
		m.server += ticks(n)
	}
	m.bench, err = selfCPU()
	return m, err
}

// since is the CPU used from m0 to m.
func (m cpuMark) since(m0 cpuMark) CPUUse {
	u := CPUUse{Server: m.server - m0.server, Bench: m.bench - m0.bench, Capacity: m.total - m0.total}
	u.Others = max(0, m.busy-m0.busy-u.Server-u.Bench)
	return u
}

func (u CPUUse) String() string {
	if u.Capacity == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s of %s", fmtCPU(u.Server), fmtCPU(u.Bench), fmtCPU(u.Others), fmtCPU(u.Capacity))
}

func fmtCPU(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
