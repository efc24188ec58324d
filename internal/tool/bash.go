package tool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

const (
	// bashUpdateInterval throttles streamed partial output: often enough
	// to feel live, rarely enough not to flood clients with snapshots.
	bashUpdateInterval = 100 * time.Millisecond
	// pipeGrace is how long, after the shell exits, to wait for the
	// output pipe to close. A background job (`server &`) inherits the
	// pipe and may hold it open forever; the call must still return.
	pipeGrace = 100 * time.Millisecond
	// maxTimeoutSeconds keeps seconds*1e9 inside a time.Duration.
	maxTimeoutSeconds = 1e9
)

type bashTool struct{ env Env }

// BashDetails are the details of a bash result or partial update.
type BashDetails struct {
	// Truncation is set when the output was cut to its tail.
	Truncation *Truncation `json:"truncation,omitempty"`
	// FullOutputPath names the file holding the complete output, set
	// whenever the output was cut.
	FullOutputPath string `json:"fullOutputPath,omitempty"`
	// ExitCode is set when the command exited with a non-zero status.
	ExitCode *int `json:"exitCode,omitempty"`
}

func (t *bashTool) Spec() llm.Tool { return bashSpec() }

func (t *bashTool) Execute(ctx context.Context, call Call, update func(Result)) Result {
	a := parseArgs("bash", call.Args)
	command, _ := a.str("command", true)
	timeout, _ := a.num("timeout")
	keep, _ := a.boolean("background")
	if r, bad := a.failed(); bad {
		return r
	}
	if fi, err := os.Stat(t.env.Cwd); err != nil || !fi.IsDir() {
		return Errorf("Cannot run the command: the working directory %s does not exist.", t.env.Cwd)
	}
	if ctx.Err() != nil {
		return Errorf("Command aborted")
	}
	if t.env.ShellPrefix != "" {
		command = t.env.ShellPrefix + "\n" + command
	}

	var onOutput func(string, BashDetails)
	if update != nil {
		onOutput = func(text string, d BashDetails) {
			content := []llm.Content{}
			if text != "" {
				content = append(content, llm.Text(text))
			}
			// As pi: the opening update has no details, later ones always
			// carry an object (empty when nothing was truncated).
			var details any
			if text != "" || d.Truncation != nil {
				details = d
			}
			update(Result{Content: content, Details: details})
		}
	}
	policy := sandbox.Policy{Mode: sandbox.FullAccess}
	if t.env.Sandbox != nil {
		policy = t.env.Sandbox.Policy()
	}
	run := runBashUnder(ctx, t.env, policy, command, timeout, keep, onOutput)
	if run.StartError != "" {
		return Errorf("%s", run.StartError)
	}
	note := ""
	if need := refusedBySandbox(policy, run); need.Any() {
		run, note = t.escalate(ctx, call, policy, need, command, timeout, keep, onOutput, run)
		if run.StartError != "" {
			return Errorf("%s", run.StartError)
		}
	}
	text := run.Output
	var details BashDetails
	if run.Truncation.Truncated {
		tr := run.Truncation
		details.Truncation, details.FullOutputPath = &tr, run.FullOutputPath
		text += "\n\n" + truncationNotice(tr, fullOutputWhere(run), run.lastLineBytes)
	}
	details.ExitCode = run.ExitCode
	status := ""
	switch {
	case run.Aborted:
		status = "Command aborted"
	case run.TimedOut:
		status = "Command timed out after " + strconv.FormatFloat(timeout, 'f', -1, 64) + " seconds"
	case run.Limit != "":
		status = "Command stopped: " + run.Limit + ". Everything it started was killed."
	case run.Signal == "SIGXCPU":
		// RLIMIT_CPU's signal: where no cgroup accounts the command's CPU
		// time, each process has it (see package proclimit).
		status = "Command was killed by signal SIGXCPU: a process reached the CPU time limit (--tool-cpu-time)"
	case run.Signal != "":
		status = "Command was killed by signal " + run.Signal
	case run.ExitCode != nil:
		status = fmt.Sprintf("Command exited with code %d", *run.ExitCode)
	case run.Failure != "":
		status = "Command failed: " + run.Failure
	}
	if status == "" {
		if text == "" {
			text = "(no output)"
		}
		if note != "" {
			text += "\n\n" + note
		}
		return TextResult(text, detailsOrNil(details))
	}
	if text != "" {
		text += "\n\n"
	}
	if note != "" {
		status += "\n\n" + note
	}
	// A failed command's result always carries details, as pi's does.
	return Result{Content: []llm.Content{llm.Text(text + status)}, Details: details, IsError: true}
}

