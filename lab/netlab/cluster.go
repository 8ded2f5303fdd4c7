package netlab

import (
	"testing"
	"time"
)

// The timers every lab shares.
const (
	// RejoinInterval is cluster.rejoin_interval in every lab configuration
	// (vipd's default is 30 s): a member taken for dead after a cut comes
	// back through the rejoin loop soon after the heal.
	RejoinInterval = 5 * time.Second
	// DefaultSettle is Options.Settle's default: how long a cluster may
	// take to form and elect, and to converge after an event.
	DefaultSettle = 15 * time.Second
	// DefaultStopTimeout bounds a SIGTERM shutdown (Lab.StopTimeout,
	// scaled): handoff_timeout is 10 s by default.
	DefaultStopTimeout = 20 * time.Second
)

// Spec describes the cluster StartCluster starts: the lab, what runs on
// every node, and the VIP to wait on.
type Spec struct {
	// Options shape the lab (nodes, client namespace, IPv6, bond + VLAN,
	// Settle).
	Options
	// HTTP starts the lab httpd (StartHTTP) on every node before vipd.
	HTTP bool
	// Vipd shapes every node's vipd configuration (VipdConfig).
	Vipd VipdOptions
	// Edits are regexp edits applied to every node's configuration
	// (EditedVipdConfig). [none]
	Edits []string
	// Config, when set, returns node h's whole configuration; Vipd and
	// Edits are not used then.
	Config func(l *Lab, h *Host) string
}

// StartCluster creates a lab for t (New), starts the lab httpd on every
// node when s.HTTP is set and vipd on every node, and waits (bounded by
// Lab.Settle) until every node sees every other alive and exactly one
// holds the VIP: s.Vipd's first, else the lab's first default one. It
// returns the lab, that VIP and its holder; failures stop the test.
func StartCluster(t testing.TB, s Spec) (*Lab, VIP, *Host) {
	t.Helper()
	l := New(t, s.Options)
	if s.HTTP {
		l.StartHTTPAll()
	}
	for _, n := range l.Nodes {
		switch {
		case s.Config != nil:
			l.StartVipdConfig(n, s.Config(l, n))
		case len(s.Edits) > 0:
			l.StartVipdConfig(n, l.EditedVipdConfig(t, n, s.Vipd, s.Edits...))
		default:
			l.StartVipd(n, s.Vipd)
		}
	}
	vip := l.DefaultVIPs()[0]
	if len(s.Vipd.VIPs) > 0 {
		vip = s.Vipd.VIPs[0]
	}
	holder, err := l.WaitSteady(vip, l.Settle)
	if err != nil {
		t.Fatal(err)
	}
	return l, vip, holder
}
