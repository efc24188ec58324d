package tool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentd-dev/agentd/internal/proclimit"
)

// supervisorSupported: subreapers, parent-death signals and cgroups are
// Linux's.
const supervisorSupported = true

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, <linux/prctl.h>

// killPass is how often a stopping supervisor sweeps its subtree again
// for processes forked while it was killing.
const killPass = 10 * time.Millisecond

// limitPoll is how often a supervisor looks whether its run reached a
// limit that stops it (see proclimit.Group.Check).
const limitPoll = 50 * time.Millisecond

// directAttr is how a shell started without a supervisor runs: in its own
// process group (so abort kills what stayed in it), and killed with
// agentd.
func directAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// supervised is agentd's handle on one run's supervisor.
type supervised struct {
	ctl      *os.File    // agentd's end of the control socket
	stopped  atomic.Bool // stop was called before the supervisor exited
	stopOnce sync.Once
	read     chan struct{} // closed once the report was read (or cannot be)
	gone     chan struct{} // closed once the supervisor has been reaped
	waitErr  error         // how it exited; read after gone
}

// stop tells the supervisor to kill everything and exit.
func (r *supervised) stop() {
	r.stopped.Store(true)
	r.release()
}

// release closes our end of the socket; after the supervisor exited it
// only frees the descriptor.
func (r *supervised) release() { r.stopOnce.Do(func() { r.ctl.Close() }) }

// startSupervised starts `Supervisor... shell -c command` with stdout and
// stderr on out. The returned channel receives the shell's exit once, as
// soon as it is known, or, if the run was stopped first, once the
// supervisor is gone. startErr says why nothing could start; the shell's
// own failure to start arrives on the channel.
func startSupervised(env Env, argv []string, out *os.File, keep bool) (stop func(), exited <-chan shellExit, startErr string) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Sprintf("Cannot start command: %v", err)
	}
	// Non-blocking, so that closing our end (stop) interrupts the read of
	// the report below.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, fmt.Sprintf("Cannot start command: %v", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor-control"), os.NewFile(uintptr(fds[1]), "supervisor-control")

	args := append([]string{}, env.Supervisor[1:]...)
	if keep {
		args = append(args, KeepFlag)
	}
	args = append(args, argv...)
	cmd := exec.Command(env.Supervisor[0], args...)
	cmd.Dir = env.Cwd
	cmd.Env = env.Environ
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	// Its own process group keeps a terminal's ^C (meant for agentd) from
	// reaching the command; SIGTERM at agentd's death lets it clean up.
	// (The kernel sends it when the thread that started the supervisor
	// exits, and Go ends a thread only when a goroutine locked to it
	// returns, which nothing in agentd does. The socket is what agentd
	// relies on; the signal is a second line.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}

	r := &supervised{ctl: ours, read: make(chan struct{}), gone: make(chan struct{})}
	// Tracked before it starts, so a Scope closing meanwhile cannot miss it.
	untrack, err := env.Scope.track(r.stop)
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, nil, fmt.Sprintf("Cannot start command: %v", err)
	}
	err = cmd.Start()
	// Only the supervisor may hold its end: its exit must end our read.
	theirs.Close()
	if err != nil {
		untrack()
		ours.Close()
		return nil, nil, fmt.Sprintf("Cannot start the process supervisor %s: %v", env.Supervisor[0], err)
	}
	// The report is read first: the supervisor's waiter below holds our
	// end open until it has been, and may run right here.
	ch := make(chan shellExit, 1)
	go func() {
		st, ok := readStatus(ours)
		close(r.read)
		switch {
		case ok && st.startErr != "":
			// Report it once the supervisor has cleaned up and exited.
			<-r.gone
		case !ok && r.stopped.Load():
			<-r.gone
			st = shellExit{failure: "stopped: its session was closed"}
		case !ok:
			<-r.gone
			st = shellExit{failure: fmt.Sprintf("the process supervisor ended without reporting the command's status (%v)", r.waitErr)}
		}
		ch <- st
	}()
	env.Scope.goWait(func() {
		r.waitErr = cmd.Wait()
		close(r.gone)
		// Closing our end before the report is read would lose it; the
		// supervisor's exit has closed its end, so the read ends soon.
		<-r.read
		r.release()
		untrack()
	})
	return r.stop, ch, ""
}

