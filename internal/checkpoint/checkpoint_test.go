package checkpoint

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, rel string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, rel))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data), true
}

func paths(fs []FileDiff) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Status+" "+f.Path)
	}
	return out
}

// TestTurnRevertAndUndo: a turn edits two files and creates a third in a
// directory that is not a git repository; the diff names them with
// hunks, a revert restores the three, an undo brings the turn's work
// back, and all of it survives reopening the tracker (a restart).
func TestTurnRevertAndUndo(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	ctx := context.Background()
	write(t, ws, "a.txt", "one\ntwo\nthree\n")
	write(t, ws, "src/b.go", "package b\n")
	write(t, ws, ".gitignore", "build/\n")
	write(t, ws, "build/out.bin", "ignored before")

	tr, err := OpenTracker(store, ws, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Begin(ctx, "u1", "change things"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Begin(ctx, "u1", "change things"); err != nil { // a second call of the turn changes nothing
		t.Fatal(err)
	}
	write(t, ws, "a.txt", "one\nTWO\nthree\n")
	write(t, ws, "src/b.go", "package b\n\nfunc B() {}\n")
	write(t, ws, "new/c.txt", "made by bash\n")
	write(t, ws, "build/out.bin", "ignored after")
	if err := tr.End(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart: the journal is all there is.
	tr, err = OpenTracker(store, ws, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := tr.Diff(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(d.Files), []string{"modified a.txt", "added new/c.txt", "modified src/b.go"}; !slices.Equal(got, want) {
		t.Fatalf("diff files = %v, want %v", got, want)
	}
	if h := d.Files[0].Hunks; len(h) != 1 || h[0].Header() != "@@ -1,3 +1,3 @@" || !slices.Equal(h[0].Lines, []string{" one", "-two", "+TWO", " three"}) {
		t.Fatalf("a.txt hunks = %+v", h)
	}
	if p := Patch(d.Files); !strings.Contains(p, "--- /dev/null\n+++ b/new/c.txt\n@@ -0,0 +1,1 @@\n+made by bash\n") {
		t.Fatalf("patch:\n%s", p)
	}

	res, turn, err := tr.Revert(ctx, "u1", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if turn.ID != "u1" || !slices.Equal(res.Deleted, []string{"new/c.txt"}) || !slices.Equal(res.Written, []string{"a.txt", "src/b.go"}) {
		t.Fatalf("revert: %+v", res)
	}
	for rel, want := range map[string]string{"a.txt": "one\ntwo\nthree\n", "src/b.go": "package b\n", "build/out.bin": "ignored after"} {
		if got, _ := read(t, ws, rel); got != want {
			t.Errorf("after revert %s = %q, want %q", rel, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); !os.IsNotExist(err) {
		t.Errorf("the directory the turn made is still there: %v", err)
	}

	tr, err = OpenTracker(store, ws, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.LastRevert(); !ok {
		t.Fatal("the revert is not undoable after a restart")
	}
	if _, _, err := tr.UndoRevert(ctx); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"a.txt": "one\nTWO\nthree\n", "src/b.go": "package b\n\nfunc B() {}\n", "new/c.txt": "made by bash\n"} {
		if got, _ := read(t, ws, rel); got != want {
			t.Errorf("after undo %s = %q, want %q", rel, got, want)
		}
	}
	if _, _, err := tr.UndoRevert(ctx); err == nil {
		t.Error("a second undo with nothing to undo succeeded")
	}
}

// TestRevertNeverWritesOutside: whatever a model leaves in the workspace
// between the snapshot and the revert (a directory swapped for a symlink
// to outside, a file swapped for a symlink to an outside file, a symlink
// to outside as a new file), the revert changes only the workspace, and a
// snapshot never reads through a link.
func TestRevertNeverWritesOutside(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		hostil func(t *testing.T, ws, outside string)
	}{
		{"file replaced by a symlink", func(t *testing.T, ws, outside string) {
			os.Remove(filepath.Join(ws, "a.txt"))
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "a.txt"))
		}},
		{"directory replaced by a symlink", func(t *testing.T, ws, outside string) {
			os.RemoveAll(filepath.Join(ws, "dir"))
			os.Symlink(outside, filepath.Join(ws, "dir"))
		}},
		{"relative symlink up and out", func(t *testing.T, ws, outside string) {
			os.RemoveAll(filepath.Join(ws, "dir"))
			rel, _ := filepath.Rel(ws, outside)
			os.Symlink(rel, filepath.Join(ws, "dir"))
		}},
		{"new symlink to an outside file", func(t *testing.T, ws, outside string) {
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "link"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			ws, outside, store := filepath.Join(base, "ws"), filepath.Join(base, "outside"), filepath.Join(base, "store")
			write(t, ws, "a.txt", "mine\n")
			write(t, ws, "dir/inner.txt", "inner\n")
			write(t, outside, "secret", "outside secret\n")
			write(t, outside, "inner.txt", "outside inner\n")
			tr, err := OpenTracker(store, ws, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Begin(ctx, "u1", ""); err != nil {
				t.Fatal(err)
			}
			c.hostil(t, ws, outside)
			d, err := tr.Diff(ctx, "u1")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range d.Files {
				if strings.Contains(f.After, "outside secret") || strings.Contains(f.After, "outside inner") {
					t.Fatalf("the snapshot read through a link: %s = %q", f.Path, f.After)
				}
			}
			if _, _, err := tr.Revert(ctx, "u1", "", false); err != nil {
				t.Fatal(err)
			}
			for rel, want := range map[string]string{"secret": "outside secret\n", "inner.txt": "outside inner\n"} {
				if got, _ := read(t, outside, rel); got != want {
					t.Errorf("outside %s = %q, want %q", rel, got, want)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 2 {
				t.Errorf("outside has %d entries, want 2", len(ents))
			}
			for rel, want := range map[string]string{"a.txt": "mine\n", "dir/inner.txt": "inner\n"} {
				fi, err := os.Lstat(filepath.Join(ws, rel))
				if err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("%s after revert: %v %v", rel, fi, err)
				}
				if got, _ := read(t, ws, rel); got != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
			if _, err := os.Lstat(filepath.Join(ws, "link")); !os.IsNotExist(err) {
				t.Errorf("the new link survived the revert: %v", err)
			}
		})
	}
}

// TestHostileSnapshotRefused: a snapshot object naming a path with "..",
// an absolute path or a .git path is refused before anything is written.
func TestHostileSnapshotRefused(t *testing.T) {
	for _, p := range []string{"../escape", "/etc/passwd", "a/../../x", ".git/config", "a/.git/hooks/pre-commit", "./a", ""} {
		t.Run(p, func(t *testing.T) {
			base := t.TempDir()
			ws := filepath.Join(base, "ws")
			os.MkdirAll(ws, 0o755)
			st, err := Open(filepath.Join(base, "store"), ws, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			blob, _ := st.putObject([]byte("pwned\n"))
			data, _ := json.Marshal(Tree{Entries: []Entry{{Path: p, Mode: 0o644, Size: 6, Hash: blob}}})
			id, _ := st.putObject(data)
			if _, err := st.Restore(context.Background(), id); err == nil || !strings.Contains(err.Error(), "path") {
				t.Fatalf("restore of %q: err = %v", p, err)
			}
			if _, err := os.Stat(filepath.Join(base, "escape")); !os.IsNotExist(err) {
				t.Fatal("a file was written outside the workspace")
			}
		})
	}
}

// TestLimitsAndSkips: a file over the size bound is left out and named;
// a revert leaves it alone, neither deleting nor overwriting it; a
// snapshot cut short by the file count deletes nothing on revert; the
// store inside the workspace is not snapshotted.
func TestLimitsAndSkips(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	store := filepath.Join(ws, ".data", "checkpoints", "s1")
	write(t, ws, "small.txt", "s\n")
	tr, err := OpenTracker(store, ws, Limits{MaxFileBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Begin(ctx, "u1", ""); err != nil {
		t.Fatal(err)
	}
	write(t, ws, "big.txt", "0123456789abcdef\n")
	write(t, ws, "small.txt", "t\n")
	d, err := tr.Diff(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(d.Files); !slices.Equal(got, []string{"modified small.txt"}) {
		t.Fatalf("diff = %v (the store itself or the big file is in it)", got)
	}
	if len(d.Skipped) != 1 || d.Skipped[0].Path != "big.txt" || !strings.Contains(d.Skipped[0].Reason, "larger than 10 bytes") {
		t.Fatalf("skipped = %+v", d.Skipped)
	}
	res, _, err := tr.Revert(ctx, "u1", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, ws, "big.txt"); got != "0123456789abcdef\n" || len(res.Deleted) != 0 {
		t.Fatalf("the big file was touched: %q %+v", got, res)
	}
	if got, _ := read(t, ws, "small.txt"); got != "s\n" {
		t.Fatalf("small.txt = %q", got)
	}

	// A snapshot cut at the file count deletes nothing.
	ws2 := t.TempDir()
	write(t, ws2, "a", "a")
	write(t, ws2, "b", "b")
	tr2, err := OpenTracker(t.TempDir(), ws2, Limits{MaxFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr2.Begin(ctx, "u1", ""); err != nil {
		t.Fatal(err)
	}
	write(t, ws2, "0new", "new")
	res, _, err = tr2.Revert(ctx, "u1", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := read(t, ws2, "0new"); !ok || len(res.Kept) == 0 {
		t.Fatalf("a partial checkpoint deleted a file: %+v", res)
	}
}

// TestTornJournal: a line cut short by kill -9 is ignored, what came
// before it is kept.
func TestTornJournal(t *testing.T) {
	ctx := context.Background()
	ws, store := t.TempDir(), t.TempDir()
	write(t, ws, "a", "1")
	tr, err := OpenTracker(store, ws, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Begin(ctx, "u1", "p"); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(store, "journal.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"op":"end","turn":"u1","tr`)
	f.Close()
	tr, err = OpenTracker(store, ws, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := tr.Turns(); len(ts) != 1 || ts[0].ID != "u1" || ts[0].After != "" {
		t.Fatalf("turns = %+v", ts)
	}
}
