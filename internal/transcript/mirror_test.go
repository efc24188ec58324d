package transcript

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// mirrorLog is a mirror that keeps what it is given, and fails while err
// is set.
type mirrorLog struct {
	writes [][]byte
	err    error
}

func (m *mirrorLog) mirror(b []byte) error {
	if m.err != nil {
		return m.err
	}
	m.writes = append(m.writes, bytes.Clone(b))
	return nil
}

// replay is the file a mirror's writes make: a write that starts with a
// header replaces what came before.
func (m *mirrorLog) replay() []byte {
	var out []byte
	for _, w := range m.writes {
		if bytes.HasPrefix(w, []byte(`{"type":"session"`)) {
			out = out[:0]
		}
		out = append(out, w...)
	}
	return out
}

func TestMirrorSeesEveryWrite(t *testing.T) {
	m := &mirrorLog{}
	path := filepath.Join(t.TempDir(), "s.jsonl")
	f := must[*File](t)(CreateAt(path, "/p", clock(), WithMirror(m.mirror)))
	defer f.Close()
	must[string](t)(f.AppendMessage(userMsg("one")))
	must[string](t)(f.AppendModelChange("anthropic", "claude-x"))
	must[string](t)(f.AppendMessage(assistantMsg("two")))
	if len(m.writes) != 3 || !bytes.HasPrefix(m.writes[0], []byte(`{"type":"session"`)) {
		t.Fatalf("%d writes, the first %.40q; want 3, the first with the header", len(m.writes), m.writes[0])
	}
	if got := must[[]byte](t)(os.ReadFile(path)); !bytes.Equal(m.replay(), got) {
		t.Fatalf("mirror:\n%s\nfile:\n%s", m.replay(), got)
	}

	// A failing mirror fails the append and leaves file and tree alone.
	before := must[[]byte](t)(os.ReadFile(path))
	leaf, n := f.Leaf(), f.Len()
	m.err = errors.New("the cluster refused it")
	if _, err := f.AppendMessage(userMsg("lost")); !errors.Is(err, m.err) {
		t.Fatalf("append with a failing mirror: %v", err)
	}
	if got := must[[]byte](t)(os.ReadFile(path)); !bytes.Equal(got, before) || f.Leaf() != leaf || f.Len() != n {
		t.Fatal("a failed mirror changed the session")
	}
	m.err = nil
	must[string](t)(f.AppendMessage(userMsg("three")))
	if got := must[[]byte](t)(os.ReadFile(path)); !bytes.Equal(m.replay(), got) {
		t.Fatal("mirror and file differ after a failed append")
	}

	// A fork continues the session in a new file (as session.Fork does):
	// the mirror gets that file whole, then its appends.
	var fromID string
	for _, e := range f.Entries() {
		if e.Type == TypeMessage && e.Message.Role == "user" {
			fromID = e.ID
			break
		}
	}
	fk, _ := must2(t)(f.Fork(fromID, ""))
	defer fk.Close()
	must[string](t)(fk.AppendMessage(userMsg("in the fork")))
	if got := must[[]byte](t)(os.ReadFile(fk.Path())); !bytes.Equal(m.replay(), got) {
		t.Fatalf("mirror after a fork:\n%s\nfork's file:\n%s", m.replay(), got)
	}
	// So does a clone.
	cl := must[*File](t)(fk.Clone(""))
	defer cl.Close()
	if got := must[[]byte](t)(os.ReadFile(cl.Path())); !bytes.Equal(m.replay(), got) {
		t.Fatalf("mirror after a clone:\n%s\nclone's file:\n%s", m.replay(), got)
	}
}

// TestMirrorOpenSendsWholeFile: a file opened with a mirror (a session
// switched to another file) goes to the mirror whole with its first
// append, replacing what the mirror held.
func TestMirrorOpenSendsWholeFile(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.jsonl")
	g := must[*File](t)(CreateAt(other, "/p", clock()))
	must[string](t)(g.AppendMessage(userMsg("written without a mirror")))
	g.Close()

	m := &mirrorLog{}
	f := must[*File](t)(CreateAt(filepath.Join(dir, "s.jsonl"), "/p", clock(), WithMirror(m.mirror)))
	must[string](t)(f.AppendMessage(userMsg("the first file")))
	f.Close()

	g = must[*File](t)(Open(other, clock(), WithMirror(m.mirror)))
	defer g.Close()
	if len(m.writes) != 1 {
		t.Fatal("Open wrote to the mirror")
	}
	must[string](t)(g.AppendMessage(userMsg("after the switch")))
	got := must[[]byte](t)(os.ReadFile(other))
	if !bytes.Equal(m.replay(), got) {
		t.Fatalf("mirror:\n%s\nfile:\n%s", m.replay(), got)
	}
	must[string](t)(g.AppendMessage(userMsg("and one more")))
	if n := len(m.writes); n != 3 {
		t.Fatalf("%d mirror writes, want 3 (a file, the other whole, one entry)", n)
	}
}

func must2(t *testing.T) func(*File, string, error) (*File, string) {
	return func(f *File, s string, err error) (*File, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return f, s
	}
}

// TestMirrorMigrationRewrite: the rewrite of a migrated file reaches the
// mirror whole, header first, so it replaces the old version there too.
func TestMirrorMigrationRewrite(t *testing.T) {
	p := copyFixture(t, "v1-session.jsonl")
	m := &mirrorLog{writes: [][]byte{must[[]byte](t)(os.ReadFile(p))}}
	f := must[*File](t)(Open(p, WithMirror(m.mirror)))
	defer f.Close()
	must[string](t)(f.AppendMessage(userMsg("after the migration")))
	if len(m.writes) != 2 || !bytes.HasPrefix(m.writes[1], []byte(`{"type":"session","version":3`)) {
		t.Fatalf("%d writes; want the whole v3 file as the second", len(m.writes))
	}
	if got := must[[]byte](t)(os.ReadFile(p)); !bytes.Equal(m.replay(), got) {
		t.Fatalf("mirror:\n%s\nfile:\n%s", m.replay(), got)
	}
}