// Supervise is the supervisor's main: args are what followed
// SuperviseCommand. It returns the process exit code. ctx ending (the
// caller's SIGTERM handling) stops the run like agentd's death does.
func Supervise(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == execFlag {
		return execLimited(args[1:])
	}
	useCgroup, keep, cgroupBase := true, false, ""
	var lim proclimit.Limits
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		a := args[0]
		if a == NoCgroupFlag {
			useCgroup = false
		} else if a == KeepFlag {
			keep = true
		} else if b, ok := strings.CutPrefix(a, CgroupBaseFlag); ok {
			cgroupBase = b
		} else if ok, err := lim.ParseArg(a); !ok || err != nil {
			fmt.Fprintf(os.Stderr, "agentd %s: unknown argument %q (only agentd runs this)\n", SuperviseCommand, a)
			return 2
		}
		args = args[1:]
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "agentd %s: only agentd runs this, with a command and its control socket on fd 3\n", SuperviseCommand)
		return 2
	}
	syscall.CloseOnExec(3)
	ctl := os.NewFile(3, "agentd-control")
	report := func(line string) { _, _ = ctl.Write([]byte(line + "\n")) }

	// Before anything can fork: orphans of the run must come to us.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		report("error cannot become a child subreaper: " + e.Error())
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	// agentd may have died before we got here; the parent-death signal
	// does not cover that (os/exec's child checks it before exec, but
	// not after), the socket does: its read below returns at once.

	var cg *runCgroup
	if useCgroup {
		cg = newRunCgroup(cgroupBase)
	}
	v2dir := ""
	if cg != nil {
		v2dir = cg.dir
	}
	limits := proclimit.New(lim, v2dir, useCgroup)
	defer func() { limits.Remove() }()
	pid, err := forkShell(args, cg, limits)
	if err != nil && cg != nil {
		// The system let us make a cgroup but not start into it.
		limits.Remove()
		cg.remove()
		cg = nil
		limits = proclimit.New(lim, "", useCgroup)
		pid, err = forkShell(args, nil, limits)
	}
	if err != nil {
		report("error " + err.Error())
		return 1
	}
	// The command holds the output now; agentd sees it end when the last
	// of the command's processes closes it, not when we exit.
	if null, err := syscall.Open(os.DevNull, syscall.O_RDWR|syscall.O_CLOEXEC, 0); err == nil {
		_ = syscall.Dup3(null, 1, 0)
		_ = syscall.Dup3(null, 2, 0)
		syscall.Close(null)
	}

	stopC := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopC) }) }
	go func() {
		// agentd writes nothing: end of file (agentd closed it, or died)
		// means stop.
		var b [64]byte
		for {
			if _, err := ctl.Read(b[:]); err != nil {
				stop()
				return
			}
		}
	}()
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
		}
		stop()
	}()

	statusC := make(chan syscall.WaitStatus, 1)
	allGone := make(chan struct{})
	go reapAll(pid, statusC, allGone)

	// The limits are watched while the run goes on: reaching the process
	// limit or the CPU time of the whole run stops it.
	poll := time.NewTicker(limitPoll)
	defer poll.Stop()
	var tick <-chan time.Time
	sc := stopC
	var held *syscall.WaitStatus // the shell's status, reported once all is gone
	reported := false
	for {
		select {
		case ws := <-statusC:
			if keep && sc != nil {
				// Its background jobs go on: the call returns now.
				report(statusLine(ws))
				reported = true
				continue
			}
			// Everything the command started ends with it; the status
			// is reported once it has.
			held = &ws
			stop()
		case <-poll.C:
			if limits.Check() != "" {
				stop()
			}
		case <-sc:
			sc = nil
			killSubtree(cg, limits)
			t := time.NewTicker(killPass)
			defer t.Stop()
			tick = t.C
		case <-tick:
			killSubtree(cg, limits)
		case <-allGone:
			if held == nil {
				select {
				case ws := <-statusC:
					held = &ws
				default:
				}
			}
			// Cleaned up before the report: when the call returns,
			// nothing of the run is left but this process, exiting.
			reached := limits.Reached()
			limits.Remove()
			if cg != nil {
				cg.remove()
			}
			if held != nil && !reported {
				for _, k := range reached {
					report("limit " + lim.Reached(k))
				}
				report(statusLine(*held))
			}
			return 0
		}
	}
}

// forkShell starts the shell (args) with our stdio, in cg when given,
// under limits.
func forkShell(args []string, cg *runCgroup, limits *proclimit.Group) (int, error) {
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, cg.fd
	}
	if rl := limits.RlimitArgs(); len(rl) > 0 {
		// The shell's own failure to start is reported as such, not as
		// the exit of the process that sets the rlimits.
		if err := syscall.Access(args[0], 1 /* X_OK */); err != nil {
			return 0, err
		}
		// This very executable, even if its file was replaced since.
		wrapped := append([]string{"/proc/self/exe", SuperviseCommand, execFlag}, rl...)
		args = append(append(wrapped, "--"), args...)
	}
	leave, err := limits.Enter()
	if err != nil {
		return 0, err
	}
	defer leave()
	return syscall.ForkExec(args[0], args, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: sys})
}

// execFlag, first after SuperviseCommand, makes the supervisor's
// executable the command's first process instead: it sets the rlimits
// that follow on itself and executes the command after "--", which
// inherits them from its first instruction on (see
// proclimit.Group.RlimitArgs).
const execFlag = "--exec-limited"

