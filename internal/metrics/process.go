package metrics

import (
	"bytes"
	"math"
	"os"
	"strconv"
)

// The process_* families, with the names the Prometheus Go client gave
// them before.
const (
	procCPU       = "process_cpu_seconds_total"
	procMaxFDs    = "process_max_fds"
	procNetRx     = "process_network_receive_bytes_total"
	procNetTx     = "process_network_transmit_bytes_total"
	procOpenFDs   = "process_open_fds"
	procResident  = "process_resident_memory_bytes"
	procStart     = "process_start_time_seconds"
	procVirtual   = "process_virtual_memory_bytes"
	procVirtualMx = "process_virtual_memory_max_bytes"
)

// userHZ is the unit of /proc's CPU times and start time: USER_HZ,
// 100 on every Linux architecture Go supports.
const userHZ = 100

// NewProcessCollector writes the process_* families, read from
// /proc/self at each scrape. Where /proc cannot be read (not Linux), a
// family has no sample.
func NewProcessCollector() Collector { return processCollector{} }

type processCollector struct{}

func (processCollector) Names() []string {
	return []string{procCPU, procMaxFDs, procNetRx, procNetTx, procOpenFDs, procResident, procStart, procVirtual, procVirtualMx}
}

func (processCollector) Collect(w *Writer) {
	stat, statErr := readStat()
	w.Family(procCPU, "User and system CPU time the process spent, in seconds.", TypeCounter)
	if statErr == nil {
		w.Sample(procCPU, float64(stat.utime+stat.stime)/userHZ)
	}
	maxFDs, maxVM, limErr := readLimits()
	w.Family(procMaxFDs, "The process's limit of open file descriptors.", TypeGauge)
	if limErr == nil {
		w.Sample(procMaxFDs, maxFDs)
	}
	rx, tx, netErr := readNetDev()
	w.Family(procNetRx, "Bytes received on the process's network namespace's interfaces.", TypeCounter)
	if netErr == nil {
		w.Sample(procNetRx, rx)
	}
	w.Family(procNetTx, "Bytes sent on the process's network namespace's interfaces.", TypeCounter)
	if netErr == nil {
		w.Sample(procNetTx, tx)
	}
	w.Family(procOpenFDs, "Open file descriptors.", TypeGauge)
	if n, err := openFDs(); err == nil {
		w.Sample(procOpenFDs, float64(n))
	}
	w.Family(procResident, "Resident memory, in bytes.", TypeGauge)
	if statErr == nil {
		w.Sample(procResident, float64(stat.rss*uint64(os.Getpagesize())))
	}
	w.Family(procStart, "When the process started, in seconds since 1970.", TypeGauge)
	if boot, err := bootTime(); err == nil && statErr == nil {
		w.Sample(procStart, boot+float64(stat.starttime)/userHZ)
	}
	w.Family(procVirtual, "Virtual memory, in bytes.", TypeGauge)
	if statErr == nil {
		w.Sample(procVirtual, float64(stat.vsize))
	}
	w.Family(procVirtualMx, "The process's limit of virtual memory, in bytes.", TypeGauge)
	if limErr == nil {
		w.Sample(procVirtualMx, maxVM)
	}
}

type procStat struct{ utime, stime, starttime, vsize, rss uint64 }

// readStat reads /proc/self/stat (proc(5)): the fields after the
// command, which is in parentheses and may hold spaces and parentheses.
func readStat() (procStat, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, os.ErrInvalid
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, state
	if len(f) < 22 {
		return procStat{}, os.ErrInvalid
	}
	var s procStat
	for _, p := range []struct {
		field int
		v     *uint64
	}{{14, &s.utime}, {15, &s.stime}, {22, &s.starttime}, {23, &s.vsize}, {24, &s.rss}} {
		if *p.v, err = strconv.ParseUint(string(f[p.field-3]), 10, 64); err != nil {
			return procStat{}, err
		}
	}
	return s, nil
}

// readLimits reads the soft limits of open files and address space from
// /proc/self/limits; "unlimited" is the largest uint64, as before.
func readLimits() (fds, vm float64, err error) {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range bytes.Lines(b) {
		var v *float64
		rest, ok := bytes.CutPrefix(line, []byte("Max open files"))
		if ok {
			v = &fds
		} else if rest, ok = bytes.CutPrefix(line, []byte("Max address space")); ok {
			v = &vm
		} else {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, 0, os.ErrInvalid
		}
		if string(f[0]) == "unlimited" {
			*v = math.MaxUint64
		} else {
			n, err := strconv.ParseUint(string(f[0]), 10, 64)
			if err != nil {
				return 0, 0, err
			}
			*v = float64(n)
		}
		found++
	}
	if found != 2 {
		return 0, 0, os.ErrInvalid
	}
	return fds, vm, nil
}

// readNetDev sums the received and sent bytes of every interface in
// /proc/self/net/dev.
func readNetDev() (rx, tx float64, err error) {
	b, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return 0, 0, err
	}
	for line := range bytes.Lines(b) {
		_, counts, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue // the two header lines
		}
		f := bytes.Fields(counts)
		if len(f) < 16 {
			return 0, 0, os.ErrInvalid
		}
		r, err1 := strconv.ParseUint(string(f[0]), 10, 64)
		t, err2 := strconv.ParseUint(string(f[8]), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, os.ErrInvalid
		}
		rx += float64(r)
		tx += float64(t)
	}
	return rx, tx, nil
}

func openFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	// The directory's own descriptor is among them.
	return len(names) - 1, err
}

// bootTime is btime from /proc/stat: when the system booted, in seconds
// since 1970.
func bootTime() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			return float64(n), err
		}
	}
	return 0, os.ErrInvalid
}
