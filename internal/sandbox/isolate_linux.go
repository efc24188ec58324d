package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Why namespaces. Landlock decides what a command may write and connect
// to, but it cannot take away reading under a tree it lets read, and it
// leaves /proc as it is: a confined command could read agentd's
// /proc/<pid>/environ and cmdline (the server token, provider keys) and
// every file of agentd's data and config directories. So a confined
// command runs in a PID namespace of its own, with a /proc of its own in
// a mount namespace of its own, where agentd's process does not exist
// and the paths it must not read (Policy.Hidden) are covered by empty
// ones.
//
// The helper runs in two stages. The first (Main, in agentd's
// namespaces) starts the second in new namespaces: as root a PID and a
// mount namespace; for any other user, and where root may not make them
// (a container without CAP_SYS_ADMIN), a user namespace as well that maps
// the user to itself. The second stage is the namespace's first process
// (its init, pid 1): it sets up the mounts, applies Landlock, drops what
// root could use to get around both, starts the command, reports the
// command's exit status to the first stage, which exits with it (so the
// bash call returns when the shell does), and stays to reap what the
// command left running. When it exits or is killed, the kernel kills
// everything left in the namespace: killing it ends the whole command.
//
// A later step (resource limits) belongs in initMain, after isolate and
// before the command is started, or around startIsolated.

// statusFD is where the second stage finds the pipe to report on, and
// argsFD the pipe it reads its arguments from: on its command line they
// would show other sessions' workspaces to the command (pid 1's cmdline
// is readable in its namespace).
const (
	statusFD = 3
	argsFD   = 4
)

// nsAttr is how the second stage is started: in a new PID and mount
// namespace, and with userNS in a user namespace mapping the caller's
// ids to themselves, keeping CAP_SYS_ADMIN (in that namespace) across
// the exec so the second stage can mount.
func nsAttr(userNS bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	if userNS {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
		a.AmbientCaps = []uintptr{capSysAdmin}
	}
	return a
}

// startIsolated starts the command mk makes in new namespaces (see
// nsAttr): root tries without a user namespace first.
func startIsolated(mk func() *exec.Cmd) (*exec.Cmd, error) {
	if os.Geteuid() == 0 {
		cmd := mk()
		cmd.SysProcAttr = nsAttr(false)
		err := cmd.Start()
		if err == nil || !errors.Is(err, syscall.EPERM) {
			return cmd, err
		}
	}
	cmd := mk()
	cmd.SysProcAttr = nsAttr(true)
	return cmd, cmd.Start()
}

// ProbeIsolation checks that confined commands can be isolated here (see
// Policy.NoIsolation), by starting exe (agentd, handling Command) as the
// helper does and setting up the mounts of an empty policy.
func ProbeIsolation(exe string) error {
	var out bytes.Buffer
	cmd, err := startIsolated(func() *exec.Cmd {
		c := exec.Command(exe, Command, probeFlag)
		c.Stdout, c.Stderr = &out, &out
		return c
	})
	if err != nil {
		return fmt.Errorf("cannot give commands PID and mount namespaces of their own: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("cannot set up a command's namespaces: %s (%w)", strings.TrimSpace(out.String()), err)
	}
	return nil
}

// probeMain is the second stage of ProbeIsolation.
func probeMain(stderr io.Writer) int {
	if err := isolate(Policy{}); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// runIsolated is the first stage: it starts the second with args (what
// followed Command) in new namespaces, waits for the command's exit
// status and exits with it.
func runIsolated(args []string, stderr io.Writer) int {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	argsR, argsW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	cmd, err := startIsolated(func() *exec.Cmd {
		c := exec.Command("/proc/self/exe", Command, initFlag)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		c.ExtraFiles = []*os.File{w, argsR} // statusFD, argsFD
		return c
	})
	w.Close()
	argsR.Close()
	if err != nil {
		argsW.Close()
		fmt.Fprintf(stderr, "agentd sandbox: cannot give the command PID and mount namespaces of its own (%v); the command was not run\n", err)
		return ExitRefused
	}
	// No argument holds a NUL. A failed write leaves the second stage
	// without its arguments, which it refuses.
	_, _ = argsW.WriteString(strings.Join(args, "\x00"))
	argsW.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if rerr == nil {
		// The command is done; what it left running stays with the
		// second stage, which the process supervisor now reaps.
		return exitLike(strings.TrimSuffix(line, "\n"))
	}
	// The second stage ended without a report: it refused (and said why
	// on stderr) or was killed.
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return dieBy(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v\n", err)
		return ExitRefused
	}
	return 0
}

// statusLine is how the second stage reports the command's end.
func statusLine(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + strconv.Itoa(int(ws.Signal())) + "\n"
	}
	return "exit " + strconv.Itoa(ws.ExitStatus()) + "\n"
}

// exitLike ends the first stage as statusLine says the command ended.
func exitLike(line string) int {
	kind, arg, _ := strings.Cut(line, " ")
	n, err := strconv.Atoi(arg)
	switch {
	case err != nil:
		return ExitRefused
	case kind == "signal":
		return dieBy(syscall.Signal(n))
	}
	return n
}

// dieBy ends this process by sig, as the command was ended, so whoever
// waits for it sees the same status. The Go runtime handles most signals
// itself, so the default action is restored first. It returns (with a
// shell's 128+n) only for a signal whose default is not to terminate.
func dieBy(sig syscall.Signal) int {
	// struct sigaction with SIG_DFL (0) and nothing else set.
	var sa [4]uintptr
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	runtime.LockOSThread()
	// To this thread, so it is delivered on the way back from the call.
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
	return 128 + int(sig)
}

// readInitArgs reads the second stage's arguments from argsFD.
func readInitArgs() ([]string, error) {
	syscall.CloseOnExec(argsFD)
	f := os.NewFile(argsFD, "agentd-sandbox-args")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\x00"), nil
}

// initMain is the second stage, pid 1 of the command's namespace.
func initMain(p Policy, argv []string, stderr io.Writer) int {
	syscall.CloseOnExec(statusFD)
	status := os.NewFile(statusFD, "agentd-sandbox-status")
	if os.Getpid() != 1 || status == nil {
		fmt.Fprintf(stderr, "agentd %s: the second stage runs only as agentd starts it\n", Command)
		return 2
	}
	// Taken before the mounts: the same path then leads through them, to
	// the workspace bound back over a hidden directory if it is one.
	cwd, err := syscall.Getwd()
	if err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	if err := isolate(p); err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	if err := Restrict(p); err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	if err := dropPrivileges(); err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: %v; the command was not run\n", err)
		return ExitRefused
	}
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Dir: cwd, Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(stderr, "agentd sandbox: cannot run %s: %v\n", argv[0], err)
		return ExitRefused
	}
	// The command's output ends when the command's processes close it,
	// not when this one exits.
	if null, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0); err == nil {
		for fd := range 3 {
			_ = syscall.Dup3(null, fd, 0)
		}
		syscall.Close(null)
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 0 // ECHILD: nothing is left in the namespace
		}
		if got == pid {
			_, _ = status.WriteString(statusLine(ws))
			status.Close()
		}
	}
}

