package faults

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestCorruptStateFiles restarts a node whose peers.json and withdrawn
// files hold garbage: vipd must start, say so in its log, set the bad
// cache aside as peers.json.corrupt and rebuild it from the configured
// peers, and stay withdrawn (an unreadable flag fails safe) until vipctl
// restore: the VIP must not go to it when the owner withdraws, and must
// once it is restored.
func TestCorruptStateFiles(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(nil))
	rest := l.Others(owner)
	x, y := rest[0], rest[1]
	l.StopCleanly(t, x, l.StopTimeout)
	garbage := []byte("\x00\xff{{ not json \x7f\n")
	for _, f := range []string{"peers.json", "withdrawn"} {
		if err := os.WriteFile(filepath.Join(x.StateDir(), f), garbage, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	l.StartVipd(x, netlab.VipdOptions{})
	if err := l.WaitAlive(x, l.Nodes, l.Settle); err != nil {
		t.Fatalf("%s with corrupt state files: %v", x.Name, err)
	}
	if !l.Vipd(x).Running() {
		t.Fatalf("vipd on %s exited: %v", x.Name, l.Vipd(x).ExitErr())
	}
	log := x.MustVipdLog(t)
	for _, words := range [][]string{
		{"peer cache", "corrupt", "peers.json.corrupt"},
		{"withdraw flag unreadable", "staying withdrawn"},
	} {
		if lines := netlab.LogLines(log, words...); len(lines) == 0 {
			t.Errorf("%s's log has no line with %q", x.Name, words)
		} else {
			t.Logf("%s: %s", x.Name, strings.TrimSpace(lines[0]))
		}
	}
	aside, err := os.ReadFile(filepath.Join(x.StateDir(), "peers.json.corrupt"))
	if err != nil || !bytes.Equal(aside, garbage) {
		t.Errorf("peers.json.corrupt: %q, err %v; want the garbage set aside", aside, err)
	}
	var cached []string
	ok, _ := netlab.Eventually(5*time.Second, 100*time.Millisecond, func() (bool, string) {
		cached, err = readPeerCache(x.StateDir())
		return err == nil && slices.Equal(cached, []string{owner.Name, y.Name}) ||
			err == nil && slices.Equal(cached, []string{y.Name, owner.Name}), ""
	})
	if !ok {
		t.Errorf("peers.json of %s not rebuilt with %s and %s: %v, err %v", x.Name, owner.Name, y.Name, cached, err)
	}
	st, err := l.Status(x)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Withdrawn {
		t.Fatalf("%s with an unreadable withdraw flag: withdrawn=false, want true (fail safe)", x.Name)
	}
	for _, o := range rest[1:] {
		ost, err := l.Status(o)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := ost.Member(x.Name); !m.Withdrawn {
			t.Errorf("%s sees %s as %+v, want withdrawn", o.Name, x.Name, m)
		}
	}

	// The owner withdraws: the VIP must go to y, not to the withdrawn x.
	if out, err := l.Vipctl(owner, "withdraw", "--wait", "--timeout", "10s"); err != nil {
		t.Fatalf("vipctl withdraw on %s: %v", owner.Name, err)
	} else {
		t.Logf("withdraw %s: %s", owner.Name, strings.TrimSpace(out))
	}
	if h, err := l.WaitMoved(vip, owner.Name, l.Settle); err != nil || h != y.Name {
		t.Fatalf("%s withdrawn: holder %q, err %v; want %s (%s is withdrawn by its corrupt flag)", owner.Name, h, err, y.Name, x.Name)
	}

	if out, err := l.Vipctl(x, "restore"); err != nil {
		t.Fatalf("vipctl restore on %s: %v", x.Name, err)
	} else {
		t.Logf("restore %s: %s", x.Name, strings.TrimSpace(out))
	}
	if _, err := os.Stat(filepath.Join(x.StateDir(), "withdrawn")); !os.IsNotExist(err) {
		t.Errorf("withdraw flag of %s after restore: %v, want removed", x.Name, err)
	}
	if st, err := l.Status(x); err != nil || st.Withdrawn {
		t.Errorf("%s after restore: withdrawn=%t err %v, want false", x.Name, st.Withdrawn, err)
	}
	// Now x is the only other eligible node: once y has heard of the
	// restore, withdrawing y moves the VIP to x.
	ok, detail := netlab.Eventually(5*time.Second, 100*time.Millisecond, func() (bool, string) {
		st, err := l.Status(y)
		if err != nil {
			return false, err.Error()
		}
		m, _ := st.Member(x.Name)
		return m.State == "alive" && !m.Withdrawn, fmt.Sprintf("%s sees %s as %+v", y.Name, x.Name, m)
	})
	if !ok {
		t.Fatalf("after restore of %s: %s", x.Name, detail)
	}
	if out, err := l.Vipctl(y, "withdraw", "--wait", "--timeout", "10s"); err != nil {
		t.Fatalf("vipctl withdraw on %s: %v: %s", y.Name, err, out)
	}
	if h, err := l.WaitMoved(vip, y.Name, l.Settle); err != nil || h != x.Name {
		t.Errorf("%s withdrawn after %s restored: holder %q, err %v; want %s", y.Name, x.Name, h, err, x.Name)
	}
}
