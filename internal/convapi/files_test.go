package convapi

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// pngBytes is a 1x1 PNG.
var pngBytes, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")

// A message's files: workspace files only (links resolved), bounded,
// images as image blocks and text attached to the message's text.
func TestMessageFiles(t *testing.T) {
	fx := newFixture(t, fixtureOptions{sandbox: sandbox.WorkspaceWrite})
	ws := fx.cwd
	write := func(name string, b []byte) {
		t.Helper()
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("notes.txt", []byte("hello notes\n"))
	write("sub/code.go", []byte("package sub"))
	write("pic.png", pngBytes)
	write("bin.dat", []byte{0x7f, 0, 1, 2, 3})
	write("big.txt", []byte(strings.Repeat("x", maxTextBytes+1)))
	write("huge.png", append(append([]byte{}, pngBytes...), make([]byte, maxImageBytes)...))
	outside := filepath.Join(fx.root, "secret.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"out-link": outside, "in-link": "notes.txt", "dir-link": fx.root} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.create("f", map[string]any{})

	tests := []struct {
		name   string
		files  []string
		role   string
		status int
		msg    string // the error, or what the message's text must end with
		images int
	}{
		{name: "text and image", files: []string{"notes.txt", "pic.png"}, status: 200, msg: "look\n\n```notes.txt\nhello notes\n```", images: 1},
		{name: "absolute path in the workspace", files: []string{filepath.Join(ws, "sub/code.go")}, status: 200, msg: "look\n\n```sub/code.go\npackage sub\n```"},
		{name: "a link inside the workspace", files: []string{"in-link"}, status: 200, msg: "look\n\n```in-link\nhello notes\n```"},
		{name: "dot-dot", files: []string{"../secret.txt"}, status: 400, msg: `file "../secret.txt" is outside the workspace ` + ws},
		{name: "absolute outside", files: []string{outside}, status: 400, msg: `file "` + outside + `" is outside the workspace ` + ws},
		{name: "a link out", files: []string{"out-link"}, status: 400, msg: `file "out-link" is outside the workspace ` + ws + ` (it leads to ` + outside + `)`},
		{name: "through a linked directory", files: []string{"dir-link/secret.txt"}, status: 400, msg: `file "dir-link/secret.txt" is outside the workspace ` + ws + ` (it leads to ` + outside + `)`},
		{name: "missing", files: []string{"nope.txt"}, status: 400, msg: `file "nope.txt" not found in the workspace ` + ws},
		{name: "a directory", files: []string{"sub"}, status: 400, msg: `file "sub" is not a regular file`},
		{name: "a fifo", files: []string{"fifo"}, status: 400, msg: `file "fifo" is not a regular file`},
		{name: "binary", files: []string{"bin.dat"}, status: 400, msg: `file "bin.dat" is neither text (UTF-8) nor an image (PNG, JPEG, GIF, WebP)`},
		{name: "text too large", files: []string{"big.txt"}, status: 400, msg: `file "big.txt" is 1048577 bytes: a text file may have 1048576`},
		{name: "image too large", files: []string{"huge.png"}, status: 400, msg: `file "huge.png" is 5242948 bytes: at most 5242880`},
		{name: "too many", files: strings.Split(strings.Repeat("notes.txt ", 11), " ")[:11], status: 400, msg: "too many files: 11 (at most 10 a message)"},
		{name: "empty name", files: []string{""}, status: 400, msg: `invalid path in files: ""`},
		{name: "assistant message", files: []string{"notes.txt"}, role: "assistant", status: 400, msg: "files are taken on user messages only (this one's role is assistant)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			role := tt.role
			if role == "" {
				role = "user"
			}
			r := fx.do("POST", "/api/v2/conversations/f", map[string]any{"role": role, "content": "look", "files": tt.files})
			if tt.status != http.StatusOK {
				wantErr(t, r, tt.status, tt.msg)
				return
			}
			if r.status != http.StatusOK {
				t.Fatalf("POST: %s", r)
			}
			msgs := fx.layer.Sessions()[0].Session().Messages()
			m := msgs[len(msgs)-1]
			if m.Role != llm.RoleUser || len(m.Content) != 1+tt.images || m.Content[0].Text != tt.msg {
				t.Fatalf("message %+v, want text %q and %d images", m.Content, tt.msg, tt.images)
			}
			for _, c := range m.Content[1:] {
				if c.Type != llm.ContentImage || c.MimeType != "image/png" || c.Data != base64.StdEncoding.EncodeToString(pngBytes) {
					t.Errorf("image block %+v", c)
				}
			}
		})
	}

	// The files of a new conversation's first messages are read too.
	fx.ok("PUT", "/api/v2/conversations/g", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "first", "files": []string{"pic.png"}}}})
	wantErr(t, fx.do("PUT", "/api/v2/conversations/h", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "first", "files": []string{"out-link"}}}}),
		http.StatusBadRequest, `file "out-link" is outside the workspace `+ws+` (it leads to `+outside+`)`)
}
