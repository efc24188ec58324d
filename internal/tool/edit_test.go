package tool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestApplyEdits(t *testing.T) {
	tests := []struct {
		name    string
		content string
		edits   []Replacement
		want    string
		wantErr string
	}{
		{"single", "a\nb\nc\n", []Replacement{{"b", "B"}}, "a\nB\nc\n", ""},
		{"multiple in any order", "one two three", []Replacement{{"three", "3"}, {"one", "1"}}, "1 two 3", ""},
		{"matched against the original", "aaa bbb", []Replacement{{"aaa", "bbb"}, {"bbb", "ccc"}}, "bbb ccc", ""},
		{"adjacent is fine", "abcd", []Replacement{{"ab", "X"}, {"cd", "Y"}}, "XY", ""},
		{"delete", "keep drop keep", []Replacement{{" drop", ""}}, "keep keep", ""},
		{"multiline", "func f() {\n\treturn 1\n}\n", []Replacement{{"\treturn 1\n}", "\treturn 2\n}"}}, "func f() {\n\treturn 2\n}\n", ""},
		{"crlf file, lf oldText", "a\r\nb\r\nc\r\n", []Replacement{{"a\nb", "x\ny"}}, "x\r\ny\r\nc\r\n", ""},
		{"crlf oldText", "a\r\nb\r\n", []Replacement{{"a\r\nb", "z"}}, "z\r\n", ""},
		{"mixed endings outside the edit kept", "a\r\nb\nc\r\n", []Replacement{{"c", "C"}}, "a\r\nb\nC\r\n", ""},
		{"lone cr matched as newline", "a\rb", []Replacement{{"a\nb", "ab"}}, "ab", ""},
		{"edit ending in newline of crlf", "x\r\ny\r\n", []Replacement{{"x\n", ""}}, "y\r\n", ""},
		{"fuzzy trailing whitespace", "if x {   \n\tgo()\n}\n", []Replacement{{"if x {\n\tgo()", "if y {\n\tgo()"}}, "if y {\n\tgo()\n}\n", ""},
		{"fuzzy quotes", "msg := \u201chello\u201d\nother\u2019s   \n", []Replacement{{`msg := "hello"`, `msg := "bye"`}}, "msg := \"bye\"\nother\u2019s   \n", ""},
		{"fuzzy dash", "a \u2014 b", []Replacement{{"a - b", "c"}}, "c", ""},
		{"fuzzy nbsp", "x\u00a0=\u00a01", []Replacement{{"x = 1", "x = 2"}}, "x = 2", ""},

		{"empty oldText", "abc", []Replacement{{"", "x"}}, "", "oldText must not be empty in f.txt"},
		{"empty oldText, multi", "abc", []Replacement{{"a", "x"}, {"", "y"}}, "", "edits[1].oldText must not be empty"},
		{"not found", "abc", []Replacement{{"zzz", "x"}}, "", "Could not find the exact text in f.txt"},
		{"not found, multi", "abc", []Replacement{{"a", "x"}, {"zzz", "y"}}, "", "Could not find edits[1] in f.txt"},
		{"not unique", "x x", []Replacement{{"x", "y"}}, "", "Found 2 occurrences of the text in f.txt"},
		{"not unique, multi", "a x x", []Replacement{{"a", "b"}, {"x", "y"}}, "", "Found 2 occurrences of edits[1] in f.txt"},
		{"overlap", "abcdef", []Replacement{{"cde", "1"}, {"abcd", "2"}}, "", "edits[1] and edits[0] overlap in f.txt"},
		{"nested", "abcdef", []Replacement{{"abcdef", "1"}, {"cd", "2"}}, "", "overlap"},
		{"same text twice", "abc", []Replacement{{"b", "1"}, {"b", "2"}}, "", "overlap"},
		{"no-op", "abc", []Replacement{{"b", "b"}}, "", "No changes made to f.txt"},
		{"no-op multi", "abc", []Replacement{{"a", "a"}, {"c", "c"}}, "", "replacements produced identical content"},
		{"no edits", "abc", nil, "", "at least one"},
		{"whitespace-only oldText not found", "abc", []Replacement{{"   ", "x"}}, "", "Could not find"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyEdits(tc.content, tc.edits, "f.txt")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q want %q", got, tc.want)
			}
		})
	}
}

