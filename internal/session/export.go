package session

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// ErrExportRefused matches (errors.Is) every error of ExportHTMLFile
// that is about the path the client asked for (outside the allowed
// directories, an existing file, a protected one) rather than a failure
// to write: the client's mistake, not the server's.
var ErrExportRefused = errors.New("export refused")

// refused is a refused export: a fault whose text is the reason alone,
// and which matches ErrExportRefused.
func refused(format string, args ...any) error {
	return &fault.Error{Code: fault.Forbidden, Message: fmt.Sprintf(format, args...), Cause: ErrExportRefused}
}

// writeFailed is a failure to write the file the client named; the
// system's reason is its to see.
func writeFailed(p string, err error) error {
	return fault.Wrap(fault.Failed, err, fmt.Sprintf("cannot write %s: %v", p, err))
}

// ExportRequest says where ExportHTMLFile writes and what it may replace.
type ExportRequest struct {
	// Path is the file to write, relative to Cwd unless absolute; ""
	// is agentd-session-<id>.html in Cwd.
	Path string
	// Cwd is the session's working directory. Exports go under it or
	// under ExportsDir, nowhere else, once every symlink is resolved.
	Cwd string
	// ExportsDir is the other directory exports may go to (the data
	// dir's exports folder); it is created when an export names it. ""
	// allows only Cwd.
	ExportsDir string
	// Overwrite allows replacing an existing file. A protected file or a
	// session transcript is never replaced.
	Overwrite bool
	// Protected are files an export must never replace or create,
	// whether they exist yet or not: the server's journal and index, the
	// files of live sessions. The session's own file is always
	// protected, and so is every existing file that is a transcript.
	Protected []string
}

// ExportHTMLFile writes the session as HTML where req says and returns
// the path written (symlinks in its directory resolved). The page goes
// to a temporary file in the same directory that is then renamed over
// the target, so a reader never sees half a page, and a symlink at the
// target is replaced rather than followed. Without Overwrite the rename
// is a link that fails if the target appeared meanwhile.
func (s *Session) ExportHTMLFile(req ExportRequest) (string, error) {
	p := req.Path
	if p == "" {
		p = fmt.Sprintf("agentd-session-%s.html", s.ID())
	}
	if strings.ContainsRune(p, 0) {
		return "", refused("export path %q contains a NUL byte", p)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(req.Cwd, p)
	}
	p = filepath.Clean(p)
	name := filepath.Base(p)
	if name == string(filepath.Separator) || name == "." || name == ".." {
		return "", refused("export path %s names no file", p)
	}
	dir, real, err := exportDir(req, p)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	target := filepath.Join(real, name)
	if err := s.checkExportTarget(req, dir, name, p, target); err != nil {
		return "", err
	}
	if err := s.writeExport(dir, name, req.Overwrite); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", refused("export path %s exists; send overwrite: true to replace it", p)
		}
		return "", writeFailed(p, err)
	}
	return target, nil
}

// exportDir opens the directory p is to be written in, once it is known
// to lie under an allowed root. It is opened as an os.Root beneath the
// root, so a directory swapped for a symlink after the check cannot lead
// the write out.
func exportDir(req ExportRequest, p string) (*os.Root, string, error) {
	parent := filepath.Dir(p)
	if req.ExportsDir != "" && parent == filepath.Clean(req.ExportsDir) {
		if err := os.MkdirAll(req.ExportsDir, 0o700); err != nil {
			return nil, "", writeFailed(p, err)
		}
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", refused("cannot write %s: directory %s does not exist", p, parent)
		}
		return nil, "", writeFailed(p, err)
	}
	for _, r := range []string{req.Cwd, req.ExportsDir} {
		if r == "" {
			continue
		}
		rr, err := filepath.EvalSymlinks(r)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(rr, real)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		root, err := os.OpenRoot(rr)
		if err != nil {
			return nil, "", writeFailed(p, err)
		}
		if rel == "." {
			return root, real, nil
		}
		sub, err := root.OpenRoot(rel)
		root.Close()
		if err != nil {
			return nil, "", writeFailed(p, err)
		}
		return sub, real, nil
	}
	where := "the session's working directory " + req.Cwd
	if req.ExportsDir != "" {
		where += " and " + req.ExportsDir
	}
	return nil, "", refused("export path %s is outside %s", p, where)
}

// checkExportTarget refuses to replace what an export must not: a
// protected file (by where it is, and by identity, so a hard link or
// symlink to one counts too), a transcript, a directory or a special
// file, and without Overwrite anything at all.
func (s *Session) checkExportTarget(req ExportRequest, dir *os.Root, name, p, target string) error {
	protected := append([]string{s.File()}, req.Protected...)
	for _, q := range protected {
		if q != "" && samePlace(target, q) {
			return refused("export path %s is a file agentd keeps (%s); exports never replace it", p, q)
		}
	}
	fi, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return writeFailed(p, err)
	}
	if fi.IsDir() {
		return refused("export path %s is a directory", p)
	}
	// What the entry is, following a symlink wherever it leads: only
	// metadata is read.
	if st, err := os.Stat(target); err == nil {
		for _, q := range protected {
			if q == "" {
				continue
			}
			if qs, err := os.Stat(q); err == nil && os.SameFile(st, qs) {
				return refused("export path %s is a file agentd keeps (%s); exports never replace it", p, q)
			}
		}
	}
	if ok, _ := transcript.IsSessionFile(target); ok {
		return refused("export path %s is a session file; exports never replace one", p)
	}
	if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
		return refused("export path %s exists and is not a regular file", p)
	}
	if !req.Overwrite {
		return refused("export path %s exists; send overwrite: true to replace it", p)
	}
	return nil
}

// samePlace reports whether target (its directory resolved) is where the
// path q points, its directory resolved too: q need not exist.
func samePlace(target, q string) bool {
	qd, err := filepath.EvalSymlinks(filepath.Dir(filepath.Clean(q)))
	if err != nil {
		return false
	}
	return filepath.Join(qd, filepath.Base(q)) == target
}

// writeExport renders the page into a temporary file in dir and moves it
// to name: renamed over it with overwrite, else linked, which fails with
// fs.ErrExist if name exists by now.
func (s *Session) writeExport(dir *os.Root, name string, overwrite bool) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".agentd-export-" + hex.EncodeToString(rnd[:]) + ".tmp"
	// 0600 as session files: the page holds the whole conversation.
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer dir.Remove(tmp) // gone after a rename; the extra name after a link
	w := bufio.NewWriterSize(f, 64<<10)
	err = s.ExportHTML(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if overwrite {
		err = dir.Rename(tmp, name)
	} else if err = dir.Link(tmp, name); err != nil && !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: check, then rename.
		if _, lerr := dir.Lstat(name); lerr == nil {
			return fs.ErrExist
		}
		err = dir.Rename(tmp, name)
	}
	if err != nil {
		return err
	}
	if d, err := dir.Open("."); err == nil {
		_ = d.Sync() // best effort: the name's durability, not the data's
		d.Close()
	}
	return nil
}
