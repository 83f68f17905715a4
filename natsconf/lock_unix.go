//go:build unix

package natsconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// storeLock is an exclusive flock on a file in the store directory, held
// for the life of the embedded server. The kernel drops it when the
// process dies, however it dies, so a crash never leaves a stale lock.
type storeLock struct {
	f *os.File
}

// lockStore takes the lock on dir (creating dir if needed) and writes this
// process's pid into the lock file. It returns ErrStoreLocked, naming the
// store and the holder's pid, when another process holds it.
func lockStore(dir string) (*storeLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsconf: store %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("natsconf: store lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "unknown"
			if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
				holder = strings.TrimSpace(string(b))
			}
			abs, _ := filepath.Abs(dir)
			return nil, fmt.Errorf("%w: %s is in use by process %s (lock %s)", ErrStoreLocked, abs, holder, path)
		}
		return nil, fmt.Errorf("natsconf: store lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

// release drops the lock. The pid stays in the file; it means nothing
// without the lock.
func (l *storeLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
