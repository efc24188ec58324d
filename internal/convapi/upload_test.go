package convapi

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// multipartBody builds an upload of name/content pairs.
func multipartBody(t *testing.T, files ...[2]string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range files {
		w, err := mw.CreateFormFile("file", f[0])
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f[1]))
	}
	mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

// A browser's files are uploaded to the conversation (kept beside its
// session file, never in the workspace) and named in a message's files as
// attachments/<name>.
func TestUploadThenAttach(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	fx.create("up", map[string]any{})
	fx.create("other", map[string]any{})
	body, ct := multipartBody(t, [2]string{"notes.txt", "uploaded words\n"}, [2]string{"../../pic.png", string(pngBytes)}, [2]string{"notes.txt", "second"})
	r := fx.ok("POST", "/api/v2/conversations/up/workspace/upload", body, "Content-Type", ct)
	var paths []string
	for _, f := range r.m["files"].([]any) {
		paths = append(paths, f.(map[string]any)["path"].(string))
	}
	if strings.Join(paths, " ") != "attachments/notes.txt attachments/pic.png attachments/notes-1.txt" {
		t.Fatalf("upload: %s", r)
	}
	fx.ok("POST", "/api/v2/conversations/up", map[string]any{"role": "user", "content": "see", "files": paths})
	var m *llm.Message
	for _, h := range fx.layer.Sessions() {
		if h.ID() == "up" {
			msgs := h.Session().Messages()
			m = msgs[len(msgs)-1]
		}
	}
	if m == nil || len(m.Content) != 2 || m.Content[0].Text != "see\n\n```notes.txt\nuploaded words\n```\n\n```notes-1.txt\nsecond\n```" || m.Content[1].Type != llm.ContentImage {
		t.Fatalf("message %+v", m)
	}

	tests := []struct {
		name   string
		conv   string
		files  [][2]string
		ct     string
		status int
		msg    string
	}{
		{"hidden name", "up", [][2]string{{".env", "x"}}, "", 400, `No valid files uploaded: file name ".env" starts with a dot`},
		{"spaces only", "up", [][2]string{{"   ", "x"}}, "", 400, "No valid files uploaded: an uploaded file needs a name (not only spaces)"},
		{"tab only", "up", [][2]string{{" \t ", "x"}}, "", 400, "No valid files uploaded: an uploaded file needs a name (not only spaces)"},
		{"no files", "up", nil, "", 400, "No files provided"},
		{"not multipart", "up", nil, "application/json", 400, "an upload is multipart/form-data"},
		{"too large", "up", [][2]string{{"big.png", strings.Repeat("x", maxImageBytes+1)}}, "", 413, `file "big.png" is more than 5242880 bytes`},
		{"unknown conversation", "nope", [][2]string{{"a.txt", "x"}}, "", 404, "Conversation not found: nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := multipartBody(t, tt.files...)
			if tt.ct != "" {
				ct = tt.ct
			}
			wantErr(t, fx.do("POST", "/api/v2/conversations/"+tt.conv+"/workspace/upload", body, "Content-Type", ct), tt.status, tt.msg)
		})
	}
	// Another conversation's uploads are not this one's.
	wantErr(t, fx.do("POST", "/api/v2/conversations/other", map[string]any{"role": "user", "content": "x", "files": []string{"attachments/notes.txt"}}),
		http.StatusBadRequest, `file "attachments/notes.txt" not found in the workspace `+fx.cwd)
}

// An uploaded file's name, whatever the client sent, is refused or is
// one visible path component.
func FuzzUploadName(f *testing.F) {
	for _, s := range []string{"notes.txt", "../../etc/passwd", ".env", `C:\x\y.png`, "a/b/", "/", "", "é\u200b.txt", "..", "x\x00y", "   ", "\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := uploadName(name)
		if err != nil {
			return
		}
		if strings.TrimSpace(got) == "" || got == "." || got == ".." || strings.ContainsAny(got, "/\\\x00") || strings.HasPrefix(got, ".") || len(got) > 200 {
			t.Fatalf("uploadName(%q) = %q", name, got)
		}
	})
}
