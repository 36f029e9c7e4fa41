package node

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDebounce gathers the several events an editor's save makes (write,
// chmod, rename-over) into one reload.
const reloadDebounce = 200 * time.Millisecond

// reloadPoll is how often the watcher also compares the file's fingerprint,
// for changes no directory event shows (a symlinked directory re-pointed, as
// git-sync does; network file systems).
const reloadPoll = 2 * time.Second

// fingerprint identifies the config file's current content cheaply: where
// its path resolves to, its size and its modification time.
func fingerprint(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		// The same whether path was given relative or absolute.
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return "missing"
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%s|%d|%d", real, fi.Size(), fi.ModTime().UnixNano())
}

// loadedFingerprint is the fingerprint of the config file as last loaded
// (taken just before reading it, so a change racing a load is seen).
func (n *Node) loadedFingerprint() string {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	return n.loadedFP
}

// watchConfig reloads when the config file changes. It watches the file's
// directory, not the file, because editors and Kubernetes ConfigMaps replace
// the file by renaming over it, and polls a fingerprint for what directory
// events miss.
func (n *Node) watchConfig() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	path, err := filepath.Abs(n.cfg.ConfigPath)
	if err != nil {
		w.Close()
		return fmt.Errorf("config watcher: %w", err)
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("config watcher on %s: %w", dir, err)
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		defer w.Close()
		poll := time.NewTicker(reloadPoll)
		defer poll.Stop()
		var timer *time.Timer
		var fire <-chan time.Time
		schedule := func() {
			if timer == nil {
				timer = time.NewTimer(reloadDebounce)
			} else {
				timer.Reset(reloadDebounce)
			}
			fire = timer.C
		}
		for {
			select {
			case <-n.stop:
				if timer != nil {
					timer.Stop()
				}
				return
			case <-poll.C:
				if fire == nil && fingerprint(path) != n.loadedFingerprint() {
					schedule()
				}
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) != path && !isConfigMapSwap(ev.Name, dir) {
					continue
				}
				if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Chmod) == 0 {
					continue
				}
				schedule()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				n.log.Warn("config watcher", "error", err)
			case <-fire:
				fire = nil
				_ = n.Reload() // Reload logs its own outcome.
			}
		}
	}()
	return nil
}

// isConfigMapSwap recognises the "..data" symlink Kubernetes swaps when a
// mounted ConfigMap changes.
func isConfigMapSwap(name, dir string) bool {
	return filepath.Clean(name) == filepath.Join(dir, "..data")
}
