package proclimit

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeCgroup is a directory standing for a cgroup v2 whose
// subtree_control refuses controllers (EBUSY) while cgroup.procs lists a
// process, as the kernel's no-internal-processes rule does.
type fakeCgroup struct {
	t   *testing.T
	dir string
}

func newFakeCgroup(t *testing.T, controllers, procs string) *fakeCgroup {
	dir := t.TempDir()
	for name, v := range map[string]string{"cgroup.controllers": controllers, "cgroup.subtree_control": "", "cgroup.procs": procs} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeCgroup{t: t, dir: dir}
}

// write is what the kernel would do with a write to a cgroup file.
func (f *fakeCgroup) write(path, v string) error {
	switch filepath.Base(path) {
	case "cgroup.subtree_control":
		procs, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cgroup.procs"))
		if strings.TrimSpace(string(procs)) != "" {
			return syscall.EBUSY
		}
		on := strings.ReplaceAll(strings.TrimPrefix(v, "+"), " +", " ")
		return os.WriteFile(path, []byte(on), 0o644)
	case "cgroup.procs":
		// Moving the process: it leaves every other cgroup of the tree.
		_ = filepath.Walk(f.dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.Name() == "cgroup.procs" {
				_ = os.WriteFile(p, nil, 0o644)
			}
			return nil
		})
		return os.WriteFile(path, []byte(v), 0o644)
	}
	return os.WriteFile(path, []byte(v), 0o644)
}

func TestPrepareCgroup2(t *testing.T) {
	t.Run("alone in its cgroup: moves into a leaf and enables", func(t *testing.T) {
		f := newFakeCgroup(t, "cpu io memory pids", "42\n")
		base, note := prepareCgroup2(f.dir, 42, f.write)
		if base != f.dir || !strings.Contains(note, "moved agentd into") {
			t.Fatalf("base %q, note %q", base, note)
		}
		if on, _ := os.ReadFile(filepath.Join(f.dir, "cgroup.subtree_control")); string(on) != "pids memory" {
			t.Fatalf("subtree_control %q", on)
		}
		if procs, _ := os.ReadFile(filepath.Join(f.dir, ServerLeaf, "cgroup.procs")); string(procs) != "42" {
			t.Fatalf("the leaf holds %q", procs)
		}
		// Restarted in the leaf: the cgroups go beside it, nothing moves.
		if b, n := prepareCgroup2(filepath.Join(f.dir, ServerLeaf), 43, f.write); b != f.dir || n != "" {
			t.Fatalf("in the leaf: base %q, note %q", b, n)
		}
	})
	t.Run("sharing its cgroup: leaves it alone", func(t *testing.T) {
		f := newFakeCgroup(t, "memory pids", "7\n42\n")
		base, note := prepareCgroup2(f.dir, 42, f.write)
		if base != "" || !strings.Contains(note, "other processes share agentd's cgroup") {
			t.Fatalf("base %q, note %q", base, note)
		}
		if _, err := os.Stat(filepath.Join(f.dir, ServerLeaf)); !os.IsNotExist(err) {
			t.Fatalf("made a leaf: %v", err)
		}
	})
	t.Run("no controllers offered: nothing to do", func(t *testing.T) {
		f := newFakeCgroup(t, "hugetlb", "42\n")
		if base, note := prepareCgroup2(f.dir, 42, f.write); base != "" || note != "" {
			t.Fatalf("base %q, note %q", base, note)
		}
	})
}
