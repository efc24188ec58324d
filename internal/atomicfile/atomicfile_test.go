package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// onlyFiles fails unless dir holds exactly the names given: no temporary
// file is left behind.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(names) {
		t.Fatalf("%s holds %v, want %v", dir, es, names)
	}
	for i, e := range es {
		if e.Name() != names[i] {
			t.Fatalf("%s holds %v, want %v", dir, es, names)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWrite(t *testing.T) {
	for _, durable := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		for _, content := range []string{"first", "second, longer", ""} {
			if err := Write(path, []byte(content), durable); err != nil {
				t.Fatal(err)
			}
			if got := read(t, path); got != content {
				t.Fatalf("durable %v: %q, want %q", durable, got, content)
			}
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v", fi.Mode(), err)
		}
		onlyFiles(t, dir, "f")
	}
	// A directory that is not there is an error, and nothing is made.
	missing := filepath.Join(t.TempDir(), "no", "f")
	if err := Write(missing, []byte("x"), true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing directory: %v", err)
	}
	// A directory in the way is an error, and the staged file is gone.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "d"), []byte("x"), false); err == nil {
		t.Fatal("wrote over a directory")
	}
	onlyFiles(t, dir, "d")
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := Create(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := Create(path, []byte("two")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v", err)
	}
	if got := read(t, path); got != "one" {
		t.Fatalf("%q, want the first", got)
	}
	onlyFiles(t, dir, "key")

	// Of many racing, exactly one wins and its data is whole.
	path = filepath.Join(dir, "raced")
	var wg sync.WaitGroup
	wins := make(chan string, 16)
	for i := range 16 {
		wg.Go(func() {
			data := string(rune('a'+i)) + "-data"
			if err := Create(path, []byte(data)); err == nil {
				wins <- data
			} else if !errors.Is(err, fs.ErrExist) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []string
	for w := range wins {
		won = append(won, w)
	}
	if len(won) != 1 || read(t, path) != won[0] {
		t.Fatalf("winners %v, file %q", won, read(t, path))
	}
	onlyFiles(t, dir, "key", "raced")
}