// Capabilities (linux/capability.h).
const (
	capDacReadSearch = 2
	capSysModule     = 16
	capSysRawio      = 17
	capSysPtrace     = 19
	capSysAdmin      = 21
	capSysBoot       = 22
	capMknod         = 27
	capMacOverride   = 32
	capMacAdmin      = 33
	capSyslog        = 34
	capPerfmon       = 38
	capBPF           = 39
)

// rootOnlyEscapes are what a command running as root could use to get
// past the mounts and Landlock: open_by_handle_at (DAC_READ_SEARCH) reads
// any file by its handle, hidden or not; a block device made with mknod
// reads the disk under them; modules, raw I/O, BPF and ptrace reach the
// kernel or other processes. They leave the bounding set, so nothing the
// command executes has them.
var rootOnlyEscapes = []uintptr{capDacReadSearch, capSysModule, capSysRawio, capSysPtrace, capSysAdmin,
	capSysBoot, capMknod, capMacOverride, capMacAdmin, capSyslog, capPerfmon, capBPF}

// prctl options (linux/prctl.h).
const (
	prSetDumpable        = 4
	prCapbsetDrop        = 24
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
)

// dropPrivileges keeps what this process holds from the command: the
// capabilities nsAttr kept for the mounts (ambient ones are inherited
// across exec), the escapes above, and, by making this process not
// dumpable, its /proc files and ptrace (it holds more capabilities than
// the command it starts).
func dropPrivileges() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", e)
	}
	if err := llsys.AllThreadsPrctl(prCapAmbient, prCapAmbientClearAll, 0, 0, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if os.Geteuid() != 0 {
		// The command runs as this user with no capabilities at all.
		return nil
	}
	for _, c := range rootOnlyEscapes {
		// EINVAL: a capability this kernel does not know.
		if err := llsys.AllThreadsPrctl(prCapbsetDrop, c, 0, 0, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	return nil
}

// mountOp is one step of isolate: cover path (hide) or bring the
// directory fd back at path (show).
type mountOp struct {
	path string
	hide bool
	fd   int
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// isolate sets up the mounts of the command's namespace: none of them
// propagates out; Hidden paths are covered by an empty read-only
// directory (or /dev/null for a file); Writable directories under them
// are brought back; /dev holds only the harmless devices, so no disk can
// be read under the mounts; and /proc shows only this namespace.
func isolate(p Policy) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the command's mounts private: %w", err)
	}
	var ops []mountOp
	var fds []int
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	open := func(path string, flags int) (int, error) {
		fd, err := syscall.Open(path, unix.O_PATH|syscall.O_CLOEXEC|flags, 0)
		if err == nil {
			fds = append(fds, fd)
		}
		return fd, err
	}
	var shown []string
	for _, d := range p.Writable {
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue // nothing to keep
		}
		fd, err := open(r, syscall.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("keeping %s visible: %w", r, err)
		}
		shown = append(shown, r)
		ops = append(ops, mountOp{path: r, fd: fd})
	}
	for _, h := range p.Hidden {
		r, err := filepath.EvalSymlinks(h)
		if err != nil || slices.Contains(shown, r) || r == "/" {
			continue // missing, or the session's own
		}
		ops = append(ops, mountOp{path: r, hide: true})
	}
	// Outer paths first; at the same depth, hiding before showing.
	slices.SortStableFunc(ops, func(a, b mountOp) int {
		if d := depth(a.path) - depth(b.path); d != 0 {
			return d
		}
		if a.hide != b.hide {
			if a.hide {
				return -1
			}
			return 1
		}
		return 0
	})
	null, err := open("/dev/null", 0)
	if err != nil {
		return fmt.Errorf("opening /dev/null: %w", err)
	}
	var covers []string
	for _, op := range ops {
		if op.hide {
			var st syscall.Stat_t
			if err := syscall.Lstat(op.path, &st); err != nil {
				continue // under what is hidden already
			}
			if err := cover(op.path, st, null); err != nil {
				return err
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				covers = append(covers, op.path)
			}
			continue
		}
		if err := showAt(op.path, op.fd); err != nil {
			return err
		}
	}
	for _, c := range covers {
		if err := syscall.Mount("", c, "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("making the cover of %s read-only: %w", c, err)
		}
	}
	if err := minimalDev(open); err != nil {
		return err
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting a /proc of the command's own: %w", err)
	}
	return nil
}

