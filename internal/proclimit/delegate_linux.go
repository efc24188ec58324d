package proclimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ServerLeaf is the cgroup agentd moves itself into (see PrepareCgroup2).
const ServerLeaf = "agentd-server"

// PrepareCgroup2 makes the cgroup v2 pids and memory controllers reach
// the cgroups of commands, where the system offers them to agentd's
// cgroup (cgroup.controllers) but they are not enabled below it. The
// kernel enables a controller for the children of a cgroup only while
// that cgroup has no processes of its own (except the root), and agentd
// is one: so, when agentd is alone in its cgroup (a systemd unit with
// Delegate=yes, a container), it moves itself into a child, ServerLeaf,
// and enables them. It returns the directory the cgroups of commands go
// under ("" for the cgroup each supervisor is in, as before) and what it
// did or why it could not, for the log ("" when there was nothing to
// do).
func PrepareCgroup2() (base, note string) {
	dir, ok := Cgroup2Dir()
	if !ok {
		return "", ""
	}
	return prepareCgroup2(dir, os.Getpid(), writeFile)
}

func prepareCgroup2(dir string, self int, write func(path, v string) error) (base, note string) {
	if filepath.Base(dir) == ServerLeaf {
		// An agentd before us moved us here (a restart in place): the
		// cgroups of commands go beside us.
		parent := filepath.Dir(dir)
		if missing := missingControllers(parent); len(missing) == 0 {
			return parent, ""
		}
		dir = parent
	}
	missing := missingControllers(dir)
	if len(missing) == 0 {
		return "", ""
	}
	if err := enable(dir, missing, write); err == nil {
		return "", "enabled " + strings.Join(missing, " and ") + " for the cgroups of commands"
	} else if !errors.Is(err, syscall.EBUSY) {
		return "", fmt.Sprintf("cannot enable the cgroup v2 controllers %s: %v", strings.Join(missing, " and "), err)
	}
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if f := strings.Fields(string(procs)); len(f) != 1 || f[0] != strconv.Itoa(self) {
		return "", fmt.Sprintf("cannot enable the cgroup v2 controllers %s in %s: other processes share agentd's cgroup (run agentd in a cgroup of its own, e.g. a systemd unit with Delegate=yes)",
			strings.Join(missing, " and "), dir)
	}
	leaf := filepath.Join(dir, ServerLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Sprintf("cannot make %s: %v", leaf, err)
	}
	if err := write(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(self)); err != nil {
		return "", fmt.Sprintf("cannot move agentd into %s: %v", leaf, err)
	}
	if err := enable(dir, missing, write); err != nil {
		_ = write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(self))
		return "", fmt.Sprintf("cannot enable the cgroup v2 controllers %s in %s: %v", strings.Join(missing, " and "), dir, err)
	}
	return dir, fmt.Sprintf("moved agentd into %s and enabled %s for the cgroups of commands beside it", leaf, strings.Join(missing, " and "))
}

// missingControllers are pids and memory where dir offers them and does
// not enable them for its children.
func missingControllers(dir string) []string {
	avail, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	on, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	var out []string
	for _, c := range []string{"pids", "memory"} {
		if slices.Contains(strings.Fields(string(avail)), c) && !slices.Contains(strings.Fields(string(on)), c) {
			out = append(out, c)
		}
	}
	return out
}

func enable(dir string, controllers []string, write func(path, v string) error) error {
	v := "+" + strings.Join(controllers, " +")
	return write(filepath.Join(dir, "cgroup.subtree_control"), v)
}
