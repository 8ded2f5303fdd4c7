package faults

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/testkit"
	"github.com/vipd/vipd/lab/netlab"
)

// writeKey writes a new random 32-byte key file (mode 0600) into dir.
func writeKey(t *testing.T, dir, name string) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func keyOpts(path string) netlab.VipdOptions {
	o := netlab.VipdOptions{}
	if path != "" {
		o.Cluster = fmt.Sprintf("key_file = %q", path)
	}
	return o
}

// TestWrongKeyCannotJoin runs an encrypted cluster and restarts one member
// (the VIP holder, so it would take the VIP back if it could) with another
// key, then with no key. Its peer cache still lists the other two, so it
// knows 3 members and sees 1 alive: no quorum, so it must not hold the VIP.
// It must stay alone in its own status, the others must never list it as
// alive, and they keep exactly one holder throughout. Restarted with the
// right key, it joins again (the check above is not vacuous).
func TestWrongKeyCannotJoin(t *testing.T) {
	var good string
	l, vip, x := netlab.StartCluster(t, spec(func(l *netlab.Lab, h *netlab.Host) string {
		if good == "" {
			good = writeKey(t, l.Dir, "cluster.key")
		}
		return l.VipdConfig(h, keyOpts(good))
	}))
	wrong := writeKey(t, l.Dir, "other.key")
	rest := l.Others(x)

	for _, tc := range []struct{ name, key string }{{"wrong key", wrong}, {"no key", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			l.StopCleanly(t, x, l.StopTimeout)
			holder, err := l.WaitOneHolder(vip, l.Settle, rest...)
			if err != nil {
				t.Fatalf("%s stopped: %v", x.Name, err)
			}
			cached, err := readPeerCache(x.StateDir())
			if err != nil || len(cached) != 2 {
				t.Fatalf("peer cache of %s: %v, err %v; want the two others", x.Name, cached, err)
			}
			logFrom := len(x.MustVipdLog(t))
			logsFrom := map[string]int{}
			for _, o := range rest {
				logsFrom[o.Name] = len(o.MustVipdLog(t))
			}
			s := startSampler(t, l, vip, 30*time.Second)
			t0 := time.Now()
			l.StartVipd(x, keyOpts(tc.key))
			// Long enough for the join at start and at least one rejoin.
			var last netlab.Status
			ok, detail := netlab.Eventually(netlab.RejoinInterval+3*time.Second, 200*time.Millisecond, func() (bool, string) {
				st, err := l.Status(x)
				if err != nil {
					return true, err.Error()
				}
				last = st
				for _, o := range rest {
					if memberState(st, o.Name) == "alive" {
						return true, fmt.Sprintf("%s lists %s alive", x.Name, o.Name)
					}
					ost, err := l.Status(o)
					if err != nil {
						return true, err.Error()
					}
					if memberState(ost, x.Name) == "alive" {
						return true, fmt.Sprintf("%s lists %s alive", o.Name, x.Name)
					}
				}
				if vs, _ := st.VIP(vip.Name); vs.Held {
					return true, fmt.Sprintf("%s holds %s", x.Name, vip.Name)
				}
				return false, ""
			})
			watched := time.Since(t0)
			ss := s.stop()
			if ok {
				t.Fatalf("%s with %s: %s", x.Name, tc.name, detail)
			}
			if last.Quorum {
				t.Errorf("%s with %s reports quorum; want none (knows 3 members, sees 1)", x.Name, tc.name)
			}
			for _, sm := range ss {
				if slices.Contains(sm.holders, x.Name) {
					t.Errorf("%s with %s held %s at %s", x.Name, tc.name, vip.Address, sm.at.Format("15:04:05.000"))
					break
				}
			}
			st := stats(ss)
			t.Logf("%s with %s, watched %v: status quorum=%t members %v; holders: %s", x.Name, tc.name,
				watched.Round(time.Millisecond), last.Quorum, last.Members, st)
			if st.multi > 0 || st.none > 0 || len(st.errs) > 0 {
				t.Errorf("while %s ran with %s: want exactly one holder in every sample: %s", x.Name, tc.name, st)
			}
			if h, err := l.OneHolder(vip, rest...); err != nil || h != holder {
				t.Errorf("after %s: holder %q, err %v; want %s to keep it", tc.name, h, err, holder)
			}
			// What an operator finds in the logs, by level.
			reportCryptLog(t, x.Name, x.MustVipdLog(t)[logFrom:])
			for _, o := range rest {
				reportCryptLog(t, o.Name, o.MustVipdLog(t)[logsFrom[o.Name]:])
			}
		})
	}

	t.Run("right key joins again", func(t *testing.T) {
		holder, err := l.OneHolder(vip, rest...)
		if err != nil {
			t.Fatal(err)
		}
		l.StopCleanly(t, x, l.StopTimeout)
		l.StartVipd(x, keyOpts(good))
		if err := l.WaitAlive(x, l.Nodes, l.Settle); err != nil {
			t.Fatalf("%s with the cluster key: %v", x.Name, err)
		}
		if h, err := l.WaitOneHolder(vip, l.Settle); err != nil || h != holder {
			t.Errorf("after %s rejoined: holder %q, err %v; want %s to keep it", x.Name, h, err, holder)
		}
	})
}

