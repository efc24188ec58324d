package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a session path that names a FIFO, socket,
// device or directory. Such a path is never opened in blocking mode: a
// FIFO named *.jsonl would otherwise hang whoever reads it until some
// process writes to it.
var ErrNotRegular = errors.New("not a regular file")

// FileID identifies a file on disk by device and inode. Two paths name the
// same file (through hard links, symlinks or different spellings) exactly
// when their FileIDs are equal, which comparing paths cannot tell.
type FileID struct {
	Dev uint64
	Ino uint64
}

// FileIDOf is the identity of the file at path, following symlinks.
func FileIDOf(path string) (FileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileID{}, err
	}
	return fileIDOf(fi)
}

// FileID is the identity of the file the session is appended to: the
// open descriptor's once there is one, else what its path names now. An
// in-memory session, or a new one whose file the first append has not
// created yet, has none.
func (f *File) FileID() (FileID, error) {
	if f.memory {
		return FileID{}, errors.New("transcript: an in-memory session has no file")
	}
	f.wmu.Lock()
	fd := f.fd
	var fi fs.FileInfo
	var err error
	if fd != nil {
		fi, err = fd.Stat()
	}
	f.wmu.Unlock()
	if fd == nil {
		return FileIDOf(f.path)
	}
	if err != nil {
		return FileID{}, err
	}
	return fileIDOf(fi)
}

func fileIDOf(fi fs.FileInfo) (FileID, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, fmt.Errorf("%s: this system reports no device and inode", fi.Name())
	}
	// Dev is an int32 on some systems.
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// notRegular describes fi, which is not a regular file, for an error.
func notRegular(path string, fi fs.FileInfo) error {
	kind := "special file"
	switch m := fi.Mode(); {
	case m.IsDir():
		kind = "directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeDevice != 0:
		kind = "device"
	}
	return fmt.Errorf("%s is a %s, %w", path, kind, ErrNotRegular)
}

// openRegular opens path for flag only if it is a regular file. Stat
// comes first, so a device is never opened at all; the open is
// non-blocking, so a FIFO put there in between cannot hang the caller,
// and the descriptor's own stat decides. O_NONBLOCK changes nothing for a
// regular file.
func openRegular(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	if flag&os.O_CREATE == 0 {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, nil, notRegular(path, fi)
		}
	}
	fd, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		fd.Close()
		return nil, nil, notRegular(path, fi)
	}
	return fd, fi, nil
}

// readRegular reads the whole of the regular file at path, up to limit
// bytes when limit > 0.
func readRegular(path string, limit int64) ([]byte, fs.FileInfo, error) {
	fd, fi, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	size := fi.Size()
	var r io.Reader = fd
	if limit > 0 {
		size = min(size, limit)
		r = io.LimitReader(fd, limit)
	}
	// The size is a hint: the file may grow while it is read.
	buf := bytes.NewBuffer(make([]byte, 0, size+512))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), fi, nil
}

// sniffLimit bounds what IsSessionFile reads: a session header is the
// first line and is small.
const sniffLimit = 1 << 20

// IsSessionFile reports whether path is a session transcript (pi's or
// agentd's): a regular file whose first readable line is a session
// header. Whatever is not a regular file is not one, and is not opened
// blocking.
func IsSessionFile(path string) (bool, error) {
	data, fi, err := readRegular(path, sniffLimit)
	if err != nil {
		if errors.Is(err, ErrNotRegular) {
			return false, nil
		}
		return false, err
	}
	if fi.Size() > int64(len(data)) {
		// Only whole lines: a cut one would not parse anyway.
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		}
	}
	_, ok := scanInfo(data)
	return ok, nil
}