func TestEditTool(t *testing.T) {
	env := testEnv(t)
	ed := NewEdit(env)
	p := filepath.Join(env.Cwd, "main.go")

	t.Run("multiple edits and diff", func(t *testing.T) {
		writeFile(t, p, "package main\n\nfunc a() {}\n\nfunc b() {}\n")
		r := run(t, ed, map[string]any{"path": "main.go", "edits": []map[string]string{
			{"oldText": "func a() {}", "newText": "func a() { println(1) }"},
			{"oldText": "func b() {}", "newText": "func b() { println(2) }"},
		}})
		if got := mustOK(t, r); got != "Applied 2 edit(s) to main.go." {
			t.Fatalf("got %q", got)
		}
		if readFile(t, p) != "package main\n\nfunc a() { println(1) }\n\nfunc b() { println(2) }\n" {
			t.Fatalf("file %q", readFile(t, p))
		}
		d := r.Details.(EditDetails)
		want := " 1 package main\n 2 \n-3 func a() {}\n+3 func a() { println(1) }\n 4 \n-5 func b() {}\n+5 func b() { println(2) }"
		if d.Diff != want || d.FirstChangedLine != 3 {
			t.Fatalf("diff %q first %d", d.Diff, d.FirstChangedLine)
		}
		if m := detailsJSON(t, r); m["diff"] != want || m["firstChangedLine"] != 3.0 {
			t.Fatalf("details json %v", m)
		}
	})
	t.Run("crlf and bom preserved", func(t *testing.T) {
		writeFile(t, p, "\ufeffline one\r\nline two\r\nline three\r\n")
		mustOK(t, run(t, ed, map[string]any{"path": "main.go", "edits": []map[string]string{
			{"oldText": "line two\nline three", "newText": "line 2\nline 2.5\nline 3"},
		}}))
		if got := readFile(t, p); got != "\ufeffline one\r\nline 2\r\nline 2.5\r\nline 3\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("legacy single edit", func(t *testing.T) {
		writeFile(t, p, "hello world\n")
		mustOK(t, run(t, ed, map[string]any{"path": "main.go", "oldText": "world", "newText": "there"}))
		if readFile(t, p) != "hello there\n" {
			t.Fatal(readFile(t, p))
		}
	})
	t.Run("edits as a JSON string", func(t *testing.T) {
		writeFile(t, p, "hello world\n")
		mustOK(t, run(t, ed, map[string]any{"path": "main.go", "edits": `[{"oldText":"hello","newText":"bye"}]`}))
		if readFile(t, p) != "bye world\n" {
			t.Fatal(readFile(t, p))
		}
	})
	t.Run("failure leaves the file alone", func(t *testing.T) {
		writeFile(t, p, "x x\n")
		mustErr(t, run(t, ed, map[string]any{"path": "main.go", "edits": []map[string]string{{"oldText": "x", "newText": "y"}}}),
			"Found 2 occurrences")
		if readFile(t, p) != "x x\n" {
			t.Fatal("file changed")
		}
	})

	errTests := []struct {
		name string
		args any
		want []string
	}{
		{"missing file", map[string]any{"path": "nope.go", "edits": []map[string]string{{"oldText": "a", "newText": "b"}}}, []string{"File not found: nope.go"}},
		{"directory", map[string]any{"path": ".", "edits": []map[string]string{{"oldText": "a", "newText": "b"}}}, []string{"directory"}},
		{"missing edits", map[string]any{"path": "main.go"}, []string{"edits: required array is missing"}},
		{"empty edits", map[string]any{"path": "main.go", "edits": []any{}}, []string{"edits: must contain at least one replacement"}},
		{"edits wrong type", map[string]any{"path": "main.go", "edits": 5}, []string{"edits: must be an array"}},
		{"item missing newText", map[string]any{"path": "main.go", "edits": []map[string]string{{"oldText": "a"}}}, []string{"edits.0.newText: required string is missing"}},
		{"item not an object", map[string]any{"path": "main.go", "edits": []any{"a"}}, []string{"edits.0: must be an object"}},
		{"item extra property", map[string]any{"path": "main.go", "edits": []map[string]string{{"oldText": "a", "newText": "b", "x": "c"}}}, []string{"edits.0.x: unknown property"}},
		{"extra property", map[string]any{"path": "main.go", "file_path": "x", "edits": []map[string]string{{"oldText": "a", "newText": "b"}}}, []string{"file_path: unknown property"}},
		{"legacy half", map[string]any{"path": "main.go", "oldText": "a"}, []string{"newText: required string is missing"}},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			mustErr(t, run(t, ed, tc.args), tc.want...)
		})
	}
}

