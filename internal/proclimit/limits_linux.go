package proclimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// Group enforces Limits on one command. The caller (the supervisor)
// makes it before starting the command's first process, starts that
// process between Enter and the function Enter returns, polls Check
// while the command runs, and calls Remove once every process is gone.
type Group struct {
	lim Limits
	// v2 is the command's cgroup v2 directory (made by the caller), ""
	// without one; v2Procs and v2Memory say which limits it enforces,
	// v2CPU whether it accounts CPU time.
	v2                       string
	v2Procs, v2Memory, v2CPU bool
	// v1 are cgroups made for the command in cgroup v1 hierarchies.
	v1 []v1Group
	// rlimits are what each process gets; nproc says RLIMIT_NPROC is
	// set too (see RlimitArgs).
	rlimits []rlimit
	nproc   bool
	reached []Kind
}

type v1Group struct {
	controller string
	dir        string // the command's cgroup
	orig       string // the cgroup this process was in
}

type rlimit struct {
	resource int
	cur, max uint64
}

// rlimitNproc is RLIMIT_NPROC, which package syscall does not name.
const rlimitNproc = 6

// New prepares the limits of one command. v2dir is the command's own
// cgroup v2 directory, "" when there is none; without cgroups, no cgroup
// v1 groups are made either (rlimits only). It never fails: what cannot
// be enforced one way falls back to the next (see the package doc);
// Enforced says what is.
func New(lim Limits, v2dir string, cgroups bool) *Group {
	if !cgroups {
		v2dir = ""
	}
	g := &Group{lim: lim, v2: v2dir}
	if v2dir != "" {
		ctl, _ := os.ReadFile(filepath.Join(v2dir, "cgroup.controllers"))
		have := strings.Fields(string(ctl))
		has := func(c string) bool {
			for _, h := range have {
				if h == c {
					return true
				}
			}
			return false
		}
		if lim.Procs > 0 && has("pids") {
			g.v2Procs = writeFile(filepath.Join(v2dir, "pids.max"), strconv.Itoa(lim.Procs)) == nil
		}
		if lim.Memory > 0 && has("memory") {
			g.v2Memory = writeFile(filepath.Join(v2dir, "memory.max"), strconv.FormatInt(lim.Memory, 10)) == nil
			if g.v2Memory {
				// Swap would let the command go on past the limit, only slower.
				_ = writeFile(filepath.Join(v2dir, "memory.swap.max"), "0")
			}
		}
		if _, err := os.Stat(filepath.Join(v2dir, "cpu.stat")); err == nil && lim.CPU > 0 {
			g.v2CPU = true
		}
	}
	if lim.Procs > 0 && !g.v2Procs && cgroups {
		if d, ok := newV1("pids"); ok {
			if writeFile(filepath.Join(d.dir, "pids.max"), strconv.Itoa(lim.Procs)) == nil {
				g.v1 = append(g.v1, d)
			} else {
				_ = syscall.Rmdir(d.dir)
			}
		}
	}
	if lim.Memory > 0 && !g.v2Memory && cgroups {
		if d, ok := newV1("memory"); ok {
			if writeFile(filepath.Join(d.dir, "memory.limit_in_bytes"), strconv.FormatInt(lim.Memory, 10)) == nil {
				// Memory plus swap, where swap is accounted.
				_ = writeFile(filepath.Join(d.dir, "memory.memsw.limit_in_bytes"), strconv.FormatInt(lim.Memory, 10))
				g.v1 = append(g.v1, d)
			} else {
				_ = syscall.Rmdir(d.dir)
			}
		}
	}
	if lim.Memory > 0 && !g.cgroupMemory() {
		// RLIMIT_DATA, not RLIMIT_AS: it counts what a process allocates
		// (heap, writable private mappings), not address space reserved
		// and never touched, which V8, the JVM and Go reserve by the
		// gigabyte. With a memory cgroup it is left off, so that a hog
		// meets the cgroup's limit, which is reported, first.
		m := uint64(lim.Memory)
		g.rlimits = append(g.rlimits, rlimit{syscall.RLIMIT_DATA, m, m})
	}
	if lim.CPU > 0 {
		s := uint64((lim.CPU + time.Second - 1) / time.Second)
		if g.v2CPU {
			// The command's total is watched (Check); the per-process
			// rlimit is only the second line, a little later.
			s += 2
		}
		// SIGXCPU at the soft limit, SIGKILL at the hard one for a
		// process that ignores it.
		g.rlimits = append(g.rlimits, rlimit{syscall.RLIMIT_CPU, s, s + 5})
	}
	g.nproc = lim.Procs > 0 && !g.cgroupProcs() && os.Geteuid() != 0
	return g
}

