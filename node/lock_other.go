//go:build !unix

package node

import "os"

// tryLock: without flock the file only records the pid; Raft's log store
// still refuses a second process (after its open timeout).
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}
