package convapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
)

// A message's files (gptme's "files"): paths in the conversation's
// workspace, read when the message is added. An image becomes an image
// block; a text file is attached to the message's text as a fenced block
// named by its path, as gptme embeds it. A client reads no more than the
// session's tools could: the file must be inside the workspace once every
// link is resolved, and readable under the session's sandbox.
const (
	maxMessageFiles = 10
	maxImageBytes   = 5 << 20 // gptme's limit for an image
	maxTextBytes    = 1 << 20
	maxFilesBytes   = 10 << 20 // all of one message's files
)

// imageTypes are the image formats a message may carry.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// checkFileNames is what can be said of a message's files before the
// conversation's workspace is known.
func checkFileNames(role string, files []string) error {
	if len(files) == 0 {
		return nil
	}
	if role != "user" {
		return fault.New(fault.Invalid, "files are taken on user messages only (this one's role is "+role+")")
	}
	if len(files) > maxMessageFiles {
		return fault.New(fault.Invalid, fmt.Sprintf("too many files: %d (at most %d a message)", len(files), maxMessageFiles))
	}
	for _, f := range files {
		if f == "" || strings.ContainsRune(f, 0) || len(f) > 4096 {
			// "files" in the wording: gptme clients look for the field name.
			return fault.New(fault.Invalid, "invalid path in files: "+quoteClip(f))
		}
	}
	return nil
}

func quoteClip(s string) string { return fmt.Sprintf("%q", clip(s, 200)) }

// attachFiles reads files from h's workspace into m, a user message of
// one text block.
func attachFiles(h *server.Hosted, m *llm.Message, files []string) error {
	if len(files) == 0 {
		return nil
	}
	ws := h.Cwd()
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return fmt.Errorf("resolving the workspace %s: %w", ws, err)
	}
	root, err := os.OpenRoot(realWS)
	if err != nil {
		return fmt.Errorf("opening the workspace %s: %w", ws, err)
	}
	defer root.Close()
	env := h.Session().ToolEnv()
	var text strings.Builder
	var images []llm.Content
	total := 0
	for _, f := range files {
		// An upload of the conversation's, else a workspace file.
		if name, ok := strings.CutPrefix(f, attachmentsPrefix); ok && isUpload(h, name) {
			data, err := readUpload(h, name, f)
			if err != nil {
				return err
			}
			if total += len(data); total > maxFilesBytes {
				return fault.New(fault.Invalid, fmt.Sprintf("files too large: more than %d bytes in one message", maxFilesBytes))
			}
			if err := attachData(&text, &images, name, f, data); err != nil {
				return err
			}
			continue
		}
		rel, err := workspaceRel(ws, realWS, f)
		if err != nil {
			return err
		}
		// Every link resolved, the file must still be in the workspace.
		real, err := filepath.EvalSymlinks(filepath.Join(realWS, rel))
		if errors.Is(err, fs.ErrNotExist) {
			return fault.New(fault.Invalid, "file "+quoteClip(f)+" not found in the workspace "+ws)
		} else if err != nil {
			return fault.New(fault.Invalid, "file "+quoteClip(f)+": "+err.Error())
		}
		if !within(realWS, real) {
			return fault.New(fault.Invalid, "file "+quoteClip(f)+" is outside the workspace "+ws+" (it leads to "+real+")")
		}
		if err := env.Readable(real, f); err != nil {
			return fault.New(fault.Invalid, err.Error())
		}
		data, err := readWorkspaceFile(root, rel, f)
		if err != nil {
			return err
		}
		total += len(data)
		if total > maxFilesBytes {
			return fault.New(fault.Invalid, fmt.Sprintf("files too large: more than %d bytes in one message", maxFilesBytes))
		}
		if err := attachData(&text, &images, filepath.ToSlash(rel), f, data); err != nil {
			return err
		}
	}
	if text.Len() > 0 {
		if len(m.Content) > 0 && m.Content[0].Type == llm.ContentText {
			m.Content[0].Text += text.String()
		} else {
			m.Content = append(m.Content, llm.Text(strings.TrimPrefix(text.String(), "\n\n")))
		}
	}
	m.Content = append(m.Content, images...)
	return nil
}

// workspaceRel names f, absolute or relative to the workspace, relative
// to the workspace; a path outside it is refused.
func workspaceRel(ws, realWS, f string) (string, error) {
	if !filepath.IsAbs(f) {
		rel := filepath.Clean(f)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "", fault.New(fault.Invalid, "file "+quoteClip(f)+" is outside the workspace "+ws)
		}
		return rel, nil
	}
	for _, base := range []string{ws, realWS} {
		if rel, err := filepath.Rel(base, filepath.Clean(f)); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return rel, nil
		}
	}
	return "", fault.New(fault.Invalid, "file "+quoteClip(f)+" is outside the workspace "+ws)
}

// within reports whether path is dir or below it (both real).
func within(dir, path string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// readWorkspaceFile reads a regular file through the workspace's root,
// which refuses a link that leads out of it should one be swapped in
// after the check; non-blocking, so a FIFO swapped in cannot hang the
// command.
func readWorkspaceFile(root *os.Root, rel, name string) ([]byte, error) {
	fh, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(name)+": "+strings.TrimPrefix(err.Error(), "openat "))
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(name)+" is not a regular file")
	}
	if fi.Size() > maxImageBytes {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("file %s is %d bytes: at most %d", quoteClip(name), fi.Size(), maxImageBytes))
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxImageBytes+1))
	if err != nil {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(name)+": "+err.Error())
	}
	if len(data) > maxImageBytes {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("file %s is more than %d bytes", quoteClip(name), maxImageBytes))
	}
	return data, nil
}

// attachData adds one file's data to a message being built: an image as
// an image block, text fenced with label.
func attachData(text *strings.Builder, images *[]llm.Content, label, name string, data []byte) error {
	if mt := http.DetectContentType(data); imageTypes[mt] {
		*images = append(*images, llm.Image(base64.StdEncoding.EncodeToString(data), mt))
		return nil
	}
	if len(data) > maxTextBytes {
		return fault.New(fault.Invalid, fmt.Sprintf("file %s is %d bytes: a text file may have %d", quoteClip(name), len(data), maxTextBytes))
	}
	if !utf8.Valid(data) || strings.ContainsRune(string(data), 0) {
		return fault.New(fault.Invalid, "file "+quoteClip(name)+" is neither text (UTF-8) nor an image (PNG, JPEG, GIF, WebP)")
	}
	fmt.Fprintf(text, "\n\n```%s\n%s", label, data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		text.WriteByte('\n')
	}
	text.WriteString("```")
	return nil
}

// isUpload reports whether conversation h has an upload called name.
func isUpload(h *server.Hosted, name string) bool {
	dir := attachmentsDir(h)
	if dir == "" || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") {
		return false
	}
	_, err := os.Lstat(filepath.Join(dir, name))
	return err == nil
}

// readUpload reads upload name of conversation h (f as the client named
// it): one component, in the conversation's attachments directory.
func readUpload(h *server.Hosted, name, f string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(f)+" is not an upload of this conversation")
	}
	root, err := os.OpenRoot(attachmentsDir(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(f)+" not found: this conversation has no uploads")
	} else if err != nil {
		return nil, err
	}
	defer root.Close()
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.Invalid, "file "+quoteClip(f)+" not found among this conversation's uploads")
	}
	return readWorkspaceFile(root, name, f)
}
