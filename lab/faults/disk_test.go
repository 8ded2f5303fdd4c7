package faults

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// fullTmpfs mounts a 64 KiB tmpfs on a new directory under dir, fills it
// until writes fail with ENOSPC and returns an (empty) state directory on
// it. The mount is the test's own; it is unmounted in t.Cleanup, after
// stopping the vipd that uses it.
func fullTmpfs(t *testing.T, l *netlab.Lab, user *netlab.Host) string {
	t.Helper()
	mnt := filepath.Join(l.Dir, "fulldisk")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := netlab.Run("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "vt-faults-full", mnt); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if v := l.Vipd(user); v != nil {
			v.Kill()
		}
		if out, err := netlab.Run("umount", mnt); err != nil {
			t.Errorf("umount %s: %v %s; trying a lazy unmount", mnt, err, out)
			netlab.Run("umount", "-l", mnt)
		}
	})
	state := filepath.Join(mnt, "state")
	if err := os.Mkdir(state, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ { // 64 KiB in 4 KiB chunks at most
		_, werr = f.Write(chunk)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("filling the 64k tmpfs: %v, want ENOSPC", werr)
	}
	if err := os.WriteFile(filepath.Join(state, "probe"), []byte("x"), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a 1-byte write on the full tmpfs: %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(state, "probe"))
	return state
}

// TestFullStateDisk runs the VIP owner with its state_dir on a full
// filesystem: it must keep running and holding the VIP, log that the peer
// cache could not be saved, and on vipctl withdraw still withdraw (hand the
// VIP off) while telling the operator the flag was not saved.
func TestFullStateDisk(t *testing.T) {
	l := netlab.New(t, netlab.Options{Client: new(bool)})
	vip := l.DefaultVIPs()[0]
	n := l.Nodes[0]
	state := fullTmpfs(t, l, n)
	// n starts alone, so it claims the VIP as a single-node cluster; the
	// others join it later and, with preempt off, leave it there.
	l.StartVipdConfig(n, config(t, l, n, opts, `(?m)^state_dir = .*$`, fmt.Sprintf("state_dir = %q", state)))
	if h, err := l.WaitOneHolder(vip, settle, n); err != nil || h != n.Name {
		t.Fatalf("%s alone with a full state disk: holder %q, err %v; want it to hold %s", n.Name, h, err, vip.Address)
	}
	for _, o := range l.Nodes[1:] {
		l.StartVipd(o, opts)
	}
	for _, o := range l.Nodes {
		if err := l.WaitAlive(o, l.Nodes, settle); err != nil {
			t.Fatalf("cluster with %s on a full disk: %v", n.Name, err)
		}
	}
	if h, err := l.WaitOneHolder(vip, settle); err != nil || h != n.Name {
		t.Fatalf("cluster formed: holder %q, err %v; want %s to keep %s", h, err, n.Name, vip.Address)
	}
	var lines []string
	ok, _ := netlab.Eventually(5*time.Second, 100*time.Millisecond, func() (bool, string) {
		lines = logLines(logOf(t, n), "save peer cache", "no space left on device")
		return len(lines) > 0, ""
	})
	if !ok {
		t.Errorf("%s's log does not say the peer cache could not be saved (no space left on device)", n.Name)
	} else {
		t.Logf("%s: %s (%d such lines)", n.Name, strings.TrimSpace(lines[0]), len(lines))
	}
	if leftovers, _ := filepath.Glob(filepath.Join(state, ".*tmp*")); len(leftovers) > 0 {
		t.Errorf("temporary files left in the full state_dir: %v", leftovers)
	}

	out, err := l.Vipctl(n, "withdraw")
	if err != nil {
		t.Fatalf("vipctl withdraw with a full state disk: %v", err)
	}
	t.Logf("vipctl withdraw on %s: %s", n.Name, strings.TrimSpace(out))
	if !strings.Contains(out, "could not be saved") {
		t.Errorf("vipctl withdraw with a full state disk said %q; want it to say the flag could not be saved", out)
	}
	next, err := l.WaitMoved(vip, n.Name, settle)
	if err != nil {
		t.Fatalf("withdraw with a full state disk: want the VIP to leave %s: %v", n.Name, err)
	}
	t.Logf("the VIP moved to %s", next)
	st, err := l.Status(n)
	if err != nil || !st.Withdrawn {
		t.Errorf("%s after withdraw: withdrawn=%t err %v, want true", n.Name, st.Withdrawn, err)
	}
	if lines := logLines(logOf(t, n), "withdraw flag not persisted"); len(lines) == 0 {
		t.Errorf("%s's log does not say the withdraw flag was not persisted", n.Name)
	}
	if out, err := l.Vipctl(n, "restore"); err != nil {
		t.Errorf("vipctl restore with a full state disk (nothing to write): %v %s", err, out)
	}
	if !l.Vipd(n).Running() {
		t.Errorf("vipd on %s exited: %v", n.Name, l.Vipd(n).ExitErr())
	}
}
