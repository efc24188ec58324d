package tool

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

func TestReadText(t *testing.T) {
	env := testEnv(t)
	rd := NewRead(env)
	writeFile(t, filepath.Join(env.Cwd, "ten.txt"), numbered(10))
	writeFile(t, filepath.Join(env.Cwd, "noeol.txt"), "a\nb")
	writeFile(t, filepath.Join(env.Cwd, "empty.txt"), "")
	writeFile(t, filepath.Join(env.Cwd, "crlf.txt"), "a\r\nb\r\n")
	writeFile(t, filepath.Join(env.Home, "notes.md"), "home file\n")
	writeFile(t, filepath.Join(env.Cwd, "sub dir", "x.txt"), "x\n")

	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"whole file", map[string]any{"path": "ten.txt"}, numbered(10)},
		{"absolute path", map[string]any{"path": filepath.Join(env.Cwd, "ten.txt")}, numbered(10)},
		{"at prefix", map[string]any{"path": "@ten.txt"}, numbered(10)},
		{"tilde", map[string]any{"path": "~/notes.md"}, "home file\n"},
		{"nbsp folded", map[string]any{"path": "sub\u00a0dir/x.txt"}, "x\n"},
		{"no final newline", map[string]any{"path": "noeol.txt"}, "a\nb"},
		{"empty", map[string]any{"path": "empty.txt"}, ""},
		{"crlf kept", map[string]any{"path": "crlf.txt"}, "a\r\nb\r\n"},
		{"offset", map[string]any{"path": "ten.txt", "offset": 9}, "line 9\nline 10\n"},
		{"offset as string", map[string]any{"path": "ten.txt", "offset": "9"}, "line 9\nline 10\n"},
		{"offset zero is start", map[string]any{"path": "ten.txt", "offset": 0, "limit": 1}, "line 1\n\n[9 more lines in file. Use offset=2 to continue.]"},
		{"negative offset is start", map[string]any{"path": "ten.txt", "offset": -5, "limit": 1}, "line 1\n\n[9 more lines in file. Use offset=2 to continue.]"},
		{"limit", map[string]any{"path": "ten.txt", "offset": 3, "limit": 2}, "line 3\nline 4\n\n[6 more lines in file. Use offset=5 to continue.]"},
		{"limit to the end", map[string]any{"path": "ten.txt", "offset": 9, "limit": 2}, "line 9\nline 10\n"},
		{"limit past the end", map[string]any{"path": "ten.txt", "offset": 9, "limit": 100}, "line 9\nline 10\n"},
		{"fractional numbers", map[string]any{"path": "ten.txt", "offset": 2.7, "limit": 1.9}, "line 2\n\n[8 more lines in file. Use offset=3 to continue.]"},
		{"last line without newline", map[string]any{"path": "noeol.txt", "offset": 2}, "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustOK(t, run(t, rd, tc.args))
			if got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	env := testEnv(t)
	rd := NewRead(env)
	writeFile(t, filepath.Join(env.Cwd, "ten.txt"), numbered(10))
	writeFile(t, filepath.Join(env.Cwd, "bin.dat"), "ELF\x00\x01\x02binary")
	if err := syscall.Mkfifo(filepath.Join(env.Cwd, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args any
		want []string
	}{
		{"missing file", map[string]any{"path": "nope.txt"}, []string{"File not found: nope.txt"}},
		{"directory", map[string]any{"path": "."}, []string{"is a directory"}},
		{"fifo", map[string]any{"path": "fifo"}, []string{"named pipe"}},
		{"device", map[string]any{"path": "/dev/null"}, []string{"device"}},
		{"binary", map[string]any{"path": "bin.dat"}, []string{"binary"}},
		{"nul in path", map[string]any{"path": "ten\x00.txt"}, []string{"NUL"}},
		{"offset beyond end", map[string]any{"path": "ten.txt", "offset": 11}, []string{"Offset 11 is beyond end of file (10 lines total)"}},
		{"huge offset", map[string]any{"path": "ten.txt", "offset": 1e300}, []string{"beyond end of file"}},
		{"zero limit", map[string]any{"path": "ten.txt", "limit": 0}, []string{"limit: must be at least 1"}},
		{"negative limit", map[string]any{"path": "ten.txt", "limit": -3}, []string{"limit: must be at least 1"}},
		{"missing path", map[string]any{}, []string{`Validation failed for tool "read"`, "path: required string is missing"}},
		{"empty path", map[string]any{"path": ""}, []string{"path: must not be empty"}},
		{"wrong type", map[string]any{"path": map[string]any{"x": 1}}, []string{"path: must be a string"}},
		{"bad number", map[string]any{"path": "ten.txt", "offset": "soon"}, []string{"offset: must be a number"}},
		{"not an object", `["ten.txt"]`, []string{"arguments must be a JSON object"}},
		{"invalid json", `{"path":`, []string{"not valid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan Result, 1)
			go func() { done <- run(t, rd, tc.args) }()
			select {
			case r := <-done:
				mustErr(t, r, tc.want...)
			case <-time.After(10 * time.Second):
				t.Fatal("read hung")
			}
		})
	}
}

func TestReadTruncation(t *testing.T) {
	env := testEnv(t)
	rd := NewRead(env)
	long := strings.Repeat("x", 60*1024)
	files := map[string]string{
		"2000.txt":      numbered(2000),
		"2001.txt":      numbered(2001),
		"exact50k.txt":  strings.Repeat("y", MaxBytes-2) + "\n" + "z", // 51200 bytes
		"over50k.txt":   strings.Repeat("y", MaxBytes-2) + "\n" + "zz",
		"longfirst.txt": long + "\nnext\n",
		"longmid.txt":   "a\nb\n" + long + "\nc\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(env.Cwd, name), content)
	}

	t.Run("exactly 2000 lines", func(t *testing.T) {
		r := run(t, rd, map[string]any{"path": "2000.txt"})
		if got := mustOK(t, r); got != numbered(2000) || r.Details != nil {
			t.Fatalf("2000 lines must not be truncated; tail %q details %v", got[len(got)-40:], r.Details)
		}
	})
	t.Run("2001 lines", func(t *testing.T) {
		r := run(t, rd, map[string]any{"path": "2001.txt"})
		got := mustOK(t, r)
		want := strings.TrimSuffix(numbered(2000), "\n") + "\n\n[Showing lines 1-2000 of 2001. Use offset=2001 to continue.]"
		if got != want {
			t.Fatalf("tail %q", got[len(got)-100:])
		}
		d := detailsJSON(t, r)["truncation"].(map[string]any)
		if d["truncatedBy"] != "lines" || d["outputLines"] != 2000.0 || d["totalLines"] != 2001.0 || d["maxLines"] != 2000.0 {
			t.Fatalf("details %v", d)
		}
		// Continuing where the notice says finishes the file.
		if got := mustOK(t, run(t, rd, map[string]any{"path": "2001.txt", "offset": 2001})); got != "line 2001\n" {
			t.Fatalf("continuation %q", got)
		}
	})
	t.Run("exactly 50KB", func(t *testing.T) {
		r := run(t, rd, map[string]any{"path": "exact50k.txt"})
		if got := mustOK(t, r); got != files["exact50k.txt"] {
			t.Fatalf("50KB must not be truncated: len %d", len(got))
		}
	})
	t.Run("over 50KB", func(t *testing.T) {
		r := run(t, rd, map[string]any{"path": "over50k.txt"})
		got := mustOK(t, r)
		want := strings.Repeat("y", MaxBytes-2) + "\n\n[Showing lines 1-1 of 2 (50.0KB limit). Use offset=2 to continue.]"
		if got != want {
			t.Fatalf("tail %q", got[len(got)-80:])
		}
		d := detailsJSON(t, r)["truncation"].(map[string]any)
		if d["truncatedBy"] != "bytes" || d["outputBytes"] != float64(MaxBytes-2) || d["totalBytes"] != float64(MaxBytes+1) {
			t.Fatalf("details %v", d)
		}
	})
	t.Run("first line over the limit", func(t *testing.T) {
		r := run(t, rd, map[string]any{"path": "longfirst.txt"})
		got := mustOK(t, r)
		want := "[Line 1 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '1p' longfirst.txt | head -c 51200]"
		if got != want {
			t.Fatalf("got %q", got)
		}
		if d := detailsJSON(t, r)["truncation"].(map[string]any); d["firstLineExceedsLimit"] != true {
			t.Fatalf("details %v", d)
		}
	})
	t.Run("long line in the middle", func(t *testing.T) {
		got := mustOK(t, run(t, rd, map[string]any{"path": "longmid.txt"}))
		if got != "a\nb\n\n[Showing lines 1-2 of 4 (50.0KB limit). Use offset=3 to continue.]" {
			t.Fatalf("got %q", got)
		}
		got = mustOK(t, run(t, rd, map[string]any{"path": "longmid.txt", "offset": 3}))
		if !strings.HasPrefix(got, "[Line 3 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '3p' longmid.txt") {
			t.Fatalf("got %q", got)
		}
		got = mustOK(t, run(t, rd, map[string]any{"path": "longmid.txt", "offset": 4}))
		if got != "c\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("limit with truncation", func(t *testing.T) {
		got := mustOK(t, run(t, rd, map[string]any{"path": "2001.txt", "offset": 1, "limit": 2500}))
		if !strings.HasSuffix(got, "[Showing lines 1-2000 of 2001. Use offset=2001 to continue.]") {
			t.Fatalf("tail %q", got[len(got)-80:])
		}
	})
}

func TestReadImage(t *testing.T) {
	env := testEnv(t)
	rd := NewRead(env)
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1}, 100)...)
	writeFile(t, filepath.Join(env.Cwd, "shot.png"), string(png))
	// Named .png but really text: sniffing decides, not the name.
	writeFile(t, filepath.Join(env.Cwd, "fake.png"), "just text\n")
	writeFile(t, filepath.Join(env.Cwd, "pic.webp"), "RIFF\x00\x00\x00\x00WEBPVP8 ")
	big := append([]byte("\xff\xd8\xff\xe0"), make([]byte, 4*1024*1024)...)
	writeFile(t, filepath.Join(env.Cwd, "big.jpg"), string(big))

	r := run(t, rd, map[string]any{"path": "shot.png"})
	mustOK(t, r)
	if len(r.Content) != 2 || r.Content[0].Text != "Read image file [image/png]" || r.Content[1].Type != llm.ContentImage ||
		r.Content[1].MimeType != "image/png" || r.Content[1].Data != base64.StdEncoding.EncodeToString(png) {
		t.Fatalf("image result %+v", r.Content)
	}
	if got := mustOK(t, run(t, rd, map[string]any{"path": "fake.png"})); got != "just text\n" {
		t.Fatalf("fake png %q", got)
	}
	r = run(t, rd, map[string]any{"path": "pic.webp"})
	if len(r.Content) != 2 || r.Content[1].MimeType != "image/webp" {
		t.Fatalf("webp %+v", r.Content)
	}
	r = run(t, rd, map[string]any{"path": "big.jpg"})
	if len(r.Content) != 1 || !strings.Contains(textOf(r), "Image omitted") {
		t.Fatalf("big image %q", textOf(r))
	}
}

