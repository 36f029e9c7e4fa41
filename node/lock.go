package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockFile is the data dir's lock: a file that holds the pid of the tether
// process using the dir, locked (flock) for as long as that process runs.
// The kernel drops the lock when the process ends, however it ends, so a
// crashed node's file never blocks its restart; the pid inside is only read
// to name the holder.
const lockFile = "tether.lock"

// errDataDirInUse is wrapped by lockDataDir's error when another process
// holds the data dir.
var errDataDirInUse = errors.New("data dir in use")

// dataDirLock is a held lock on a data dir.
type dataDirLock struct {
	f *os.File
}

// lockDataDir takes dir's lock at once or says which process holds it:
// a second agent on a live node's data dir must not wait for Raft's log
// store to time out, nor join gossip under the live node's id meanwhile.
func lockDataDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: lock file: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s: locking %s: %w", dir, path, err)
	}
	if !held {
		f.Close()
		who := "another tether process"
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				who = fmt.Sprintf("another tether process (pid %d)", pid)
			}
		}
		return nil, fmt.Errorf("%w: data dir %s is in use by %s: stop that process first, or give this node its own --data-dir", errDataDirInUse, dir, who)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it would let a process
// that opened it before the removal lock a file nobody else sees.
func (l *dataDirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	unlock(l.f)
	l.f.Close()
	l.f = nil
}
