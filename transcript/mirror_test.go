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

	// A fork is another session: it does not write to this one's mirror.
	writes := len(m.writes)
	fk, _ := must2(t)(f.Fork(f.Leaf(), ""))
	defer fk.Close()
	must[string](t)(fk.AppendMessage(userMsg("in the fork")))
	if len(m.writes) != writes {
		t.Fatal("a fork wrote to its parent's mirror")
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