func (g *Group) cgroupProcs() bool {
	return g.v2Procs || g.hasV1("pids")
}

func (g *Group) cgroupMemory() bool {
	return g.v2Memory || g.hasV1("memory")
}

func (g *Group) hasV1(c string) bool {
	for _, d := range g.v1 {
		if d.controller == c {
			return true
		}
	}
	return false
}

// Enforced says how each limit is enforced for this command, and which
// are not.
func (g *Group) Enforced() Enforcement {
	var e Enforcement
	switch {
	case g.lim.Procs <= 0:
	case g.v2Procs:
		e.Procs = "cgroup v2 pids"
	case g.hasV1("pids"):
		e.Procs = "cgroup v1 pids"
	case g.nproc:
		e.Procs = "RLIMIT_NPROC (counts all processes of the user), and a polled count"
	default:
		e.Procs = ""
		e.Missing = append(e.Missing, "processes (no writable pids cgroup, and root is exempt from RLIMIT_NPROC: only a polled count stops a command, which a fork bomb outruns between polls)")
	}
	switch {
	case g.lim.Memory <= 0:
	case g.v2Memory:
		e.Memory = "cgroup v2 memory"
	case g.hasV1("memory"):
		e.Memory = "cgroup v1 memory"
	default:
		e.Memory = "RLIMIT_DATA per process"
	}
	switch {
	case g.lim.CPU <= 0:
	case g.v2CPU:
		e.CPU = "cgroup v2 CPU accounting, and RLIMIT_CPU per process"
	default:
		e.CPU = "RLIMIT_CPU per process"
	}
	return e
}

// Enter moves this process into the command's cgroup v1 groups, so that
// the next process it starts starts in them; the returned function moves
// it back out (the limits must not bind this process while it
// supervises: the pids limit counts its threads). Call it with nothing
// else of this process forking meanwhile.
func (g *Group) Enter() (leave func(), err error) {
	for i, d := range g.v1 {
		if err := writeFile(filepath.Join(d.dir, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			g.leave(g.v1[:i])
			return nil, fmt.Errorf("entering the command's %s cgroup: %w", d.controller, err)
		}
	}
	return func() { g.leave(g.v1) }, nil
}

func (g *Group) leave(ds []v1Group) {
	for _, d := range ds {
		_ = writeFile(filepath.Join(d.orig, "cgroup.procs"), strconv.Itoa(os.Getpid()))
	}
}

// RlimitArgs are the arguments that give the command's first process its
// rlimits: the supervisor starts it as itself with these (see
// ApplyRlimitArg), which sets them and then executes the command. Not set
// in the supervisor before the fork: they would bind it too (a Go
// runtime under a small RLIMIT_DATA cannot grow its heap, and
// RLIMIT_NPROC, counted over all the user's processes, would keep it
// from making a thread once the command filled it); and not set from
// outside after the fork (prlimit), which races with the command's first
// forks on a loaded machine. As an ordinary user without a pids cgroup,
// RLIMIT_NPROC is what the user runs now plus the limit (and a margin).
func (g *Group) RlimitArgs() []string {
	rs := append([]rlimit(nil), g.rlimits...)
	if g.nproc {
		// A little above the limit, which the polled count (Check)
		// enforces with a message: RLIMIT_NPROC counts the supervisor's
		// threads and the user's other processes too, so the command
		// alone might never reach the limit exactly.
		n := uint64(userTasks(os.Getuid()) + g.lim.Procs + nprocMargin)
		rs = append(rs, rlimit{rlimitNproc, n, n})
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s%d,%d,%d", argRlimit, r.resource, r.cur, r.max))
	}
	return out
}

const argRlimit = "--rlimit="

// nprocMargin is how far above the process limit RLIMIT_NPROC is set.
const nprocMargin = 16

// ApplyRlimitArg sets on this process the rlimit a (one of RlimitArgs);
// ok is false for an argument that is not one.
func ApplyRlimitArg(a string) (ok bool, err error) {
	v, found := strings.CutPrefix(a, argRlimit)
	if !found {
		return false, nil
	}
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return true, fmt.Errorf("bad rlimit %q", a)
	}
	res, err1 := strconv.Atoi(f[0])
	cur, err2 := strconv.ParseUint(f[1], 10, 64)
	hi, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || cur > hi {
		return true, fmt.Errorf("bad rlimit %q", a)
	}
	if err := setrlimit(0, rlimit{res, cur, hi}); err != nil {
		return true, fmt.Errorf("setting rlimit %d: %w", res, err)
	}
	return true, nil
}