// BashRun is what running one command produced. The bash tool formats
// it for the model; a command the user runs directly is recorded from it
// as a bashExecution message.
type BashRun struct {
	// Output is the merged stdout and stderr, tail-truncated to MaxLines
	// / MaxBytes.
	Output     string
	Truncation Truncation
	// FullOutputPath holds the complete output when it was truncated.
	FullOutputPath string
	// ExitCode is set when the command exited with a non-zero status.
	ExitCode *int
	Aborted  bool   // ctx was cancelled and the process group killed
	TimedOut bool   // the timeout passed and the process group was killed
	Signal   string // killed by this signal (not by us)
	// Limit says which limits on processes, memory or CPU time (see
	// package proclimit) the command reached, in words; the command
	// was stopped, or a process of it killed, for it.
	Limit   string
	Failure string // waiting for the command failed otherwise
	// StartError says why the command could not be started at all.
	StartError string
	// DroppedBytes is how much of the output's middle the full-output
	// file left out (it keeps the head and the tail); DroppedLines counts
	// the newlines in it. Both are 0 when the file holds everything.
	DroppedBytes int64
	DroppedLines int

	lastLineBytes int
}

// RunBash runs command with env's shell in env.Cwd, merging stdout and
// stderr. onOutput, when non-nil, receives the (tail-truncated) output so
// far, at most every bashUpdateInterval and once more at the end.
// Cancelling ctx or passing timeout (seconds, 0 for none) kills every
// process the command started (with env.Supervisor; without one, its
// process group). RunBash runs the commands a person runs directly (the
// protocol's bash): it returns when the shell exits, and what the command
// left running in the background lives on in env.Scope until it is
// closed, as the person asked. The model's bash tool ends everything a
// call started with the call, unless the call sets background.
func RunBash(ctx context.Context, env Env, command string, timeout float64, onOutput func(text string, d BashDetails)) BashRun {
	env = env.normalize()
	policy := sandbox.Policy{Mode: sandbox.FullAccess}
	if env.Sandbox != nil {
		policy = env.Sandbox.Policy()
	}
	return runBashUnder(ctx, env, policy, command, timeout, true, onOutput)
}