// TestConcurrentEditsSerialised runs many edits of one file at once. Each
// is a read-modify-write of the whole file; without the per-file lock,
// interleavings would drop replacements.
func TestConcurrentEditsSerialised(t *testing.T) {
	env := testEnv(t)
	p := filepath.Join(env.Cwd, "shared.txt")
	const n = 40
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "slot-%02d: todo\n", i)
	}
	writeFile(t, p, b.String())
	tools := []Tool{NewEdit(env), NewEdit(env)} // separate tools, one lock set
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := run(t, tools[i%2], map[string]any{"path": p, "edits": []map[string]string{
				{"oldText": fmt.Sprintf("slot-%02d: todo", i), "newText": fmt.Sprintf("slot-%02d: done", i)},
			}})
			if r.IsError {
				t.Errorf("edit %d: %s", i, textOf(r))
			}
		}()
	}
	wg.Wait()
	got := readFile(t, p)
	if strings.Contains(got, "todo") || strings.Count(got, "done") != n {
		t.Fatalf("lost updates:\n%s", got)
	}
	if env.Locks.size() != 0 {
		t.Fatalf("%d lock entries left behind", env.Locks.size())
	}
}

// TestFileLocks runs in a synctest bubble: the 50ms a waiter gives the
// lock are the bubble's clock, passing only once everything is blocked.
func TestFileLocks(t *testing.T) { synctest.Test(t, testFileLocks) }