// Check is polled while the command runs: it returns the limit the
// command reached that must stop it now (the process limit: the command
// cannot work on without forking, and a fork bomb must not wait for the
// next; the CPU time of the whole command), or "".
func (g *Group) Check() Kind {
	if g.lim.Procs > 0 && !g.cgroupProcs() {
		// No cgroup counts for us: count the command's processes (below
		// this process, the supervisor). As an ordinary user RLIMIT_NPROC
		// holds them below the limit and this says why forks failed; as
		// root it is all there is, and a fork bomb may go past the limit
		// between two polls before it is stopped.
		if countBelow(os.Getpid(), g.lim.Procs) >= g.lim.Procs {
			return g.reach(KindProcs)
		}
	}
	if g.lim.Procs > 0 {
		if g.v2Procs && eventCount(filepath.Join(g.v2, "pids.events"), "max") > 0 {
			return g.reach(KindProcs)
		}
		for _, d := range g.v1 {
			if d.controller == "pids" && eventCount(filepath.Join(d.dir, "pids.events"), "max") > 0 {
				return g.reach(KindProcs)
			}
		}
	}
	if g.v2CPU && g.lim.CPU > 0 {
		if us := eventCount(filepath.Join(g.v2, "cpu.stat"), "usage_usec"); us > 0 && time.Duration(us)*time.Microsecond >= g.lim.CPU {
			return g.reach(KindCPU)
		}
	}
	return ""
}

func (g *Group) reach(k Kind) Kind {
	for _, r := range g.reached {
		if r == k {
			return k
		}
	}
	g.reached = append(g.reached, k)
	return k
}

// Reached lists the limits the command reached: what Check stopped it
// for, and a process the memory cgroup's OOM killer ended. Call it once
// the command's processes are gone.
func (g *Group) Reached() []Kind {
	if g.lim.Memory > 0 {
		oom := 0
		if g.v2Memory {
			oom = eventCount(filepath.Join(g.v2, "memory.events"), "oom_kill")
		}
		for _, d := range g.v1 {
			if d.controller == "memory" {
				oom += eventCount(filepath.Join(d.dir, "memory.oom_control"), "oom_kill")
			}
		}
		if oom > 0 {
			g.reach(KindMemory)
		}
	}
	return append([]Kind(nil), g.reached...)
}