// execLimited is that process: it returns only when it fails.
func execLimited(args []string) int {
	for len(args) > 0 && args[0] != "--" {
		if ok, err := proclimit.ApplyRlimitArg(args[0]); !ok || err != nil {
			fmt.Fprintf(os.Stderr, "agentd %s %s: %q: %v (only agentd runs this)\n", SuperviseCommand, execFlag, args[0], err)
			return 126
		}
		args = args[1:]
	}
	if len(args) < 2 {
		fmt.Fprintf(os.Stderr, "agentd %s %s: no command (only agentd runs this)\n", SuperviseCommand, execFlag)
		return 126
	}
	err := syscall.Exec(args[1], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "agentd: cannot run %s: %v\n", args[1], err)
	return 127
}

// reapAll reaps every child, the shell and orphans handed to us alike,
// sends the shell's status, and closes allGone when no child is left.
func reapAll(shell int, statusC chan<- syscall.WaitStatus, allGone chan<- struct{}) {
	defer close(allGone)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return // ECHILD: nothing left
		}
		if pid == shell {
			statusC <- ws
		}
	}
}

// killSubtree SIGKILLs the run's cgroup and every descendant of this
// process. Anything forked meanwhile is caught by the next pass.
func killSubtree(cg *runCgroup, limits *proclimit.Group) {
	if cg != nil {
		cg.kill()
	}
	limits.Kill()
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descendants lists the processes below root, from each process's parent
// in /proc (which, unlike /proc/<pid>/task/*/children, every kernel has).
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// statFields are the fields of /proc/<pid>/stat after the command name
// (which may hold spaces and parentheses): [0] is the state (field 3).
func statFields(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

func parentOf(pid int) (int, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// processStart returns pid's start time (clock ticks since boot, field
// 22 of /proc/<pid>/stat) and whether pid is alive.
func processStart(pid int) (uint64, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, true
	}
	return start, true
}

// runCgroup is a cgroup v2 holding one run: cgroup.kill ends all of it at
// once, forks in flight included.
type runCgroup struct {
	dir string
	fd  int
}

// newRunCgroup makes a cgroup for a run under base (our own when ""; see
// proclimit.PrepareCgroup2), or returns nil
// when there is no writable cgroup v2 (cgroup v1 only, a read-only
// /sys/fs/cgroup in a container, no delegation to this user).
func newRunCgroup(base string) *runCgroup {
	if base == "" {
		var ok bool
		if base, ok = proclimit.Cgroup2Dir(); !ok {
			return nil
		}
	}
	dir, err := os.MkdirTemp(base, "agentd-run-")
	if err != nil {
		return nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = syscall.Rmdir(dir)
		return nil
	}
	return &runCgroup{dir: dir, fd: fd}
}

func (c *runCgroup) kill() {
	if f, err := os.OpenFile(filepath.Join(c.dir, "cgroup.kill"), os.O_WRONLY, 0); err == nil {
		_, werr := f.Write([]byte("1"))
		f.Close()
		if werr == nil {
			return
		}
	}
	// Before Linux 5.14 there is no cgroup.kill: signal each member.
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// remove deletes the (empty) cgroup; the kernel may take a moment to
// notice the last member is gone.
func (c *runCgroup) remove() {
	syscall.Close(c.fd)
	for range 100 {
		if err := syscall.Rmdir(c.dir); !errors.Is(err, syscall.EBUSY) {
			return
		}
		time.Sleep(killPass)
	}
}

// goWait runs wait on a goroutine the Scope owns (Close waits for it);
// wait must return once the run's kill, registered with track, has been
// called. Once the Scope is closed, wait runs in the caller instead:
// Close has killed the run and would not wait for a goroutine added now.
func (s *Scope) goWait(wait func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		wait()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		wait()
	}()
}

// The control socket carries one status line from the supervisor: "exit
// <code>", "signal <number>" or "error <text>" (the shell could not
// start), after a line "limit <text>" for each limit the run reached.
func statusLine(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + strconv.Itoa(int(ws.Signal()))
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// readStatus reads the supervisor's report; ok is false when it sent
// nothing (it died, or was told to stop first).
func readStatus(r io.Reader) (st shellExit, ok bool) {
	br := bufio.NewReader(r)
	var limits []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return shellExit{}, false
		}
		kind, arg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		switch kind {
		case "limit":
			// Before the status: a limit the run reached.
			limits = append(limits, arg)
			continue
		case "exit":
			if n, err := strconv.Atoi(arg); err == nil {
				return shellExit{code: n, limits: limits}, true
			}
		case "signal":
			if n, err := strconv.Atoi(arg); err == nil {
				return shellExit{signaled: true, signal: syscall.Signal(n), limits: limits}, true
			}
		case "error":
			return shellExit{startErr: arg}, true
		}
		return shellExit{failure: fmt.Sprintf("unexpected report from the process supervisor: %q", line)}, true
	}
}
