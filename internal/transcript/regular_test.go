package transcript

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// guardWait bounds a call that must not block; it only fires when one
// does, and then releases it.
const guardWait = 5 * time.Second

// noBlock runs call and fails the test if it has not returned within
// guardWait. A call stuck opening a FIFO is released by opening the other
// end, so a failing test does not leave a goroutine behind.
func noBlock(t *testing.T, fifo string, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	select {
	case <-done:
		return
	case <-time.After(guardWait):
	}
	t.Errorf("the call blocked on %s for %v", fifo, guardWait)
	for {
		// Whichever end the call waits for: a writer releases a reader,
		// a reader releases a writer.
		for _, flag := range []int{os.O_WRONLY, os.O_RDONLY} {
			if f, err := os.OpenFile(fifo, flag|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

// writeSession writes a small real session file at path.
func writeSession(t *testing.T, path string) {
	t.Helper()
	f, err := CreateAt(path, "/project")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{{Type: llm.ContentText, Text: "hi"}}, Timestamp: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A session path that names a FIFO, a directory or a device is refused
// at once, by everything that opens one, and is never opened blocking.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.jsonl")
	mkfifo(t, fifo)
	linkToFIFO := filepath.Join(dir, "link-to-pipe.jsonl")
	if err := os.Symlink(fifo, linkToFIFO); err != nil {
		t.Fatal(err)
	}
	subdir := filepath.Join(dir, "dir.jsonl")
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	device := filepath.Join(dir, "null.jsonl")
	if err := os.Symlink(os.DevNull, device); err != nil {
		t.Fatal(err)
	}
	paths := []string{fifo, linkToFIFO, subdir, device}
	calls := []struct {
		name string
		call func(path string) error
	}{
		{"Open", func(p string) error {
			f, err := Open(p)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"ReadInfo", func(p string) error {
			_, err := ReadInfo(p)
			return err
		}},
	}
	for _, c := range calls {
		for _, p := range paths {
			t.Run(c.name+"/"+filepath.Base(p), func(t *testing.T) {
				var err error
				noBlock(t, fifo, func() { err = c.call(p) })
				if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), p) {
					t.Fatalf("%s(%s) = %v, want an error naming the path and saying it is not a regular file", c.name, p, err)
				}
			})
		}
	}
}

// Listing skips whatever is not a regular file instead of opening it:
// one FIFO named *.jsonl must not hang the listing or hide the sessions.
func TestListSkipsWhatIsNotARegularFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "--project--")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.jsonl")
	writeSession(t, good)
	fifo := filepath.Join(dir, "a-pipe.jsonl")
	mkfifo(t, fifo)
	if err := os.Symlink(fifo, filepath.Join(dir, "b-link-to-pipe.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "c-dir.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(os.DevNull, filepath.Join(dir, "d-null.jsonl")); err != nil {
		t.Fatal(err)
	}
	linkToGood := filepath.Join(dir, "e-link-to-good.jsonl")
	if err := os.Symlink(good, linkToGood); err != nil {
		t.Fatal(err)
	}
	lists := []struct {
		name string
		list func() ([]Info, error)
	}{
		{"List", func() ([]Info, error) { return List(dir) }},
		{"ListAll", func() ([]Info, error) { return ListAll(root) }},
	}
	for _, l := range lists {
		t.Run(l.name, func(t *testing.T) {
			var infos []Info
			var err error
			noBlock(t, fifo, func() { infos, err = l.list() })
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range infos {
				got = append(got, filepath.Base(in.Path))
			}
			if len(got) != 2 || !contains(got, "good.jsonl") || !contains(got, "e-link-to-good.jsonl") {
				t.Fatalf("listed %v, want the session file and the symlink to it", got)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A session file replaced by a FIFO after it was opened: the next append
// fails at once instead of waiting for a reader.
func TestAppendRefusesAFileReplacedByAFIFO(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	writeSession(t, path)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fifo := filepath.Join(dir, "pipe")
	mkfifo(t, fifo)
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	noBlock(t, path, func() {
		_, err = f.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{{Type: llm.ContentText, Text: "again"}}, Timestamp: 2})
	})
	if err == nil || !errors.Is(err, ErrNotRegular) {
		t.Fatalf("append to a FIFO: %v, want ErrNotRegular", err)
	}
}

// FileID tells paths naming one file from paths naming two, whatever the
// spelling: a hard link and a symlink are the file, a copy is not.
func TestFileID(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig.jsonl")
	writeSession(t, orig)
	hard := filepath.Join(dir, "hard.jsonl")
	if err := os.Link(orig, hard); err != nil {
		t.Fatal(err)
	}
	soft := filepath.Join(dir, "soft.jsonl")
	if err := os.Symlink(orig, soft); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "copy.jsonl")
	if err := os.WriteFile(copied, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := FileIDOf(orig)
	if err != nil {
		t.Fatal(err)
	}
	if want == (FileID{}) {
		t.Fatal("zero FileID")
	}
	cases := []struct {
		path string
		same bool
	}{
		{orig, true},
		{hard, true},
		{soft, true},
		{filepath.Join(dir, ".", "orig.jsonl"), true},
		{copied, false},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			id, err := FileIDOf(c.path)
			if err != nil {
				t.Fatal(err)
			}
			if (id == want) != c.same {
				t.Errorf("FileIDOf(%s) = %v, orig is %v; same file: want %v", c.path, id, want, c.same)
			}
			info, err := ReadInfo(c.path)
			if err != nil {
				t.Fatal(err)
			}
			if info.FileID != id {
				t.Errorf("ReadInfo FileID %v, FileIDOf %v", info.FileID, id)
			}
			f, err := Open(c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got, err := f.FileID(); err != nil || got != id {
				t.Errorf("File.FileID = %v, %v; want %v", got, err, id)
			}
			// After an append the open descriptor answers.
			if _, err := f.AppendSessionInfo("x"); err != nil {
				t.Fatal(err)
			}
			if got, err := f.FileID(); err != nil || got != id {
				t.Errorf("File.FileID after an append = %v, %v; want %v", got, err, id)
			}
		})
	}
	if _, err := FileIDOf(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("FileIDOf a missing file: %v", err)
	}
	if _, err := NewMemory("/p").FileID(); err == nil {
		t.Error("an in-memory session has a FileID")
	}
}

// IsSessionFile recognises transcripts and nothing else, and never
// blocks on a FIFO.
func TestIsSessionFile(t *testing.T) {
	dir := t.TempDir()
	session := filepath.Join(dir, "s.jsonl")
	writeSession(t, session)
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("{\"type\":\"message\"}\nhello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(session, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		want bool
	}{{session, true}, {link, true}, {other, false}, {empty, false}, {fifo, false}, {dir, false}}
	for _, c := range cases {
		var got bool
		var err error
		noBlock(t, fifo, func() { got, err = IsSessionFile(c.path) })
		if err != nil || got != c.want {
			t.Errorf("IsSessionFile(%s) = %v, %v; want %v", c.path, got, err, c.want)
		}
	}
	if _, err := IsSessionFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IsSessionFile of a missing file: %v", err)
	}
}
