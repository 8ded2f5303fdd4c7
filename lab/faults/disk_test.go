package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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
// cache could not be saved, refuse a withdraw whose flag it cannot save
// (vipd-drain && reboot would bring the node back eligible), and withdraw
// with --no-persist when asked to.
func TestFullStateDisk(t *testing.T) {
	l := netlab.New(t, netlab.Options{Client: new(bool)})
	vip := l.DefaultVIPs()[0]
	n := l.Nodes[0]
	state := fullTmpfs(t, l, n)
	// n starts alone, so it claims the VIP as a single-node cluster; the
	// others join it later and, with preempt off, leave it there.
	l.StartVipdConfig(n, l.EditedVipdConfig(t, n, netlab.VipdOptions{}, `(?m)^state_dir = .*$`, fmt.Sprintf("state_dir = %q", state)))
	if h, err := l.WaitOneHolder(vip, l.Settle, n); err != nil || h != n.Name {
		t.Fatalf("%s alone with a full state disk: holder %q, err %v; want it to hold %s", n.Name, h, err, vip.Address)
	}
	for _, o := range l.Nodes[1:] {
		l.StartVipd(o, netlab.VipdOptions{})
	}
	for _, o := range l.Nodes {
		if err := l.WaitAlive(o, l.Nodes, l.Settle); err != nil {
			t.Fatalf("cluster with %s on a full disk: %v", n.Name, err)
		}
	}
	if h, err := l.WaitOneHolder(vip, l.Settle); err != nil || h != n.Name {
		t.Fatalf("cluster formed: holder %q, err %v; want %s to keep %s", h, err, n.Name, vip.Address)
	}
	var lines []string
	ok, _ := netlab.Eventually(5*time.Second, 100*time.Millisecond, func() (bool, string) {
		lines = netlab.LogLines(n.MustVipdLog(t), "save peer cache", "no space left on device")
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

	checkUnsavedWithdraw(t, l, vip, n)
	if out, err := l.Vipctl(n, "restore"); err != nil {
		t.Errorf("vipctl restore with a full state disk (nothing to write): %v %s", err, out)
	}
	if !l.Vipd(n).Running() {
		t.Errorf("vipd on %s exited: %v", n.Name, l.Vipd(n).ExitErr())
	}
}

// checkUnsavedWithdraw: on owner n, whose state_dir cannot be written,
// withdraw and withdraw --wait fail (exit 1, "withdraw flag not saved") and
// change nothing; withdraw --no-persist hands the VIP off.
func checkUnsavedWithdraw(t *testing.T, l *netlab.Lab, vip netlab.VIP, n *netlab.Host) {
	t.Helper()
	for _, args := range [][]string{{"withdraw"}, {"withdraw", "--wait", "--timeout", "10s"}} {
		out, err := l.Vipctl(n, args...)
		t.Logf("vipctl %s on %s: %s", strings.Join(args, " "), n.Name, strings.TrimSpace(out))
		if code := exitCode(err); code != 1 || !strings.Contains(out, "withdraw flag not saved") {
			t.Errorf("vipctl %s with an unwritable state_dir: exit %d, %q; want exit 1 and \"withdraw flag not saved\"", strings.Join(args, " "), code, out)
		}
	}
	if st, err := l.Status(n); err != nil || st.Withdrawn {
		t.Errorf("%s after a refused withdraw: withdrawn=%t err %v, want not withdrawn", n.Name, st.Withdrawn, err)
	}
	if h, err := l.OneHolder(vip); err != nil || h != n.Name {
		t.Errorf("after a refused withdraw: holder %q err %v, want %s to keep the VIP", h, err, n.Name)
	}
	out, err := l.Vipctl(n, "withdraw", "--wait", "--no-persist", "--timeout", "10s")
	if err != nil {
		t.Fatalf("vipctl withdraw --wait --no-persist: %v %s", err, out)
	}
	if !strings.Contains(out, "vipd restarts") {
		t.Errorf("withdraw --no-persist said %q; want it to say the withdraw lasts until vipd restarts", out)
	}
	next, err := l.WaitMoved(vip, n.Name, l.Settle)
	if err != nil {
		t.Fatalf("withdraw --no-persist: want the VIP to leave %s: %v", n.Name, err)
	}
	t.Logf("the VIP moved to %s", next)
	if st, err := l.Status(n); err != nil || !st.Withdrawn {
		t.Errorf("%s after withdraw --no-persist: withdrawn=%t err %v, want true", n.Name, st.Withdrawn, err)
	}
}

// exitCode is the exit status of a command error (0 for nil, -1 when it
// did not exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// TestReadOnlyStateDir: the owner's state_dir is read-only (a remounted
// filesystem): withdraw is refused as on a full disk, --no-persist works,
// and restore works, there being no flag to remove.
func TestReadOnlyStateDir(t *testing.T) {
	l := netlab.New(t, netlab.Options{Client: new(bool)})
	vip := l.DefaultVIPs()[0]
	n := l.Nodes[0]
	mnt := filepath.Join(l.Dir, "rostate")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := netlab.Run("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "vt-faults-ro", mnt); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if v := l.Vipd(n); v != nil {
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
	if out, err := netlab.Run("mount", "-o", "remount,ro", mnt); err != nil {
		t.Fatalf("remount read-only: %v %s", err, out)
	}
	l.StartVipdConfig(n, l.EditedVipdConfig(t, n, netlab.VipdOptions{}, `(?m)^state_dir = .*$`, fmt.Sprintf("state_dir = %q", state)))
	if h, err := l.WaitOneHolder(vip, l.Settle, n); err != nil || h != n.Name {
		t.Fatalf("%s alone with a read-only state_dir: holder %q, err %v", n.Name, h, err)
	}
	for _, o := range l.Nodes[1:] {
		l.StartVipd(o, netlab.VipdOptions{})
	}
	for _, o := range l.Nodes {
		if err := l.WaitAlive(o, l.Nodes, l.Settle); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := l.WaitOneHolder(vip, l.Settle); err != nil || h != n.Name {
		t.Fatalf("cluster formed: holder %q, err %v; want %s", h, err, n.Name)
	}
	checkUnsavedWithdraw(t, l, vip, n)
	if out, err := l.Vipctl(n, "restore"); err != nil {
		t.Errorf("vipctl restore on a read-only state_dir without a flag: %v %s", err, out)
	}
	if st, err := l.Status(n); err != nil || st.Withdrawn {
		t.Errorf("%s after restore: withdrawn=%t err %v, want false", n.Name, st.Withdrawn, err)
	}
}