// Kill sends SIGKILL to every process in the command's cgroup v1
// groups (its cgroup v2, if any, the caller kills).
func (g *Group) Kill() {
	for _, d := range g.v1 {
		b, err := os.ReadFile(filepath.Join(d.dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// Remove deletes the command's cgroup v1 groups, once they are empty
// (the kernel may take a moment to notice the last member is gone).
func (g *Group) Remove() {
	for _, d := range g.v1 {
		for range 100 {
			if err := syscall.Rmdir(d.dir); !errors.Is(err, syscall.EBUSY) {
				break
			}
			g.Kill()
			time.Sleep(10 * time.Millisecond)
		}
	}
	g.v1 = nil
}

// newV1 makes a cgroup for one command under this process's cgroup in
// the v1 hierarchy of controller, if that is mounted and writable.
func newV1(controller string) (v1Group, bool) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return v1Group{}, false
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return v1Group{}, false
	}
	orig, ok := cgroupV1Dir(string(cg), string(mi), controller)
	if !ok {
		return v1Group{}, false
	}
	dir, err := os.MkdirTemp(orig, "agentd-run-")
	if err != nil {
		return v1Group{}, false
	}
	return v1Group{controller: controller, dir: dir, orig: orig}, true
}

// cgroupV1Dir is the directory of this process's cgroup in the v1
// hierarchy of controller, from /proc/self/cgroup ("8:pids:/path") and
// mountinfo.
func cgroupV1Dir(cgroups, mountinfo, controller string) (string, bool) {
	path, found := "", false
	for _, line := range strings.Split(cgroups, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[0] == "0" {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == controller {
				path, found = f[2], true
			}
		}
	}
	if !found || !strings.HasPrefix(path, "/") || strings.Contains(path, "/..") {
		return "", false
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup ") {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 {
			continue
		}
		hasCtl := false
		for _, o := range strings.Split(sf[2], ",") {
			if o == controller {
				hasCtl = true
			}
		}
		if !hasCtl {
			continue
		}
		if dir, ok := underMount(path, UnescapeMount(pf[3]), UnescapeMount(pf[4])); ok {
			return dir, true
		}
	}
	return "", false
}

// underMount is where cgroup path lies under a cgroup mount of the
// hierarchy's root at mount: false when the mount shows another part of
// the hierarchy.
func underMount(path, root, mount string) (string, bool) {
	rel := path
	if root != "/" {
		r, ok := strings.CutPrefix(path, root)
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			return "", false
		}
		rel = r
	}
	return filepath.Join(mount, rel), true
}

// Cgroup2Dir finds this process's cgroup v2 directory: where a command's
// own cgroup goes.
func Cgroup2Dir() (string, bool) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	return Cgroup2DirOf(string(cg), string(mi))
}

// Cgroup2DirOf is the directory of the cgroup v2 named in a
// /proc/<pid>/cgroup ("0::/path") under the cgroup2 mount point found in
// mountinfo.
func Cgroup2DirOf(cgroups, mountinfo string) (string, bool) {
	path := ""
	found := false
	for _, line := range strings.Split(cgroups, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = p, true
			break
		}
	}
	if !found || !strings.HasPrefix(path, "/") || strings.Contains(path, "/..") {
		return "", false // none, or outside our cgroup namespace's view
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		if dir, ok := underMount(path, UnescapeMount(f[3]), UnescapeMount(f[4])); ok {
			return dir, true
		}
	}
	return "", false
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// eventCount reads the number after key in a "key value" file such as
// pids.events; 0 when it is not there.
func eventCount(path, key string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// userTasks counts the tasks (threads) running as uid, which is what
// RLIMIT_NPROC compares with.
func userTasks(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	want := strconv.Itoa(uid)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real string
		threads := 0
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if real == want {
			n += threads
		}
	}
	return n
}

func setrlimit(pid int, r rlimit) error {
	lim := [2]uint64{r.cur, r.max}
	_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(r.resource),
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(v))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Probe says how lim would be enforced for a command started now, with
// or without cgroups, by making (and removing) the cgroups a command
// would get, under base ("" for this process's cgroup v2).
func Probe(lim Limits, cgroups bool, base string) Enforcement {
	dir := ""
	ok := base != ""
	if !ok {
		base, ok = Cgroup2Dir()
	}
	if ok && cgroups {
		if d, err := os.MkdirTemp(base, "agentd-probe-"); err == nil {
			dir = d
			defer syscall.Rmdir(d)
		}
	}
	g := New(lim, dir, cgroups)
	defer g.Remove()
	return g.Enforced()
}

// physicalMemory is the machine's RAM in bytes, 0 if unknown.
func physicalMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// countBelow counts the processes below root, from the children files of
// each of their threads, stopping at limit.
func countBelow(root, limit int) int {
	n := 0
	queue := []int{root}
	for len(queue) > 0 && n < limit {
		p := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					n++
					queue = append(queue, c)
				}
			}
		}
	}
	return n
}
