package tool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
	"go.uber.org/goleak"
)

var (
	benchTreeOnce sync.Once
	benchTreeDir  string
)

// benchTree is a repository-like tree of 2000 source files (about 4KB and
// 120 lines each, 8MB in all) in 40 directories, plus an ignored
// directory of the same size that a correct search never reads.
func benchTree(b *testing.B) string {
	benchTreeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentd-bench-tree-")
		if err != nil {
			b.Fatal(err)
		}
		benchTreeDir = dir
		var body strings.Builder
		for i := range 120 {
			fmt.Fprintf(&body, "\tvalue%d := compute(input, %d) // some ordinary code line\n", i, i)
		}
		for d := range 40 {
			for f := range 50 {
				content := "package p\n\nfunc f() {\n" + body.String() + "}\n"
				if (d*50+f)%97 == 0 {
					content += "// FIXME: needle_" + fmt.Sprint(d*50+f) + "\n"
				}
				p := filepath.Join(dir, fmt.Sprintf("pkg%02d", d), fmt.Sprintf("file%02d.go", f))
				writeFile(b, p, content)
				writeFile(b, filepath.Join(dir, "node_modules", fmt.Sprintf("m%02d", d), fmt.Sprintf("f%02d.js", f)), content)
			}
		}
		writeFile(b, filepath.Join(dir, ".gitignore"), "node_modules/\n")
	})
	return benchTreeDir
}

func BenchmarkGrep(b *testing.B) {
	dir := benchTree(b)
	env := Env{Cwd: dir, Locks: &FileLocks{}}
	g := NewGrep(env)
	cases := []struct {
		name string
		args map[string]any
	}{
		// Rare matches: every file must be read and scanned.
		{"rare-regex", map[string]any{"pattern": `needle_\d+`}},
		{"rare-literal-ignorecase", map[string]any{"pattern": "fixme: NEEDLE", "ignoreCase": true, "literal": true}},
		// Common matches: stops at the 100-match limit.
		{"common-limit100", map[string]any{"pattern": "compute"}},
		{"rare-context3", map[string]any{"pattern": `needle_\d+`, "context": 3}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r := run(b, g, c.args)
				if r.IsError || textOf(r) == "No matches found" {
					b.Fatalf("unexpected: %.200s", textOf(r))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/search")
		})
	}
}

func BenchmarkFind(b *testing.B) {
	dir := benchTree(b)
	f := NewFind(Env{Cwd: dir})
	for b.Loop() {
		if r := run(b, f, map[string]any{"pattern": "**/file1*.go"}); r.IsError {
			b.Fatal(textOf(r))
		}
	}
}

func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	var content strings.Builder
	for i := range 50000 {
		fmt.Fprintf(&content, "line %d: the quick brown fox jumps over the lazy dog\n", i+1)
	}
	writeFile(b, filepath.Join(dir, "big.txt"), content.String())
	rd := NewRead(Env{Cwd: dir})
	cases := []struct {
		name string
		args map[string]any
	}{
		{"head-of-50k-lines", map[string]any{"path": "big.txt"}},
		{"offset-25000-limit-100", map[string]any{"path": "big.txt", "offset": 25000, "limit": 100}},
		{"tail-of-50k-lines", map[string]any{"path": "big.txt", "offset": 49000}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(content.Len()))
			for b.Loop() {
				if r := run(b, rd, c.args); r.IsError {
					b.Fatal(textOf(r))
				}
			}
		})
	}
}

func BenchmarkEdit(b *testing.B) {
	dir := b.TempDir()
	var content strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&content, "\tvalue%d := compute(input, %d)\n", i, i)
	}
	p := filepath.Join(dir, "f.go")
	ed := NewEdit(Env{Cwd: dir, Locks: &FileLocks{}})
	args := map[string]any{"path": "f.go", "edits": []map[string]string{
		{"oldText": "value100 := compute(input, 100)", "newText": "value100 := compute(input, -100)"},
		{"oldText": "value4000 := compute(input, 4000)", "newText": "value4000 := 0"},
	}}
	for b.Loop() {
		b.StopTimer()
		writeFile(b, p, content.String())
		b.StartTimer()
		if r := run(b, ed, args); r.IsError {
			b.Fatal(textOf(r))
		}
	}
}

// TestMain also checks that no test (grep's worker pool included) leaves
// goroutines behind. Started as a process supervisor or as a test's
// stand-in for agentd (see procs_test.go), the test binary is that
// instead.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case SuperviseCommand:
			os.Exit(Supervise(context.Background(), os.Args[2:]))
		case standInCommand:
			os.Exit(standInMain(os.Args[2:]))
		case sandbox.Command:
			os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
		}
	}
	code := m.Run()
	if benchTreeDir != "" {
		os.RemoveAll(benchTreeDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
