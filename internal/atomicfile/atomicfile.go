// Package atomicfile writes whole files so that a reader, or the process
// after a crash, finds the old file or the complete new one, never part
// of it: the data goes to a temporary file in the same directory, which
// is then renamed (Write) or linked (Create) into place.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
)

// Write puts data at path, replacing what is there. With durable, the
// data and the directory entry are synced before it returns, so the
// new file survives a power loss too. The file is 0600: agentd's files
// hold conversations and keys.
func Write(path string, data []byte, durable bool) error {
	tmp, err := stage(path, data, durable)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // no-op after the rename
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if durable {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// Create puts data at path only if nothing is there: otherwise it
// returns an error for which errors.Is(err, fs.ErrExist) holds and
// leaves the file as it was. Of two processes creating one path, one
// wins and the other gets that error. Data and name are synced.
func Create(path string, data []byte) error {
	tmp, err := stage(path, data, true)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // the extra name after the link
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// stage writes data to a new temporary file beside path and returns its
// name.
func stage(path string, data []byte, durable bool) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if durable && err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// SyncDir syncs directory dir, making the names in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
