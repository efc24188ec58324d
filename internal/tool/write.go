package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentd-dev/agentd/internal/llm"
)

type writeTool struct{ env Env }

func (t *writeTool) Spec() llm.Tool { return writeSpec() }

func (t *writeTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("write", call.Args)
	path, ok := a.str("path", true)
	if ok && path == "" {
		a.fail("path", "must not be empty")
	}
	content, _ := a.str("content", true)
	if r, bad := a.failed(); bad {
		return r
	}
	abs, err := t.env.resolve(path)
	if err != nil {
		return Errorf("Invalid path %q: %v", path, err)
	}
	if r := t.env.checkWritable(abs, path); r != nil {
		return *r
	}
	if r := t.env.checkReadable(abs, path); r != nil {
		return *r
	}
	unlock, err := t.env.Locks.Lock(ctx, abs)
	if err != nil {
		return Errorf("Operation aborted")
	}
	defer unlock()
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return Errorf("Cannot create the directory for %s: %v", path, unwrapPathError(err))
	}
	if err := writeFileInPlace(abs, []byte(content)); err != nil {
		return Errorf("Cannot write %s: %v", path, unwrapPathError(err))
	}
	return TextResult(fmt.Sprintf("Successfully wrote %d bytes to %s", len(content), path), nil)
}

// writeFileInPlace replaces the contents of path, creating it if needed.
// It writes through the existing inode rather than renaming a temporary
// file over it, so the file keeps its mode, owner, hard links and
// symlinks, as an editor's save would. Only regular files are written:
// O_NONBLOCK makes opening a FIFO without a reader fail instead of hang,
// and the check after opening refuses devices.
func writeFileInPlace(path string, data []byte) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return notRegularError(fi)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return errors.New("it is a named pipe (FIFO), not a regular file")
		}
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return notRegularError(fi)
	}
	// Truncate only after the checks, so a refused path is never emptied.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func notRegularError(fi os.FileInfo) error {
	m := fi.Mode()
	switch {
	case m.IsDir():
		return errors.New("it is a directory")
	case m&os.ModeNamedPipe != 0:
		return errors.New("it is a named pipe (FIFO), not a regular file")
	case m&os.ModeDevice != 0:
		return errors.New("it is a device, not a regular file")
	}
	return errors.New("it is not a regular file")
}

// unwrapPathError drops the operation and path from an *os.PathError: the
// message already names the path the model used.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
