package k8slab

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// The witness checks run beside the documented one in the same vipd, each
// on a VIP of its own, to show what the test tells apart.
var (
	// noNameVIP checks /readyz like the documented check but without
	// tls_server_name: a check that ignores the certificate's names.
	noNameVIP = netip.MustParseAddr("192.0.2.20")
	// versionVIP checks /version with the documented TLS settings: a
	// check that ignores readiness (the apiserver answers it without etcd).
	versionVIP = netip.MustParseAddr("192.0.2.21")
)

// verdicts returns h's health verdict per VIP name, with its detail.
func verdicts(l *netlab.Lab, h *netlab.Host) (map[string]netlab.VIPStatus, error) {
	st, err := l.Status(h)
	if err != nil {
		return nil, err
	}
	out := map[string]netlab.VIPStatus{}
	for _, v := range st.VIPs {
		out[v.Name] = v
	}
	return out, nil
}

// waitVerdict waits up to timeout until h's verdict on vip is want and
// returns when it saw it.
func waitVerdict(t *testing.T, l *netlab.Lab, h *netlab.Host, vip string, want bool, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	ok, detail := netlab.Eventually(timeout, 100*time.Millisecond, func() (bool, string) {
		vs, err := verdicts(l, h)
		if err != nil {
			return false, err.Error()
		}
		v := vs[vip]
		at = time.Now()
		return v.Healthy == want, fmt.Sprintf("healthy=%v (%s)", v.Healthy, v.HealthDetail)
	})
	if !ok {
		t.Fatalf("%s on %s: want healthy=%v within %v, saw %s", vip, h.Name, want, timeout, detail)
	}
	return at
}

// checkOthersHealthy fails t unless every node but h reports the
// documented check healthy: their apiservers are ready.
func checkOthersHealthy(t *testing.T, l *netlab.Lab, h *netlab.Host, when string) {
	t.Helper()
	for _, n := range l.Others(h) {
		vs, err := verdicts(l, n)
		if err != nil {
			t.Fatal(err)
		}
		if !vs["apiserver"].Healthy {
			t.Errorf("%s: %s reports its apiserver unhealthy (%s); only %s's was touched", when, n.Name, vs["apiserver"].HealthDetail, h.Name)
		}
	}
}

// TestHealthCheckRealReadyz runs vipd with the documented health check
// against real kube-apiservers: healthy only while the node's own
// apiserver is ready; unhealthy when it is stopped, hung (SIGSTOP), or has
// lost etcd (its member cut from the others: no quorum) while it runs.
// Two witness checks in the same vipd show that the test tells the
// documented check from weaker ones: without tls_server_name the check
// never passes (so "healthy when ready" would fail), and a check of
// /version passes with etcd lost (so "unhealthy without etcd" would fail).
func TestHealthCheckRealReadyz(t *testing.T) {
	l := netlab.New(t, netlab.Options{})
	cp := Start(t, l)
	doc := cp.DocumentedVIP("apiserver", netlab.VIP4)
	noName := netlab.VIP{Name: "no-tls-name", Address: noNameVIP, HealthURL: HealthURL, HealthCAFile: cp.PKI.CACert}
	version := doc
	version.Name, version.Address, version.HealthURL = "version", versionVIP, "https://127.0.0.1:6443/version"
	l.StartVipds(netlab.VipdOptions{VIPs: []netlab.VIP{doc, noName, version}, RejoinInterval: "5s", LogLevel: "info"})
	if _, err := l.WaitSteady(doc, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes {
		waitVerdict(t, l, n, "apiserver", true, 10*time.Second)
		waitVerdict(t, l, n, "version", true, 10*time.Second)
		vs, err := verdicts(l, n)
		if err != nil {
			t.Fatal(err)
		}
		// The witness without tls_server_name fails on every ready node:
		// the certificate does not name 127.0.0.1.
		if v := vs["no-tls-name"]; v.Healthy || !strings.Contains(v.HealthDetail, "certificate") {
			t.Errorf("%s: check without tls_server_name: healthy=%v (%s), want unhealthy with a certificate error", n.Name, v.Healthy, v.HealthDetail)
		}
	}

	h := l.Nodes[1]
	// down is how long vipd may take to call a broken apiserver unhealthy:
	// fall (3) checks of interval 300 ms, each up to its 500 ms timeout,
	// and slack for a loaded machine.
	const down = 10 * time.Second
	// back bounds an apiserver's return to ready (start, etcd catch-up).
	const back = 90 * time.Second
	recovered := func(when string) {
		t.Helper()
		if err := cp.WaitReady(h, back); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		at := waitVerdict(t, l, h, "apiserver", true, back)
		// Healthy means ready: the apiserver answers /readyz now.
		if ok, detail := cp.Ready(h); !ok {
			t.Errorf("%s: vipd on %s turned healthy at %s while %s", when, h.Name, at.Format("15:04:05.000"), detail)
		}
		checkOthersHealthy(t, l, h, when)
	}

	took := func(what string, from, to time.Time) {
		t.Logf("%s on %s: vipd's documented check unhealthy %v later", what, h.Name, to.Sub(from).Round(10*time.Millisecond))
	}
	t.Run("stopped", func(t *testing.T) {
		ev := time.Now()
		if err := cp.APIServer(h).Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		took("apiserver SIGTERM", ev, waitVerdict(t, l, h, "apiserver", false, down))
		checkOthersHealthy(t, l, h, "apiserver stopped")
		if err := cp.StartAPIServer(h); err != nil {
			t.Fatal(err)
		}
		recovered("apiserver started again")
	})
	t.Run("hung", func(t *testing.T) {
		ev := time.Now()
		if err := cp.Signal(h, syscall.SIGSTOP, false, true); err != nil {
			t.Fatal(err)
		}
		took("apiserver SIGSTOP", ev, waitVerdict(t, l, h, "apiserver", false, down))
		checkOthersHealthy(t, l, h, "apiserver hung")
		if err := cp.Signal(h, syscall.SIGCONT, false, true); err != nil {
			t.Fatal(err)
		}
		recovered("apiserver resumed")
	})
	t.Run("etcd-lost", func(t *testing.T) {
		ev := time.Now()
		if err := cp.CutEtcd(h); err != nil {
			t.Fatal(err)
		}
		took("etcd peers cut", ev, waitVerdict(t, l, h, "apiserver", false, down))
		if !cp.APIServer(h).Running() || !cp.Etcd(h).Running() {
			t.Fatalf("apiserver or etcd of %s exited; the case is a running apiserver without etcd", h.Name)
		}
		// The apiserver still answers what needs no etcd: a check that
		// ignores readiness would keep this node eligible.
		vs, err := verdicts(l, h)
		if err != nil {
			t.Fatal(err)
		}
		if v := vs["version"]; !v.Healthy {
			t.Errorf("/version check unhealthy with etcd lost (%s): the case does not tell readiness from an answering apiserver", v.HealthDetail)
		}
		checkOthersHealthy(t, l, h, "etcd cut off")
		if err := cp.UncutEtcd(h); err != nil {
			t.Fatal(err)
		}
		recovered("etcd back")
	})
}