// runBashUnder runs command under policy (env normalised). With keep, it
// returns when the shell exits, and the processes the command left
// running (background jobs) live on in env.Scope until it is closed;
// without, they are killed when the shell exits and it returns once they
// are gone.
func runBashUnder(ctx context.Context, env Env, policy sandbox.Policy, command string, timeout float64, keep bool, onOutput func(text string, d BashDetails)) BashRun {
	argv := []string{env.Shell, "-c", command}
	if env.Sandbox != nil {
		argv = policy.Wrap(env.Sandbox.Exe(), argv)
	}
	update := onOutput
	out := &outputAcc{tempDir: env.TempDir, scope: env.Scope, capHead: spillHead, capTail: spillTail}
	defer out.close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return BashRun{StartError: fmt.Sprintf("Cannot start command: %v", err)}
	}
	// One pipe for both streams keeps their interleaving exactly as the
	// command wrote it.
	var kill func()
	var exited <-chan shellExit
	var startErr string
	if len(env.Supervisor) > 0 && supervisorSupported {
		kill, exited, startErr = startSupervised(env, argv, pw, keep)
	} else {
		kill, exited, startErr = startDirect(env, argv, pw, keep)
	}
	pw.Close()
	if startErr != "" {
		pr.Close()
		return BashRun{StartError: startErr}
	}

	dirty := make(chan struct{}, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				out.write(buf[:n])
				select {
				case dirty <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()

	var lastUpdate time.Time
	emitted := 0 // out.writes at the last update
	emit := func() {
		lastUpdate = time.Now()
		text, tr, path, writes := out.snapshotVersion()
		emitted = writes
		var details BashDetails
		if tr.Truncated {
			details = BashDetails{Truncation: &tr, FullOutputPath: path}
		}
		update(text, details)
	}
	if update != nil {
		update("", BashDetails{})
	}

	var timeoutC <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(time.Duration(min(timeout, maxTimeoutSeconds) * float64(time.Second)))
		defer timer.Stop()
		timeoutC = timer.C
	}
	var throttle *time.Timer
	var throttleC <-chan time.Time
	defer func() {
		if throttle != nil {
			throttle.Stop()
		}
	}()

	done := ctx.Done()
	stopped := "" // "aborted" or "timeout" once we killed the command
	var exit shellExit
wait:
	for {
		select {
		case <-dirty:
			if update == nil {
				continue
			}
			if since := time.Since(lastUpdate); since >= bashUpdateInterval {
				// A loaded scheduler may pick this case over a throttle
				// that has already fired; that throttle would emit a
				// second update right behind this one.
				if throttleC != nil {
					throttle.Stop()
					throttleC = nil
				}
				emit()
			} else if throttleC == nil {
				throttle = time.NewTimer(bashUpdateInterval - since)
				throttleC = throttle.C
			}
		case <-throttleC:
			throttleC = nil
			emit()
		case <-done:
			done = nil
			if stopped == "" {
				stopped = "aborted"
			}
			kill()
		case <-timeoutC:
			timeoutC = nil
			if stopped == "" {
				stopped = "timeout"
			}
			kill()
		case exit = <-exited:
			break wait
		}
	}
	if exit.startErr != "" && stopped == "" {
		pr.Close()
		<-readDone
		return BashRun{StartError: fmt.Sprintf("Cannot start %s: %s", env.Shell, exit.startErr)}
	}

	grace := time.NewTimer(pipeGrace)
	select {
	case <-readDone:
	case <-grace.C:
		// Something outside the shell still holds the pipe. Closing our
		// end unblocks the reader; the holder gets EPIPE if it writes.
		pr.Close()
		<-readDone
	}
	grace.Stop()
	pr.Close()
	if update != nil {
		// Like pi, end the stream with the complete output, so a client
		// showing partial results never stops on a stale snapshot.
		if _, _, _, writes := out.snapshotVersion(); writes != emitted {
			emit()
		}
	}

	dropped := out.finish()
	text, tr, path := out.snapshot()
	run := BashRun{Output: text, Truncation: tr, lastLineBytes: out.lastLineBytes(),
		DroppedBytes: dropped.dropped, DroppedLines: dropped.droppedLines}
	if tr.Truncated {
		run.FullOutputPath = path
	}
	switch {
	case stopped == "aborted":
		run.Aborted = true
	case stopped == "timeout":
		run.TimedOut = true
	case exit.failure != "":
		run.Failure = exit.failure
	case len(exit.limits) > 0:
		run.Limit = strings.Join(exit.limits, "; ")
		if exit.code != 0 && !exit.signaled {
			code := exit.code
			run.ExitCode = &code
		}
	case exit.signaled:
		run.Signal = signalName(exit.signal)
	case exit.code != 0:
		code := exit.code
		run.ExitCode = &code
	}
	return run
}

