package tool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrScopeClosed is a bash run started, or output saved, after its Scope
// was closed (the session is gone).
var ErrScopeClosed = errors.New("the session is closed")

// Scope owns what the bash runs of one session leave behind: processes
// still running when a call returns (background jobs such as `server &`)
// and the files holding full output that did not fit in a result. Both
// stay while the session lives, because the model may come back to them
// (read the output file, talk to the server); Close ends the processes
// and deletes the files. One Scope serves one session: the tools and the
// user's own commands of that session share it through Env.Scope.
//
// The zero value is ready to use. A Scope is safe for concurrent use.
type Scope struct {
	mu     sync.Mutex
	closed bool
	live   map[*liveRun]struct{}
	wg     sync.WaitGroup // the goroutines waiting for supervisors
	spill  string         // the spill directory, once created
}

// liveRun is one run whose processes may still be alive.
type liveRun struct{ kill func() }

// NewScope returns an empty Scope.
func NewScope() *Scope { return &Scope{} }

// track registers kill as the way to end a run's processes, until the
// returned untrack is called. It fails once the Scope is closed.
func (s *Scope) track(kill func()) (untrack func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrScopeClosed
	}
	if s.live == nil {
		s.live = map[*liveRun]struct{}{}
	}
	r := &liveRun{kill: kill}
	s.live[r] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.live, r)
		s.mu.Unlock()
	}, nil
}

// Closed reports whether Close was called: the session is gone.
func (s *Scope) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// SpillDir is the directory holding the Scope's full-output files, ""
// until the first is made: another session's confined tools must not
// read it.
func (s *Scope) SpillDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spill
}

// Close kills every process the Scope's runs left alive, waits until
// they are gone and deletes the output files. Runs started afterwards
// fail with ErrScopeClosed. Close is idempotent.
func (s *Scope) Close() error {
	s.mu.Lock()
	s.closed = true
	live := s.live
	s.live = nil
	dir := s.spill
	s.mu.Unlock()
	for r := range live {
		r.kill()
	}
	s.wg.Wait()
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing bash output files: %w", err)
	}
	return nil
}

// Spill directories are named after the agentd process that made them,
// so that a later agentd can tell which ones nobody owns any more: the
// pid plus the process's start time (a reused pid starts at another
// time).
const (
	spillDirPrefix = "agentd-spill-"
	// legacySpillPattern is what agentd wrote straight into the temp
	// directory before spill directories existed.
	legacySpillPattern = "agentd-bash-*.log"
	// legacySpillAge is how long a legacy file must have gone unmodified
	// before the sweep removes it: nothing records whether the agentd
	// that wrote it still runs.
	legacySpillAge = 24 * time.Hour
)

// createSpill creates a file for a run's full output in the Scope's
// directory under tempDir, creating the directory on first use.
func (s *Scope) createSpill(tempDir string) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrScopeClosed
	}
	if s.spill == "" {
		start, _ := processStart(os.Getpid())
		dir, err := os.MkdirTemp(tempDir, fmt.Sprintf("%s%d.%d-", spillDirPrefix, os.Getpid(), start))
		if err != nil {
			return nil, err
		}
		s.spill = dir
	}
	return os.CreateTemp(s.spill, "bash-*.log")
}

// RemoveStaleSpill deletes, from tempDir, the bash output directories of
// agentd processes that are no longer running (and files of older agentd
// versions untouched for a day). Call it at startup: a process killed
// with SIGKILL never cleans up after itself. It returns what it removed;
// an error names the first entry it could not remove, after trying all.
func RemoveStaleSpill(tempDir string) ([]string, error) {
	entries, err := os.ReadDir(tempDir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", tempDir, err)
	}
	var removed []string
	var firstErr error
	remove := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("removing stale bash output %s: %w", p, err)
			}
			return
		}
		removed = append(removed, p)
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(tempDir, name)
		if strings.HasPrefix(name, spillDirPrefix) && e.IsDir() {
			pid, start, ok := parseSpillOwner(name)
			if !ok || ownerAlive(pid, start) {
				continue
			}
			remove(p)
			continue
		}
		if ok, _ := filepath.Match(legacySpillPattern, name); ok && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > legacySpillAge {
				remove(p)
			}
		}
	}
	return removed, firstErr
}

// parseSpillOwner reads "agentd-spill-<pid>.<start>-<random>".
func parseSpillOwner(name string) (pid int, start uint64, ok bool) {
	rest := strings.TrimPrefix(name, spillDirPrefix)
	owner, _, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	p, s, found := strings.Cut(owner, ".")
	if !found {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

// ownerAlive reports whether the process that made a spill directory
// still runs: its pid is alive and started when the directory says.
func ownerAlive(pid int, start uint64) bool {
	got, alive := processStart(pid)
	if !alive {
		return false
	}
	// Where start times are unknown (0), a live pid has to do.
	return start == 0 || got == 0 || got == start
}