func testFileLocks(t *testing.T) {
	var l FileLocks
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	unlock, err := l.Lock(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter gives up when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, p); err == nil {
		t.Fatal("second lock of the same file succeeded")
	}
	// Different files do not contend.
	u2, err := l.Lock(context.Background(), filepath.Join(dir, "g"))
	if err != nil {
		t.Fatal(err)
	}
	u2()
	// A path through a symlink shares the target's lock.
	writeFile(t, p, "x")
	if err := os.Symlink(p, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := l.Lock(ctx2, filepath.Join(dir, "link")); err == nil {
		t.Fatal("symlink did not share the lock")
	}
	unlock()
	unlock() // idempotent
	if l.size() != 0 {
		t.Fatalf("%d entries left", l.size())
	}
}

// TestWriteAndEditShareLock runs in a synctest bubble: the 100ms a write
// must keep waiting and the cancel 20ms into the edit's wait are the
// bubble's clock, so a late-scheduled goroutine cannot reorder them.
func TestWriteAndEditShareLock(t *testing.T) { synctest.Test(t, testWriteAndEditShareLock) }

func testWriteAndEditShareLock(t *testing.T) {
	env := testEnv(t)
	p := filepath.Join(env.Cwd, "f.txt")
	writeFile(t, p, "v0\n")
	unlock, err := env.Locks.Lock(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() { done <- run(t, NewWrite(env), map[string]any{"path": "f.txt", "content": "v1\n"}) }()
	select {
	case <-done:
		t.Fatal("write ran while the file was locked")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	mustOK(t, <-done)
	// A cancelled waiter returns an aborted result.
	unlock, _ = env.Locks.Lock(context.Background(), p)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	mustErr(t, runCtx(t, ctx, NewEdit(env), map[string]any{"path": "f.txt", "edits": []map[string]string{{"oldText": "v1", "newText": "v2"}}}), "aborted")
	unlock()
}

func TestRenderDiff(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
	diff, first := renderDiff(old, strings.Replace(old, "f\n", "F\n", 1))
	want := strings.Join([]string{
		"    ...",
		"  2 b",
		"  3 c",
		"  4 d",
		"  5 e",
		"- 6 f",
		"+ 6 F",
		"  7 g",
		"  8 h",
		"  9 i",
		" 10 j",
	}, "\n")
	if diff != want || first != 6 {
		t.Fatalf("got (first %d)\n%s\nwant\n%s", first, diff, want)
	}

	// Two changes far apart: the gap between them is elided.
	var lines []string
	for i := 1; i <= 30; i++ {
		lines = append(lines, fmt.Sprintf("l%d", i))
	}
	oldText := strings.Join(lines, "\n")
	lines[1], lines[27] = "L2", "L28"
	diff, first = renderDiff(oldText, strings.Join(lines, "\n"))
	want = strings.Join([]string{
		"  1 l1", "- 2 l2", "+ 2 L2", "  3 l3", "  4 l4", "  5 l5", "  6 l6",
		"    ...",
		" 24 l24", " 25 l25", " 26 l26", " 27 l27", "-28 l28", "+28 L28", " 29 l29", " 30 l30",
	}, "\n")
	if diff != want || first != 2 {
		t.Fatalf("got (first %d)\n%s\nwant\n%s", first, diff, want)
	}

	// Insertion and deletion of whole lines, and a missing final newline.
	diff, first = renderDiff("a\nb\nc", "a\nx\nb\nc\n")
	want = " 1 a\n+2 x\n 2 b\n-3 c\n+4 c"
	if diff != want || first != 2 {
		t.Fatalf("got (first %d)\n%q\nwant\n%q", first, diff, want)
	}
}

func TestMyersMinimal(t *testing.T) {
	x := splitLinesKeep("a\nb\nc\na\nb\nb\na\n")
	y := splitLinesKeep("c\nb\na\nb\na\nc\n")
	ops := myers(x, y)
	d := 0
	xi, yi := 0, 0
	for _, op := range ops {
		switch op {
		case opEqual:
			if x[xi] != y[yi] {
				t.Fatalf("equal op on different lines %q %q", x[xi], y[yi])
			}
			xi++
			yi++
		case opDelete:
			xi++
			d++
		case opInsert:
			yi++
			d++
		}
	}
	if xi != len(x) || yi != len(y) || d != 5 {
		t.Fatalf("script consumed %d/%d and %d/%d with %d edits (want 5)", xi, len(x), yi, len(y), d)
	}
}

func TestRenderDiffEdges(t *testing.T) {
	// Pure insertion and pure deletion.
	if d, first := renderDiff("a\nb\n", "a\nnew\nb\n"); d != " 1 a\n+2 new\n 2 b" || first != 2 {
		t.Fatalf("insert: %q %d", d, first)
	}
	if d, first := renderDiff("a\nold\nb\n", "a\nb\n"); d != " 1 a\n-2 old\n 3 b" || first != 2 {
		t.Fatalf("delete: %q %d", d, first)
	}
	// A change too large for the Myers search is one removal plus one
	// addition, still a correct script.
	var x, y strings.Builder
	for i := range 3 * maxDiffEdits {
		fmt.Fprintf(&x, "old %d\n", i)
		fmt.Fprintf(&y, "new %d\n", i)
	}
	d, first := renderDiff(x.String(), y.String())
	lines := strings.Split(d, "\n")
	if first != 1 || len(lines) != 6*maxDiffEdits || !strings.HasPrefix(lines[0], "-   1 old 0") || !strings.HasPrefix(lines[3*maxDiffEdits], "+   1 new 0") {
		t.Fatalf("large: first %d, %d lines, %q / %q", first, len(lines), lines[0], lines[3*maxDiffEdits])
	}
}
