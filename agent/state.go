package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// State file names inside state_dir.
const (
	peersFile    = "peers.json"
	withdrawFile = "withdrawn"
	// addressesFile records the VIP addresses this node added, for
	// `vipd cleanup` after a crash.
	addressesFile = "addresses.json"
)

// maxStateFile bounds what is read of a state file.
const maxStateFile = 1 << 20

// readStateFile reads a state file without blocking: a FIFO or device put
// in its place (by mistake or on purpose) must not hang vipd's start-up,
// so only regular files are read, opened with O_NONBLOCK, and at most
// maxStateFile bytes of them.
func readStateFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return io.ReadAll(io.LimitReader(f, maxStateFile))
}

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
	b, err := readStateFile(path)
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
	// Only entries that could have come from an admitted member: a valid
	// name and an ip:port address. Anything else would count towards
	// quorum and be rejoined forever.
	var peers []CachedPeer
	for _, p := range f.Peers {
		if validCachedPeer(p) {
			peers = append(peers, p)
		}
	}
	if dropped := len(f.Peers) - len(peers); dropped > 0 {
		return peers, fmt.Errorf("peer cache %s: %d invalid entries ignored (a node name and an ip:port address each)", path, dropped)
	}
	return peers, nil
}

// validCachedPeer reports whether p has a valid node name and an ip:port
// address.
func validCachedPeer(p CachedPeer) bool {
	ap, err := netip.ParseAddrPort(p.Address)
	return config.ValidNodeName(p.Name) && err == nil && ap.Port() != 0 && !ap.Addr().IsUnspecified()
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
	// Since is the flag file's modification time.
	Since time.Time
}

const withdrawContent = "withdrawn\n"

// loadWithdraw reads the withdraw flag. No file means not withdrawn; a file
// that does not start with what saveWithdraw writes, or cannot be read,
// means withdrawn.
func loadWithdraw(dir string) withdrawState {
	path := filepath.Join(dir, withdrawFile)
	b, err := readStateFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return withdrawState{}
	case err != nil:
		return withdrawState{Withdrawn: true, Corrupt: fmt.Errorf("read withdraw flag: %w", err)}
	case !strings.HasPrefix(string(b), "withdrawn"):
		return withdrawState{Withdrawn: true, Corrupt: fmt.Errorf("withdraw flag %s has unexpected content %q", path, truncate(string(b), 40))}
	}
	ws := withdrawState{Withdrawn: true}
	if fi, err := os.Stat(path); err == nil {
		ws.Since = fi.ModTime()
	}
	return ws
}

// saveWithdraw persists (or clears) the withdraw flag durably.
func saveWithdraw(dir string, withdrawn bool) error {
	path := filepath.Join(dir, withdrawFile)
	if !withdrawn {
		// Look first: a read-only filesystem answers EROFS to removing a
		// file that is not there.
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
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

type addressesFileV1 struct {
	Version   int              `json:"version"`
	Addresses []recordedTarget `json:"addresses"`
}

type recordedTarget struct {
	VIP       string `json:"vip"`
	Interface string `json:"interface"`
	Address   string `json:"address"`
}

// saveRecorded records the addresses this node added (and has not removed
// yet), for `vipd cleanup`.
func saveRecorded(dir string, ts []CleanupTarget) error {
	f := addressesFileV1{Version: 1, Addresses: []recordedTarget{}}
	for _, t := range ts {
		f.Addresses = append(f.Addresses, recordedTarget{VIP: t.VIP, Interface: t.Interface, Address: t.Addr.String()})
	}
	sort.Slice(f.Addresses, func(i, j int) bool { return f.Addresses[i].VIP < f.Addresses[j].VIP })
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", addressesFile, err)
	}
	return writeFileAtomic(filepath.Join(dir, addressesFile), append(b, '\n'), 0o640)
}

// loadRecorded reads the recorded addresses; a missing file records none.
func loadRecorded(dir string) ([]CleanupTarget, error) {
	path := filepath.Join(dir, addressesFile)
	b, err := readStateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recorded addresses: %w", err)
	}
	var f addressesFileV1
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("recorded addresses %s: %w", path, err)
	}
	var out []CleanupTarget
	for _, r := range f.Addresses {
		a, err := netip.ParseAddr(r.Address)
		if err != nil || !config.ValidInterface(r.Interface) {
			continue
		}
		out = append(out, CleanupTarget{VIP: r.VIP, Interface: r.Interface, Addr: a.Unmap()})
	}
	return out, nil
}
