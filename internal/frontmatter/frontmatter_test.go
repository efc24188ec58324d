package frontmatter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		name, in   string
		head, body string
		ok         bool
		err        error
	}{
		{name: "none", in: "just text\n", body: "just text\n"},
		{name: "fenced", in: "---\na: 1\n---\nbody\n", head: "a: 1\n", body: "body\n", ok: true},
		{name: "crlf and bom", in: "\ufeff---\r\na: 1\r\n---\r\nbody\r\n", head: "a: 1\n", body: "body\n", ok: true},
		{name: "fences with trailing blanks", in: "--- \na: 1\n---\t\nbody", head: "a: 1\n", body: "body", ok: true},
		{name: "empty head at end", in: "---\n---", ok: true},
		{name: "only an opening line", in: "---", body: "---", ok: true, err: ErrUnclosed},
		{name: "unclosed", in: "---\na: 1\n", body: "---\na: 1\n", ok: true, err: ErrUnclosed},
		{name: "closing not alone", in: "---\na: 1\n---x\n", body: "---\na: 1\n---x\n", ok: true, err: ErrUnclosed},
		{name: "dashes later are body", in: "---\na: 1\n---\nx\n---\ny", head: "a: 1\n", body: "x\n---\ny", ok: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head, body, ok, err := Split([]byte(tt.in))
			if string(head) != tt.head || string(body) != tt.body || ok != tt.ok || !errors.Is(err, tt.err) {
				t.Errorf("Split(%q) = %q, %q, %v, %v; want %q, %q, %v, %v", tt.in, head, body, ok, err, tt.head, tt.body, tt.ok, tt.err)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	type fields struct {
		Name string `yaml:"name"`
	}
	for _, tt := range []struct {
		name, head string
		strict     bool
		want, err  string
	}{
		{name: "empty", head: " \n"},
		{name: "field", head: "name: x\n", want: "x"},
		{name: "unknown, lenient", head: "name: x\nother: 1\n", want: "x"},
		{name: "unknown, strict", head: "name: x\nother: 1\n", strict: true, err: "field other not found"},
		{name: "bad yaml", head: "name: [\n", err: "frontmatter is not valid YAML"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var f fields
			err := Decode([]byte(tt.head), &f, tt.strict)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one line with %q", err, tt.err)
				}
				return
			}
			if err != nil || f.Name != tt.want {
				t.Fatalf("got %+v, %v", f, err)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small, big, link := filepath.Join(dir, "small.md"), filepath.Join(dir, "big.md"), filepath.Join(dir, "link.md")
	os.WriteFile(small, []byte("hello"), 0o644)
	os.WriteFile(big, []byte(strings.Repeat("x", 11)), 0o644)
	os.Symlink(small, link)
	for _, tt := range []struct {
		name, path string
		noLinks    bool
		want, err  string
	}{
		{name: "small", path: small, want: "hello"},
		{name: "too big", path: big, err: "more than the 10"},
		{name: "link followed", path: link, want: "hello"},
		{name: "link refused", path: link, noLinks: true, err: "not a regular file"},
		{name: "directory", path: dir, err: "not a regular file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ReadFile(tt.path, 10, tt.noLinks)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || string(b) != tt.want {
				t.Fatalf("got %q, %v", b, err)
			}
		})
	}
}

// FuzzSplit: whatever a file holds, Split does not panic, and a head it
// finds is followed by the body within the text.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "---", "---\n---\n", "---\na: 1\n---\nb", "\ufeff---\r\n---\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		head, body, ok, err := Split([]byte(s))
		if !ok && (head != nil || err != nil) {
			t.Fatalf("no frontmatter but head %q, err %v", head, err)
		}
		var v map[string]any
		_ = Decode(head, &v, false)
		_ = body
	})
}
