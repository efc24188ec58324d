package tool

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestSpillFileKeepsHeadAndTail: whatever the chunking, the file keeps
// the head and a line-aligned tail, with a note of exactly what was
// dropped between them.
func TestSpillFileKeepsHeadAndTail(t *testing.T) {
	var lines strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&lines, "l%02d\n", i) // 4 bytes a line, 80 in all
	}
	tests := []struct {
		name, input string
		want        string
		dropped     int64
		droppedNL   int
	}{
		{"fits", "0123456789abcdefghij", "0123456789abcdefghij", 0, 0},
		{"fits exactly with lines", lines.String()[:20], lines.String()[:20], 0, 0},
		{"lines", lines.String(),
			"l01\nl02\n[... 64B (16 lines) of output dropped here by agentd: this file keeps the first 8B and the last 8B of 80B ...]\nl19\nl20\n", 64, 16},
		{"one long line, head cut mid-character", "x" + strings.Repeat("é", 40),
			"xéééé\n[... 62B (0 lines) of output dropped here by agentd: this file keeps the first 9B and the last 10B of 81B ...]\néééé" + "é", 62, 0},
		{"one long line, tail cut mid-character", strings.Repeat("é", 40) + "x",
			"ééééé\n[... 62B (0 lines) of output dropped here by agentd: this file keeps the first 10B and the last 9B of 81B ...]\nééééx", 62, 0},
	}
	for _, tc := range tests {
		for _, chunk := range []int{1, 3, 7, 11, 1000} {
			t.Run(fmt.Sprintf("%s/chunks of %d", tc.name, chunk), func(t *testing.T) {
				f, err := os.CreateTemp(t.TempDir(), "spill-*.log")
				if err != nil {
					t.Fatal(err)
				}
				s := newSpillFile(f, 10, 10)
				in := []byte(tc.input)
				for len(in) > 0 {
					k := min(chunk, len(in))
					s.write(in[:k])
					in = in[k:]
				}
				res, err := s.finish(strings.Count(tc.input, "\n"))
				if err != nil {
					t.Fatal(err)
				}
				if got := readFile(t, f.Name()); got != tc.want {
					t.Fatalf("file\n got %q\nwant %q", got, tc.want)
				}
				if res.dropped != tc.dropped || res.droppedLines != tc.droppedNL {
					t.Fatalf("dropped %d bytes %d lines, want %d %d", res.dropped, res.droppedLines, tc.dropped, tc.droppedNL)
				}
			})
		}
	}
}

// TestBashOutputFileCapped: a command printing 20 MB leaves a file of
// the head and the tail only, and the model is told what is missing.
func TestBashOutputFileCapped(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	env.Scope = NewScope()
	defer env.Scope.Close()
	const n = 3_000_000
	r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": fmt.Sprintf("seq 1 %d", n)}, nil)
	got := mustOK(t, r.res)
	d := r.res.Details.(BashDetails)
	fi, err := os.Stat(d.FullOutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > spillHead+spillTail+1024 {
		t.Fatalf("full-output file has %d bytes, want at most head %d + tail %d and a note", fi.Size(), spillHead, spillTail)
	}
	full := readFile(t, d.FullOutputPath)
	if !strings.HasPrefix(full, "1\n2\n3\n") || !strings.HasSuffix(full, fmt.Sprintf("%d\n%d\n", n-1, n)) {
		t.Fatalf("file starts %q, ends %q", full[:20], full[len(full)-20:])
	}
	// The note's counts add up to the whole output.
	i := strings.Index(full, "\n[... ")
	j := strings.Index(full, " ...]\n")
	if i < 0 || j < i {
		t.Fatal("no note of what was dropped")
	}
	var droppedLines int
	if _, err := fmt.Sscanf(full[i+1:j], "[... %s (%d lines)", new(string), &droppedLines); err != nil {
		t.Fatalf("note %q: %v", full[i+1:j], err)
	}
	head, tail := full[:i+1], full[j+len(" ...]\n"):]
	if kept := strings.Count(head, "\n") + strings.Count(tail, "\n"); kept+droppedLines != n {
		t.Fatalf("kept %d lines + dropped %d != %d", kept, droppedLines, n)
	}
	wantTotal := int64(len(seq(1, n)))
	dropped := wantTotal - int64(len(head)) - int64(len(tail))
	if !strings.Contains(full[i:j], formatSize64(dropped)+" (") {
		t.Fatalf("note %q does not say %s were dropped", full[i+1:j], formatSize64(dropped))
	}
	if !strings.Contains(got, d.FullOutputPath+" (its first 2.0MB and last 2.0MB only: "+formatSize64(dropped)+fmt.Sprintf(" (%d lines) in between were dropped)]", droppedLines)) {
		t.Fatalf("notice %q", got[strings.LastIndex(got, "\n\n"):])
	}
}

// TestScopeCloseRemovesOutputFiles: the output files live as long as the
// session (the model may read them later), then go with it; another
// session's stay.
func TestScopeCloseRemovesOutputFiles(t *testing.T) {
	defer goleak.VerifyNone(t)
	env, other := testEnv(t), testEnv(t)
	other.TempDir = env.TempDir
	env.Scope, other.Scope = NewScope(), NewScope()
	defer other.Scope.Close()
	path := RunBash(context.Background(), env, "seq 1 5000", 0, nil).FullOutputPath
	kept := RunBash(context.Background(), other, "seq 1 5000", 0, nil).FullOutputPath
	if path == "" || kept == "" || filepath.Dir(path) == filepath.Dir(kept) {
		t.Fatalf("paths %q %q", path, kept)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("output file gone before Close: %v", err)
	}
	if err := env.Scope.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("spill directory still there after Close: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("another session's file went too: %v", err)
	}
	// Nothing runs, or writes files, in a closed Scope.
	if r := RunBash(context.Background(), env, "seq 1 5000", 0, nil); !strings.Contains(r.StartError, ErrScopeClosed.Error()) {
		t.Fatalf("a run after Close: %+v", r)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("spill directory back after Close: %v", err)
	}
}

// TestRemoveStaleSpill: at startup, the directories of agentd processes
// that are gone are removed; those of live ones, and anything else, stay.
func TestRemoveStaleSpill(t *testing.T) {
	dir := t.TempDir()
	self := os.Getpid()
	start, _ := processStart(self)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	old := time.Now().Add(-2 * legacySpillAge)
	entries := []struct {
		name    string
		dir     bool
		old     bool
		removed bool
	}{
		{fmt.Sprintf("agentd-spill-%d.%d-live", self, start), true, false, false},
		{fmt.Sprintf("agentd-spill-%d.%d-reused-pid", self, start+1), true, false, true},
		{fmt.Sprintf("agentd-spill-%d.1-dead", deadPid), true, false, true},
		{"agentd-spill-garbage", true, false, false},
		{"agentd-bash-123.log", false, true, true},
		{"agentd-bash-456.log", false, false, false},
		{"agentd-spill-1.1-a-file-not-a-dir", false, false, false},
		{"unrelated", true, true, false},
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.name)
		if e.dir {
			writeFile(t, filepath.Join(p, "bash-1.log"), "output\n")
		} else {
			writeFile(t, p, "output\n")
		}
		if e.old {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, err := RemoveStaleSpill(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		_, statErr := os.Stat(filepath.Join(dir, e.name))
		if gone := os.IsNotExist(statErr); gone != e.removed {
			t.Errorf("%s: removed %v, want %v", e.name, gone, e.removed)
		}
	}
	if len(removed) != 3 {
		t.Errorf("reported %v", removed)
	}
	if _, err := RemoveStaleSpill(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing directory: %v", err)
	}
}
