package server

import (
	"fmt"
	"os"
	"syscall"
)

// fileID identifies a file whatever name reaches it (a hard link, a
// symlink): two sessions must never append to one file.
type fileID struct{ dev, ino uint64 }

func identify(path string) (fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("cannot identify %s", path)
	}
	return fileID{uint64(sys.Dev), sys.Ino}, nil
}