// reportCryptLog logs how many lines of log mention encryption, by level,
// with the first of each level.
func reportCryptLog(t *testing.T, node, log string) {
	t.Helper()
	for _, level := range []string{"ERROR", "WARN", "INFO", "DEBUG"} {
		lines := netlab.LogLines(log, "level="+level, "crypt")
		if len(lines) > 0 {
			t.Logf("%s log, %d %s lines on encryption, first: %s", node, len(lines), level, strings.TrimSpace(lines[0]))
		}
	}
}

// TestKeyFileMode checks that vipd refuses a key file others can read.
func TestKeyFileMode(t *testing.T) {
	l := netlab.New(t, netlab.Options{Nodes: 1, Client: new(bool)})
	n := l.Nodes[0]
	key := writeKey(t, l.Dir, "cluster.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.Dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(l.VipdConfig(n, keyOpts(key))), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := l.Exec(n, l.Tools.Vipd, "--check", "--config", path)
	if err == nil {
		t.Fatalf("vipd --check with a 0644 key_file: accepted, want refused:\n%s", out)
	}
	if !strings.Contains(out, "0644") || !strings.Contains(out, "key_file") {
		t.Errorf("vipd --check with a 0644 key_file: %q; want it to name key_file and the mode", out)
	}
	t.Logf("vipd --check: %s", strings.TrimSpace(out))
}

// TestKeyRotationBySIGHUP rotates the membership key of a running cluster
// the documented way, SIGHUP after each edit of every node's key_file: add
// the new key as the second line everywhere, move it first everywhere, then
// remove the old one. The cluster must stay formed with one holder
// throughout; afterwards a node that only has the old key cannot join, and
// with the new key it can.
func TestKeyRotationBySIGHUP(t *testing.T) {
	oldKey, newK := testkit.NewKey(t), testkit.NewKey(t)
	keyFile := func(h *netlab.Host) string { return filepath.Join(h.Dir, "cluster.key") }
	writeKeys := func(h *netlab.Host, keys ...string) {
		t.Helper()
		if err := os.WriteFile(keyFile(h), []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, vip, holder := netlab.StartCluster(t, spec(func(l *netlab.Lab, h *netlab.Host) string {
		writeKeys(h, oldKey)
		return l.VipdConfig(h, keyOpts(keyFile(h)))
	}))
	s := startSampler(t, l, vip, 60*time.Second)
	start := time.Now()
	for _, step := range []struct {
		name string
		keys []string
	}{
		{"add the new key second", []string{oldKey, newK}},
		{"move the new key first", []string{newK, oldKey}},
		{"remove the old key", []string{newK}},
	} {
		for _, n := range l.Nodes {
			from := len(n.MustVipdLog(t))
			writeKeys(n, step.keys...)
			if err := l.Vipd(n).Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			ok, _ := netlab.Eventually(5*time.Second, 50*time.Millisecond, func() (bool, string) {
				return len(netlab.LogLines(n.MustVipdLog(t)[from:], "membership keys rotated")) > 0, ""
			})
			if !ok {
				t.Fatalf("%s: %s: no \"membership keys rotated\" in its log within 5s of SIGHUP:\n%s", n.Name, step.name, n.MustVipdLog(t)[from:])
			}
		}
		// A gossip round or two with the new keyrings, then check.
		time.Sleep(2 * time.Second)
		for _, n := range l.Nodes {
			if err := l.WaitAlive(n, l.Nodes, time.Second); err != nil {
				t.Errorf("after %q: %v", step.name, err)
			}
		}
		if h, err := l.OneHolder(vip); err != nil || h != holder.Name {
			t.Errorf("after %q: holder %q, err %v; want %s to keep it", step.name, h, err, holder.Name)
		}
	}
	st := stats(s.stop())
	t.Logf("rotation in %v: %s", time.Since(start).Round(time.Millisecond), st)
	if st.multi > 0 || st.none > 0 || len(st.errs) > 0 {
		t.Errorf("during key rotation: want exactly one holder in every sample: %s", st)
	}
	for _, n := range l.Nodes {
		if lines := n.VipdLogBetween(t, start, time.Now(), "state=dead", "state=suspect"); len(lines) > 0 {
			t.Errorf("%s saw members fail during the rotation: %s", n.Name, lines[0])
		}
	}

	// The old key is gone from the cluster: a node with only the old key
	// cannot join; with the new one it can.
	var x *netlab.Host
	for _, n := range l.Nodes {
		if n != holder {
			x = n
			break
		}
	}
	l.StopCleanly(t, x, l.StopTimeout)
	writeKeys(x, oldKey)
	l.StartVipd(x, keyOpts(keyFile(x)))
	ok, detail := netlab.Eventually(netlab.RejoinInterval+time.Second, 200*time.Millisecond, func() (bool, string) {
		for _, o := range l.Others(x) {
			ost, err := l.Status(o)
			if err != nil {
				return true, err.Error()
			}
			if s := memberState(ost, x.Name); s == "alive" {
				return true, fmt.Sprintf("%s lists %s alive", o.Name, x.Name)
			}
		}
		return false, ""
	})
	if ok {
		t.Errorf("%s with only the retired key: %s; want it kept out", x.Name, detail)
	}
	l.StopCleanly(t, x, l.StopTimeout)
	writeKeys(x, newK)
	l.StartVipd(x, keyOpts(keyFile(x)))
	if err := l.WaitAlive(x, l.Nodes, l.Settle); err != nil {
		t.Errorf("%s with the new key: %v", x.Name, err)
	}
}
