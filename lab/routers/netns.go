// Package routers starts real routing daemons (BIRD 2, FRR) inside network
// namespaces for tests, and reads back the routes they learned.
//
// Everything here needs root and is meant for tests gated by
// VIPD_NETNS_TESTS=1: namespaces, links and daemons are created by the test,
// and removed (daemons killed by their PID) in t.Cleanup. Every wait is
// bounded.
package routers

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SkipUnlessNetnsTests skips t unless running as root with VIPD_NETNS_TESTS=1
// and the named programs are installed.
func SkipUnlessNetnsTests(t testing.TB, programs ...string) {
	t.Helper()
	if os.Getenv("VIPD_NETNS_TESTS") != "1" {
		t.Skip("network-namespace test: set VIPD_NETNS_TESTS=1 (and run as root) to run it")
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

// Run runs a command and returns its combined output, failing with the
// output in the error.
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

// NSName returns a namespace name unique to this process: "vt-<pkg>-<pid>-<suffix>".
// Keep pkg and suffix short; interface names derived from it must fit 15 bytes.
func NSName(pkg, suffix string) string {
	return fmt.Sprintf("vt-%s-%d-%s", pkg, os.Getpid(), suffix)
}

// NewNS creates network namespace name with its loopback up and deletes it in
// t.Cleanup (which also removes the links inside it).
func NewNS(t testing.TB, name string) string {
	t.Helper()
	MustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := Run("ip", "netns", "del", name); err != nil {
			t.Logf("cleanup: %v: %s", err, out)
		}
	})
	MustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Veth links namespace nsA (interface ifA) to nsB (interface ifB) and
// assigns the given addresses (CIDR, e.g. "192.0.2.1/24"). IPv6 addresses
// skip duplicate address detection so they are usable at once.
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

// Eventually polls cond every interval until it returns true or timeout
// passes, then fails t with the last message cond returned.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %s", what, timeout, last)
		}
		time.Sleep(interval)
	}
}
