package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// State file names inside state_dir.
const (
	peersFile    = "peers.json"
	withdrawFile = "withdrawn"
)

// CachedPeer is a member remembered on disk so a node can rejoin without
// any configured peer and without the apiserver.
type CachedPeer struct {
	Name    string `json:"name"`
	Address string `json:"address"` // host:port
}

type peerCacheFile struct {
	Version int          `json:"version"`
	Peers   []CachedPeer `json:"peers"`
}

// loadPeerCache reads the peer cache. A missing file is an empty cache. A
// corrupt file is renamed aside (peers.json.corrupt) and reported, so the
// caller rebuilds from configured peers.
func loadPeerCache(dir string) ([]CachedPeer, error) {
	path := filepath.Join(dir, peersFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read peer cache: %w", err)
	}
	var f peerCacheFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
		if err == nil {
			err = fmt.Errorf("version %d not understood", f.Version)
		}
		aside := path + ".corrupt"
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("peer cache %s is corrupt (%v) and could not be set aside: %w", path, err, rerr)
		}
		return nil, fmt.Errorf("peer cache %s is corrupt (%v); moved to %s, rebuilding from configured peers", path, err, aside)
	}
	return f.Peers, nil
}

// savePeerCache writes the cache atomically: a reader sees the old or the
// new file, never a torn one.
func savePeerCache(dir string, peers []CachedPeer) error {
	sorted := append([]CachedPeer(nil), peers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	b, err := json.MarshalIndent(peerCacheFile{Version: 1, Peers: sorted}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode peer cache: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, peersFile), append(b, '\n'), 0o640)
}

// withdrawState is the persisted withdraw flag.
type withdrawState struct {
	Withdrawn bool
	// Corrupt is set when the flag file could not be read or understood:
	// the node then stays withdrawn (fail safe) until restore rewrites it.
	Corrupt error
}

const withdrawContent = "withdrawn\n"

// loadWithdraw reads the withdraw flag. No file means not withdrawn; a file
// that is not exactly what saveWithdraw writes, or cannot be read, means
// withdrawn.
func loadWithdraw(dir string) withdrawState {
	path := filepath.Join(dir, withdrawFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return withdrawState{}
	case err != nil:
		return withdrawState{Withdrawn: true, Corrupt: fmt.Errorf("read withdraw flag: %w", err)}
	case !strings.HasPrefix(string(b), "withdrawn"):
		return withdrawState{Withdrawn: true, Corrupt: fmt.Errorf("withdraw flag %s has unexpected content %q", path, truncate(string(b), 40))}
	}
	return withdrawState{Withdrawn: true}
}

// saveWithdraw persists (or clears) the withdraw flag durably.
func saveWithdraw(dir string, withdrawn bool) error {
	path := filepath.Join(dir, withdrawFile)
	if !withdrawn {
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing to clear (also on a read-only state_dir)
		}
		if err != nil {
			return fmt.Errorf("clear withdraw flag: %w", err)
		}
		return syncDir(dir)
	}
	return writeFileAtomic(path, []byte(withdrawContent), 0o640)
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