func TestReadAborted(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "a.txt"), "a\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mustErr(t, runCtx(t, ctx, NewRead(env), map[string]any{"path": "a.txt"}), "aborted")
}

func TestReadScreenshotName(t *testing.T) {
	env := testEnv(t)
	name := "Screenshot 2024-01-01 at 10.00.00\u202fAM.png"
	writeFile(t, filepath.Join(env.Cwd, name), "not really a png\n")
	got := mustOK(t, run(t, NewRead(env), map[string]any{"path": "Screenshot 2024-01-01 at 10.00.00 AM.png"}))
	if got != "not really a png\n" {
		t.Fatalf("got %q", got)
	}
}

func TestWrite(t *testing.T) {
	env := testEnv(t)
	wr := NewWrite(env)
	got := mustOK(t, run(t, wr, map[string]any{"path": "a/b/c.txt", "content": "héllo\n"}))
	if got != "Successfully wrote 7 bytes to a/b/c.txt" {
		t.Fatalf("got %q", got)
	}
	p := filepath.Join(env.Cwd, "a", "b", "c.txt")
	if readFile(t, p) != "héllo\n" {
		t.Fatal("content")
	}
	// Overwrite keeps the file's mode.
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, wr, map[string]any{"path": p, "content": "x"}))
	if readFile(t, p) != "x" {
		t.Fatal("overwrite")
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	mustOK(t, run(t, wr, map[string]any{"path": "empty.txt", "content": ""}))
	if readFile(t, filepath.Join(env.Cwd, "empty.txt")) != "" {
		t.Fatal("empty")
	}

	if err := syscall.Mkfifo(filepath.Join(env.Cwd, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(env.Cwd, "file"), "f")
	tests := []struct {
		name string
		args any
		want []string
	}{
		{"missing content", map[string]any{"path": "x"}, []string{"content: required string is missing"}},
		{"missing both", map[string]any{}, []string{"path: required", "content: required"}},
		{"content wrong type", map[string]any{"path": "x", "content": []int{1}}, []string{"content: must be a string"}},
		{"directory", map[string]any{"path": "a", "content": "x"}, []string{"directory"}},
		{"fifo", map[string]any{"path": "fifo", "content": "x"}, []string{"named pipe"}},
		{"device", map[string]any{"path": "/dev/null", "content": "x"}, []string{"device"}},
		{"parent is a file", map[string]any{"path": "file/x.txt", "content": "x"}, []string{"Cannot create the directory"}},
		{"nul", map[string]any{"path": "a\x00b", "content": "x"}, []string{"NUL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan Result, 1)
			go func() { done <- run(t, wr, tc.args) }()
			select {
			case r := <-done:
				mustErr(t, r, tc.want...)
			case <-time.After(10 * time.Second):
				t.Fatal("write hung")
			}
		})
	}
	// Numbers are converted to strings, as pi's argument coercion does.
	mustOK(t, run(t, wr, map[string]any{"path": "n.txt", "content": 42}))
	if readFile(t, filepath.Join(env.Cwd, "n.txt")) != "42" {
		t.Fatal("coerced content")
	}
}
