package node

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDebounce gathers the several events an editor's save makes (write,
// chmod, rename-over) into one reload.
const reloadDebounce = 200 * time.Millisecond

// watchConfig reloads when the config file changes. It watches the file's
// directory, not the file, because editors and Kubernetes ConfigMaps replace
// the file by renaming over it.
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
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-n.stop:
				if timer != nil {
					timer.Stop()
				}
				return
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
				if timer == nil {
					timer = time.NewTimer(reloadDebounce)
				} else {
					timer.Reset(reloadDebounce)
				}
				fire = timer.C
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
