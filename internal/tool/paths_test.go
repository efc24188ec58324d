package tool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// linkTree builds, under a fresh directory root:
//
//	prot/x              a file
//	prot/d/             a directory
//	work/               the working directory
//	work/abs  -> root/prot       (absolute target)
//	work/rel  -> ../prot         (relative target)
//	work/chain -> rel            (a link to a link)
//	work/dangle -> root/prot/new (nothing there yet)
//	work/reldangle -> ../prot/new2
//	work/up -> d/../../prot      (".." inside the target)
//	work/loop1 <-> work/loop2
//	work/file           a file
func linkTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mkdir(t, filepath.Join(root, "prot", "d"))
	mkdir(t, filepath.Join(root, "work", "d"))
	writeFile(t, filepath.Join(root, "prot", "x"), "secret\n")
	writeFile(t, filepath.Join(root, "work", "file"), "mine\n")
	links := [][2]string{
		{"abs", filepath.Join(root, "prot")},
		{"rel", "../prot"},
		{"chain", "rel"},
		{"dangle", filepath.Join(root, "prot", "new")},
		{"reldangle", "../prot/new2"},
		{"up", "d/../../prot"},
		{"loop1", "loop2"},
		{"loop2", "loop1"},
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(root, "work", l[0])); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestRealPath(t *testing.T) {
	root := linkTree(t)
	w := func(p string) string { return filepath.Join(root, "work", p) }
	prot := func(p string) string { return filepath.Join(root, "prot", p) }
	tests := []struct {
		name, in, want string
	}{
		{"plain file", w("file"), w("file")},
		{"missing file in a real directory", w("new.txt"), w("new.txt")},
		{"directory link, absolute target", w("abs/x"), prot("x")},
		{"directory link, relative target", w("rel/x"), prot("x")},
		{"link to a link", w("chain/x"), prot("x")},
		{"the link itself", w("abs"), filepath.Join(root, "prot")},
		{"dotdot inside the target", w("up/x"), prot("x")},
		{"missing file under a link", w("abs/new.txt"), prot("new.txt")},
		{"missing directories under a link", w("rel/a/b/c.txt"), prot("a/b/c.txt")},
		{"dangling link, absolute target", w("dangle"), prot("new")},
		{"dangling link, relative target", w("reldangle"), prot("new2")},
		{"below a regular file", w("file/x"), w("file/x")},
		{"root", "/", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RealPath(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("RealPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := RealPath(w("loop1/x")); !errors.Is(err, ErrTooManyLinks) {
		t.Errorf("loop: %v, want ErrTooManyLinks", err)
	}
	if _, err := RealPath("work/x"); err == nil {
		t.Error("a relative path was accepted")
	}
}

func TestResolvePath(t *testing.T) {
	env := Env{Cwd: "/w/proj", Home: "/home/u"}
	tests := []struct {
		tool, in, want string
	}{
		{"read", "a.go", "/w/proj/a.go"},
		{"write", "../prot/x", "/w/prot/x"},
		{"edit", "~/../prot/x", "/home/prot/x"},
		{"read", "@/prot/x", "/prot/x"},
		{"read", "@src/../a.go", "/w/proj/a.go"},
		{"write", "~", "/home/u"},
		{"write", "a\u00a0b", "/w/proj/a b"},
		{"ls", "", "/w/proj"},
		{"find", "", "/w/proj"},
		{"grep", "", "/w/proj"},
		{"ls", "..", "/w"},
	}
	for _, tt := range tests {
		got, err := env.ResolvePath(tt.tool, tt.in)
		if err != nil || got != tt.want {
			t.Errorf("%s %q = %q, %v; want %q", tt.tool, tt.in, got, err, tt.want)
		}
	}
	for _, name := range []string{"read", "write", "edit"} {
		if _, err := env.ResolvePath(name, ""); err == nil {
			t.Errorf("%s: an empty path resolved", name)
		}
	}
	if _, err := env.ResolvePath("read", "a\x00b"); err == nil {
		t.Error("a NUL byte resolved")
	}
	if got, _ := (Env{}).ResolvePath("ls", "x"); got != "/x" {
		t.Errorf("empty Cwd: %q, want /x as the tools use", got)
	}
}

// TestRealPathIsWhatWriteCreates checks the claim the permission gate
// relies on: RealPath of ResolvePath names the file the tool really
// writes, also through links to files and directories not there yet.
func TestRealPathIsWhatWriteCreates(t *testing.T) {
	root := linkTree(t)
	env := testEnv(t)
	env.Cwd = filepath.Join(root, "work")
	write := NewWrite(env)
	for _, p := range []string{"dangle", "reldangle", "abs/sub/new.txt", "chain/x", "up/d/y"} {
		t.Run(p, func(t *testing.T) {
			if r := run(t, write, map[string]any{"path": p, "content": "via " + p}); r.IsError {
				t.Fatalf("write: %s", r.Content[0].Text)
			}
			abs, err := env.ResolvePath("write", p)
			if err != nil {
				t.Fatal(err)
			}
			real, err := RealPath(abs)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(real)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("RealPath says %s: %v %v", real, fi, err)
			}
			if got, _ := os.ReadFile(real); string(got) != "via "+p {
				t.Errorf("%s holds %q", real, got)
			}
		})
	}
}
