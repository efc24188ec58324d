package convapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// Uploads (gptme's POST .../workspace/upload): a client's own files (a
// browser's, which has no path in the workspace) are kept with the
// conversation, in an attachments directory beside its session file
// (under the data dir, which the sandbox hides from tools), and a
// message names them in files as "attachments/<name>". Nothing is
// written in the workspace.

// attachmentsPrefix starts a files entry that names an upload.
const attachmentsPrefix = "attachments/"

// UploadedFile is one file an upload kept.
type UploadedFile struct {
	Name string `json:"name"`
	// Path is what a message's files takes: "attachments/<name>".
	Path     string `json:"path"`
	Type     string `json:"type" enum:"file"`
	Size     int64  `json:"size"`
	Modified string `json:"modified"`
	MimeType string `json:"mime_type,omitempty"`
}

// UploadResponse answers an upload.
type UploadResponse struct {
	Files []UploadedFile `json:"files"`
}

// attachmentsDir is where conversation h keeps its uploads; "" for a
// conversation without a session file.
func attachmentsDir(h *server.Hosted) string {
	f := h.Session().File()
	if f == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(f), "attachments", h.ID())
}

// uploadName checks a file name a client gave: one path component,
// printable, not hidden.
func uploadName(name string) (string, error) {
	base := filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	// Refusals start with gptme's "No valid files uploaded", which its
	// clients show and its tests look for; the rest says what was wrong.
	const refused = "No valid files uploaded: "
	switch {
	case strings.TrimSpace(base) == "" || base == "." || base == "/":
		return "", fault.New(fault.Invalid, refused+"an uploaded file needs a name (not only spaces)")
	case strings.HasPrefix(base, "."):
		return "", fault.New(fault.Invalid, refused+"file name "+quoteClip(name)+" starts with a dot")
	case len(base) > 200 || !utf8.ValidString(base) || strings.IndexFunc(base, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", fault.New(fault.Invalid, refused+"invalid file name "+quoteClip(name)+" (printable UTF-8, at most 200 bytes)")
	}
	return base, nil
}

// upload serves POST .../workspace/upload: multipart/form-data, every
// file part kept (at most maxMessageFiles, each at most maxImageBytes,
// all at most maxFilesBytes); a name already taken gets a number.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, p params) error {
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	dir := attachmentsDir(h)
	if dir == "" {
		return fault.New(fault.Conflict, "Conversation "+p.conv+" keeps no files (its session is in memory)")
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		return fault.New(fault.Invalid, "an upload is multipart/form-data")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFilesBytes+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		return fault.New(fault.Invalid, "reading the upload: "+err.Error())
	}
	type part struct {
		name string
		data []byte
	}
	var parts []part
	total := 0
	for {
		fp, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fault.New(fault.TooLarge, fmt.Sprintf("upload too large: at most %d bytes of files", maxFilesBytes))
		} else if err != nil {
			return fault.New(fault.Invalid, "reading the upload: "+err.Error())
		}
		if fp.FileName() == "" {
			fp.Close()
			continue // a plain form field
		}
		name, err := uploadName(fp.FileName())
		if err != nil {
			return err
		}
		if len(parts) == maxMessageFiles {
			return fault.New(fault.Invalid, fmt.Sprintf("too many files: at most %d an upload", maxMessageFiles))
		}
		data, err := io.ReadAll(io.LimitReader(fp, maxImageBytes+1))
		fp.Close()
		if errors.As(err, &mbe) {
			return fault.New(fault.TooLarge, fmt.Sprintf("upload too large: at most %d bytes of files", maxFilesBytes))
		} else if err != nil {
			return fault.New(fault.Invalid, "reading the upload: "+err.Error())
		}
		if len(data) > maxImageBytes {
			return fault.New(fault.TooLarge, fmt.Sprintf("file %s is more than %d bytes", quoteClip(name), maxImageBytes))
		}
		if total += len(data); total > maxFilesBytes {
			return fault.New(fault.TooLarge, fmt.Sprintf("upload too large: at most %d bytes of files", maxFilesBytes))
		}
		parts = append(parts, part{name, data})
	}
	if len(parts) == 0 {
		return fault.New(fault.Invalid, "No files provided")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	resp := UploadResponse{Files: []UploadedFile{}}
	for _, pt := range parts {
		name, f, err := createUnique(root, pt.name)
		if err != nil {
			return err
		}
		_, werr := f.Write(pt.data)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		resp.Files = append(resp.Files, UploadedFile{Name: name, Path: attachmentsPrefix + name, Type: "file", Size: int64(len(pt.data)),
			Modified: time.Now().UTC().Format(time.RFC3339), MimeType: mime.TypeByExtension(filepath.Ext(name))})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// createUnique creates name in root, or name-1, name-2, ... (before the
// extension) when it is taken; never over an existing file.
func createUnique(root *os.Root, name string) (string, *os.File, error) {
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for i := 0; i < 1000; i++ {
		n := name
		if i > 0 {
			n = stem + "-" + strconv.Itoa(i) + ext
		}
		f, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return n, f, err
	}
	return "", nil, fault.New(fault.Conflict, "too many files named "+quoteClip(name))
}