// cover hides path (st is its Lstat) under an empty directory, or, for
// anything else, /dev/null (reads find nothing).
func cover(path string, st syscall.Stat_t, null int) error {
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		if err := syscall.Mount("tmpfs", path, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return fmt.Errorf("hiding %s: %w", path, err)
		}
		return nil
	}
	if err := syscall.Mount(fdPath(null), path, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("hiding %s: %w", path, err)
	}
	// Writes go to /dev/null anyway; read-only is only tidier.
	_ = syscall.Mount("", path, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
	return nil
}

// showAt brings the directory open as fd back at path, if a cover hides
// it there.
func showAt(path string, fd int) error {
	var want, got syscall.Stat_t
	if err := syscall.Fstat(fd, &want); err != nil {
		return fmt.Errorf("keeping %s visible: %w", path, err)
	}
	if err := syscall.Stat(path, &got); err == nil && got.Dev == want.Dev && got.Ino == want.Ino {
		return nil // not covered
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("keeping %s visible: %w", path, err)
	}
	if err := syscall.Mount(fdPath(fd), path, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("keeping %s visible: %w", path, err)
	}
	return nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// devFiles and devDirs are what the command's /dev keeps of the real one.
var (
	devFiles = []string{"null", "zero", "full", "random", "urandom", "tty", "ptmx"}
	devDirs  = []string{"pts", "shm", "mqueue"}
)

// minimalDev replaces /dev with a directory holding only devFiles and
// devDirs (bound from the real ones) and the usual links.
func minimalDev(open func(string, int) (int, error)) error {
	type keep struct {
		name string
		fd   int
		dir  bool
	}
	var keeps []keep
	for _, n := range devFiles {
		if fd, err := open("/dev/"+n, 0); err == nil {
			keeps = append(keeps, keep{n, fd, false})
		}
	}
	for _, n := range devDirs {
		if fd, err := open("/dev/"+n, syscall.O_DIRECTORY); err == nil {
			keeps = append(keeps, keep{n, fd, true})
		}
	}
	if err := syscall.Mount("tmpfs", "/dev", "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("making the command's /dev: %w", err)
	}
	for _, k := range keeps {
		path := "/dev/" + k.name
		flags := uintptr(syscall.MS_BIND)
		if k.dir {
			if err := os.Mkdir(path, 0o755); err != nil {
				return fmt.Errorf("making the command's /dev: %w", err)
			}
			flags |= syscall.MS_REC
		} else {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o666)
			if err != nil {
				return fmt.Errorf("making the command's /dev: %w", err)
			}
			f.Close()
		}
		if err := syscall.Mount(fdPath(k.fd), path, "", flags, ""); err != nil {
			return fmt.Errorf("making the command's /dev (%s): %w", k.name, err)
		}
	}
	links := [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	if !slices.ContainsFunc(keeps, func(k keep) bool { return k.name == "ptmx" }) {
		links = append(links, [2]string{"pts/ptmx", "ptmx"})
	}
	for _, l := range links {
		if err := os.Symlink(l[0], "/dev/"+l[1]); err != nil {
			return fmt.Errorf("making the command's /dev: %w", err)
		}
	}
	if err := syscall.Mount("", "/dev", "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("making the command's /dev read-only: %w", err)
	}
	return nil
}