// startDirect runs the shell as agentd's own child, in its own process
// group: what the command starts in that group dies with it on abort and,
// unless keep, when the shell exits; what leaves the group (setsid, a new
// group) does not. The returned channel receives the shell's exit.
func startDirect(env Env, argv []string, out *os.File, keep bool) (kill func(), exited <-chan shellExit, startErr string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = env.Cwd
	cmd.Env = env.Environ
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = directAttr()
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Sprintf("Cannot start %s: %v", env.Shell, err)
	}
	pgid := cmd.Process.Pid
	kill = func() {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
			_ = cmd.Process.Kill()
		}
	}
	// Until the shell is reaped its pid, and so the group id, cannot be
	// reused: killing the group from Scope.Close is safe until then.
	untrack, err := env.Scope.track(kill)
	if err != nil {
		kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Sprintf("Cannot start command: %v", err)
	}
	ch := make(chan shellExit, 1)
	go func() {
		err := cmd.Wait()
		if !keep {
			// The group outlives its leader while a member is left, and
			// its id is not reused meanwhile.
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		untrack()
		var st shellExit
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				st = shellExit{signaled: true, signal: ws.Signal()}
			} else {
				st = shellExit{code: ee.ExitCode()}
			}
		case err != nil:
			st = shellExit{failure: err.Error()}
		}
		ch <- st
	}()
	return kill, ch, ""
}

// detailsOrNil keeps results without anything to report free of details,
// as pi's are.
func detailsOrNil(d BashDetails) any {
	if d.Truncation == nil && d.FullOutputPath == "" && d.ExitCode == nil {
		return nil
	}
	return d
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	}
	return strconv.Itoa(int(s))
}

// fullOutputWhere names the full-output file for the model, saying what
// it lacks when the middle was dropped.
func fullOutputWhere(run BashRun) string {
	switch {
	case run.FullOutputPath == "":
		return "unavailable (could not be saved)"
	case run.DroppedBytes > 0:
		return fmt.Sprintf("%s (its first %s and last %s only: %s (%d lines) in between were dropped)",
			run.FullOutputPath, formatSize64(spillHead), formatSize64(spillTail), formatSize64(run.DroppedBytes), run.DroppedLines)
	}
	return run.FullOutputPath
}

// truncationNotice tells the model which part of the output it sees and
// where the rest is.
func truncationNotice(tr Truncation, where string, lastLine int) string {
	start := tr.TotalLines - tr.OutputLines + 1
	switch {
	case tr.LastLinePartial:
		return fmt.Sprintf("[Showing last %s of line %d (line is %s). Full output: %s]",
			formatSize(tr.OutputBytes), tr.TotalLines, formatSize(lastLine), where)
	case tr.TruncatedBy == "lines":
		return fmt.Sprintf("[Showing lines %d-%d of %d. Full output: %s]", start, tr.TotalLines, tr.TotalLines, where)
	default:
		return fmt.Sprintf("[Showing lines %d-%d of %d (%s limit). Full output: %s]",
			start, tr.TotalLines, tr.TotalLines, formatSize(MaxBytes), where)
	}
}

// outputAcc collects a command's output with bounded memory: a rolling
// tail for display, and, once the output outgrows the limits, a file with
// its head and tail (see spillFile). It is written by the pipe reader and
// read by the Execute goroutine.
type outputAcc struct {
	mu               sync.Mutex
	tempDir          string
	scope            *Scope
	capHead, capTail int64 // the full-output file's caps

	recent          []byte
	tailAtLineStart bool // recent[0] begins a line (else its first line is partial)
	total           int64
	newlines        int
	curLine         int64 // bytes since the last newline
	prevLine        int64 // length of the line the last newline ended
	lastByte        byte

	writes   int    // number of write calls, to tell stale snapshots
	pending  []byte // everything so far, until it needs a file
	file     *spillFile
	path     string
	spillErr error
}

