// Package netnstest is what tests that use the real kernel share: the gate
// (root and VIPD_NETNS_TESTS=1), creating network namespaces, veth pairs and
// bridges that t.Cleanup removes, running code on a thread inside a
// namespace, cutting a namespace off with nftables, and a bounded wait.
//
// Product packages' network tests (l2, bgp, conns) and the labs (lab/netlab)
// build on it; it imports nothing of vipd's, so a product package's tests
// never need lab/. Everything that changes the system needs root and is
// meant for tests gated by SkipUnlessEnabled: namespaces and links are
// created by the test and removed in t.Cleanup. Every wait is bounded.
package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// SkipUnlessEnabled skips t unless it runs as root with VIPD_NETNS_TESTS=1
// and ip(8) and the named programs (names in PATH or absolute paths) are
// installed.
func SkipUnlessEnabled(t testing.TB, programs ...string) {
	t.Helper()
	if os.Getenv("VIPD_NETNS_TESTS") != "1" {
		t.Skip("network-namespace test: set VIPD_NETNS_TESTS=1 and run as root (make netns-test)")
	}
	if os.Geteuid() != 0 {
		t.Skip("network-namespace test: needs root to create namespaces")
	}
	for _, p := range append([]string{"ip"}, programs...) {
		if _, err := exec.LookPath(p); err != nil {
			if _, statErr := os.Stat(p); statErr != nil {
				t.Skipf("network-namespace test: %s not installed", p)
			}
		}
	}
}

// Run runs a command and returns its combined output; the error carries
// the command line and the output.
func Run(name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// MustRun is Run that fails t on error.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var nameSeq atomic.Int32

// Name returns a namespace name unique to this process and call:
// "vt-<pkg>-<pid>-<n>-<suffix>". Keep pkg and suffix short; interface
// names derived from it must fit 15 bytes.
func Name(pkg, suffix string) string {
	return fmt.Sprintf("vt-%s-%d-%d-%s", pkg, os.Getpid(), nameSeq.Add(1), suffix)
}

// NewNS creates network namespace name with its loopback up and deletes it
// in t.Cleanup (which also removes the links inside it); a namespace that
// cannot be deleted fails the test, since it would be left behind.
func NewNS(t testing.TB, name string) string {
	t.Helper()
	MustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if _, err := Run("ip", "netns", "del", name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	MustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Handle opens the namespace called ns for netlink.NewHandleAt and
// InHandle, and closes it in t.Cleanup.
func Handle(t testing.TB, ns string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatalf("open namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Veth links namespace nsA (interface ifA) to nsB (interface ifB), assigns
// the given addresses (CIDR, e.g. "192.0.2.1/24") and sets both ends up.
// IPv6 addresses skip duplicate address detection so they are usable at
// once.
func Veth(t testing.TB, nsA, ifA string, addrsA []string, nsB, ifB string, addrsB []string) {
	t.Helper()
	MustRun(t, "ip", "-n", nsA, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", nsB)
	for _, side := range []struct {
		ns, ifc string
		addrs   []string
	}{{nsA, ifA, addrsA}, {nsB, ifB, addrsB}} {
		for _, a := range side.addrs {
			args := []string{"-n", side.ns, "addr", "add", a, "dev", side.ifc}
			if strings.Contains(a, ":") {
				args = append(args, "nodad")
			}
			MustRun(t, "ip", args...)
		}
		MustRun(t, "ip", "-n", side.ns, "link", "set", side.ifc, "up")
	}
}

// Bridge creates bridge name in namespace ns and sets it up. Multicast
// snooping is off, so IPv6 neighbour discovery reaches every port without
// an MLD querier.
func Bridge(t testing.TB, ns, name string) {
	t.Helper()
	MustRun(t, "ip", "-n", ns, "link", "add", name, "type", "bridge", "mcast_snooping", "0")
	MustRun(t, "ip", "-n", ns, "link", "set", name, "up")
}

// In runs f on an OS thread switched into the namespace called ns, so
// sockets f creates (net.Dial, net.ListenPacket) live there and keep living
// there after f returns. See InHandle.
func In(ns string, f func() error) error {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer h.Close()
	if err := InHandle(h, f); err != nil {
		return fmt.Errorf("in namespace %s: %w", ns, err)
	}
	return nil
}

// MustIn is In that fails t on error.
func MustIn(t testing.TB, ns string, f func() error) {
	t.Helper()
	if err := In(ns, f); err != nil {
		t.Fatal(err)
	}
}

// InHandle runs f on an OS thread switched into namespace h and returns
// f's error. The thread is never switched back: it is thrown away when f
// returns (a goroutine that exits while locked takes its thread with it),
// so no other goroutine runs in h by accident. f must not start goroutines
// that create sockets: they run on other threads, in the caller's
// namespace.
func InHandle(h netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Cut drops, with nftables in namespace ns, every packet from or to the
// addresses peers (a cable cut between ns and them that leaves both links
// up), and returns the function that removes the rule again. The table
// "vt_cut" is also removed in t.Cleanup.
func Cut(t testing.TB, ns string, peers ...netip.Addr) (undo func()) {
	t.Helper()
	var rules strings.Builder
	rules.WriteString("table inet vt_cut {\n chain in { type filter hook input priority -300; policy accept;\n")
	match := func(dir string) {
		for _, a := range peers {
			fam := "ip"
			if a.Is6() {
				fam = "ip6"
			}
			fmt.Fprintf(&rules, "  %s %s %s drop\n", fam, dir, a)
		}
	}
	match("saddr")
	rules.WriteString(" }\n chain out { type filter hook output priority -300; policy accept;\n")
	match("daddr")
	rules.WriteString(" }\n}\n")
	path := filepath.Join(t.TempDir(), "cut.nft")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	MustRun(t, "ip", "netns", "exec", ns, "nft", "-f", path)
	done := false
	undo = func() {
		if done {
			return
		}
		done = true
		if out, err := Run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "vt_cut"); err != nil {
			t.Logf("uncut: %v: %s", err, out)
		}
	}
	t.Cleanup(undo)
	return undo
}

// Poll calls cond every interval until it returns true or timeout passes;
// it returns whether cond succeeded and the last detail it gave, for the
// failure message. cond is called at least once.
func Poll(timeout, interval time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok || time.Now().After(deadline) {
			return ok, detail
		}
		time.Sleep(interval)
	}
}

// Eventually is Poll that fails t, naming what and the last detail, when
// cond is not true within timeout.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, detail := Poll(timeout, interval, cond); !ok {
		t.Fatalf("%s: not true after %s: %s", what, timeout, detail)
	}
}
