package tool

import "syscall"

// Why a supervisor process. agentd cannot itself catch what a command
// leaves behind: a child that calls setsid or double-forks leaves the
// process group bash was started in, and orphans go to init, where
// nothing of agentd can find them; and when agentd dies (kill -9, OOM)
// nothing of it runs to clean up. Making agentd a child subreaper would
// hand it every orphan to reap, behind the back of os/exec, which waits
// for its own children by pid.
//
// So every bash run gets a small supervisor: agentd re-executed with
// SuperviseCommand. It becomes a child subreaper (orphans of the run come
// to it, not to init), starts the shell in a cgroup of its own when the
// system lets it, under the run's limits (package proclimit), and, when
// the shell exits, kills every descendant (the cgroup at once, and its
// own subtree until none is left), reaps them and reports the shell's
// exit status on its control socket: the call returns once nothing the
// command started is left. A run started with KeepFlag (the bash tool's
// "background") reports as soon as the shell exits and leaves its
// background jobs running until it is told to stop or agentd dies. A run
// that reaches its process limit or its CPU time is killed at once.
//
// agentd tells it to stop by closing its end of the control socket, and
// its death closes it too: one mechanism for abort, timeout, session
// close and kill -9. A parent-death signal is there as well, for the
// case where agentd's end of the socket survives agentd (it never should,
// the socket is close-on-exec).

// SuperviseCommand is the hidden subcommand that runs a supervisor:
// `agentd __supervise [--no-cgroup] [--keep] [limits] <shell> -c <command>`
// (limits as proclimit.Limits.Args writes them), with the
// control socket on fd 3. Only agentd starts it; see Env.Supervisor.
const SuperviseCommand = "__supervise"

// NoCgroupFlag, right after SuperviseCommand, keeps the supervisor from
// putting the run in a cgroup even where it could; it then relies on
// reaping its subtree alone.
const NoCgroupFlag = "--no-cgroup"

// CgroupBaseFlag, followed by a directory, among the flags after
// SuperviseCommand, makes the run's cgroup v2 there instead of under the
// supervisor's own (see proclimit.PrepareCgroup2).
const CgroupBaseFlag = "--cgroup-base="

// KeepFlag, among the flags after SuperviseCommand, leaves the processes
// the command started running after its shell exits, until the run is
// stopped (its session closes); without it they are killed when the
// shell exits, and the status is reported once they are gone.
const KeepFlag = "--keep"

// shellExit is how a run's shell ended, as the supervisor reports it or
// as agentd's own wait saw it.
type shellExit struct {
	code     int
	signaled bool
	signal   syscall.Signal
	failure  string // no status known: why
	startErr string // the shell could not start: why
	// limits are the limits the run reached, in words (see
	// proclimit.Limits.Reached).
	limits []string
}
