package tool

import (
	"context"
	"path/filepath"
	"sync"
)

// FileLocks serialises mutations of the same file. Each file has its own
// lock, keyed by its real path (so a symlink and its target share one);
// a lock exists only while someone holds or waits for it, so the set
// never grows with the number of files a long session has touched.
// The zero value is ready to use.
type FileLocks struct {
	mu    sync.Mutex
	files map[string]*fileLock
}

type fileLock struct {
	// sem is a one-slot semaphore rather than a sync.Mutex so that a
	// waiter can give up when its context is cancelled.
	sem  chan struct{}
	refs int // holders plus waiters; the entry is dropped at zero
}

// Lock waits until no other caller holds path's lock and takes it. It
// returns a function that releases it, or ctx's error if ctx ends first.
func (l *FileLocks) Lock(ctx context.Context, path string) (unlock func(), err error) {
	key := lockKey(path)
	l.mu.Lock()
	if l.files == nil {
		l.files = make(map[string]*fileLock)
	}
	fl := l.files[key]
	if fl == nil {
		fl = &fileLock{sem: make(chan struct{}, 1)}
		l.files[key] = fl
	}
	fl.refs++
	l.mu.Unlock()

	select {
	case fl.sem <- struct{}{}:
	case <-ctx.Done():
		l.release(key, fl)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-fl.sem
			l.release(key, fl)
		})
	}, nil
}

func (l *FileLocks) release(key string, fl *fileLock) {
	l.mu.Lock()
	fl.refs--
	if fl.refs == 0 {
		delete(l.files, key)
	}
	l.mu.Unlock()
}

// size reports how many files currently have a lock entry (for tests).
func (l *FileLocks) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files)
}

// lockKey is the real path of p when it (or its directory, for a file
// about to be created) exists, else p cleaned.
func lockKey(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(d, filepath.Base(p))
	}
	return p
}