func (o *outputAcc) write(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes++
	if len(o.recent) == 0 && o.total == 0 {
		o.tailAtLineStart = true
	}
	o.total += int64(len(p))
	if i := bytes.LastIndexByte(p, '\n'); i >= 0 {
		nl := bytes.Count(p, []byte{'\n'})
		o.newlines += nl
		if nl == 1 {
			o.prevLine = o.curLine + int64(i)
		} else {
			o.prevLine = int64(i - 1 - bytes.LastIndexByte(p[:i], '\n'))
		}
		o.curLine = int64(len(p) - i - 1)
	} else {
		o.curLine += int64(len(p))
	}
	o.lastByte = p[len(p)-1]

	o.recent = append(o.recent, p...)
	if len(o.recent) > 4*MaxBytes {
		// Keep twice the display limit: enough for any snapshot, and
		// trimming only every few chunks keeps the copying cheap.
		cut := len(o.recent) - 2*MaxBytes
		for cut < len(o.recent) && !utf8.RuneStart(o.recent[cut]) {
			cut++
		}
		o.tailAtLineStart = o.recent[cut-1] == '\n'
		n := copy(o.recent, o.recent[cut:])
		o.recent = o.recent[:n]
	}

	switch {
	case o.file != nil:
		o.file.write(p)
	case o.spillErr != nil:
	default:
		o.pending = append(o.pending, p...)
		if o.overLimit() {
			o.spill()
		}
	}
}

func (o *outputAcc) spill() {
	f, err := o.scope.createSpill(o.tempDir)
	if err != nil {
		o.spillErr = err
		o.pending = nil
		return
	}
	o.file, o.path = newSpillFile(f, o.capHead, o.capTail), f.Name()
	o.file.write(o.pending)
	o.pending = nil
}

func (o *outputAcc) lines() int {
	n := o.newlines
	if o.total > 0 && o.lastByte != '\n' {
		n++
	}
	return n
}

func (o *outputAcc) overLimit() bool {
	body := o.total
	if body > 0 && o.lastByte == '\n' {
		body--
	}
	return o.lines() > MaxLines || body > MaxBytes
}

func (o *outputAcc) lastLineBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.curLine > 0 {
		return int(min(o.curLine, math.MaxInt32))
	}
	return int(min(o.prevLine, math.MaxInt32))
}

// snapshot returns the output as the model should see it now: the tail,
// cut to the limits, with counts for the whole output.
func (o *outputAcc) snapshot() (string, Truncation, string) {
	text, tr, path, _ := o.snapshotVersion()
	return text, tr, path
}

// snapshotVersion is snapshot plus the number of writes it reflects.
func (o *outputAcc) snapshotVersion() (string, Truncation, string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	text := o.recent
	if !o.tailAtLineStart {
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	tr := truncateTail(string(text), MaxLines, MaxBytes)
	tr.TotalLines = o.lines()
	tr.TotalBytes = int(min(o.total, math.MaxInt))
	tr.Truncated = o.overLimit()
	switch {
	case !tr.Truncated:
		tr.TruncatedBy = ""
	case tr.TruncatedBy == "":
		tr.TruncatedBy = "lines"
		if tr.TotalLines <= MaxLines {
			tr.TruncatedBy = "bytes"
		}
	}
	return strings.ToValidUTF8(tr.Content, "\uFFFD"), tr, o.path, o.writes
}

// finish completes the full-output file, if there is one, and says what
// it left out. A file that could not be completed is removed: the path
// is reported only for a file that holds what the notice says.
func (o *outputAcc) finish() spillResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file == nil {
		return spillResult{}
	}
	res, err := o.file.finish(o.newlines)
	o.file = nil
	if err != nil {
		o.spillErr = err
		os.Remove(o.path)
		o.path = ""
	}
	return res
}

// close releases the file if finish never ran.
func (o *outputAcc) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file != nil {
		o.file.f.Close()
		o.file = nil
	}
}
