package drain

import (
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestFollowerPartitionAndHeal cuts the lowest ranked node (not the holder)
// off at the switch until it has declared both others dead, then heals. Back, it
// gossips those deaths: the holder's own incarnation may not have changed
// in the meantime, so the third node can believe for a moment that the
// holder is dead. Nothing may move: from the cut to 3 s after the heal,
// every 20 ms sample sees the holder alone, and the client loses no probe.
func TestFollowerPartitionAndHeal(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	rest := l.Others(owner)
	// Cut the lowest ranked node: the third one, ranked right after the
	// holder, is the one that would elect itself if it took the holder
	// for dead.
	order := rankOrder(vip, l.Nodes...)
	cutNode := l.Node(order[len(order)-1])
	if cutNode == owner {
		cutNode = l.Node(order[len(order)-2])
	}
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 60 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	rec := l.RecordHolders(vip.Address, sampleInterval, 50*time.Second)
	defer rec.Stop()

	cut := pr.Mark("cut " + cutNode.Name)
	l.Cut(cutNode)
	// The isolated node declares the others dead (its quorum goes).
	if !waitNoQuorum(t, l, cutNode, 30*time.Second) {
		t.Fatalf("isolated %s still reports quorum 30s after the cut", cutNode.Name)
	}
	t.Logf("isolated %s lost quorum %v after the cut", cutNode.Name, time.Since(cut.Time).Round(time.Millisecond))

	heal := pr.Mark("heal " + cutNode.Name)
	l.Uncut(cutNode)
	waitHealed(t, l, cutNode, owner, heal.Time)
	time.Sleep(3 * time.Second)
	// Whether the healed node's gossip made the others take the holder
	// for dead depends on incarnations: log it, so a run shows whether
	// the path was taken.
	for _, n := range rest {
		if n == cutNode {
			continue
		}
		for _, line := range logLines(n, `msg="member state"`, "member="+owner.Name, "state=dead") {
			t.Logf("%s: %s", n.Name, line)
		}
	}
	samples, errs := rec.Stop()
	checkSamplingErrs(t, errs)
	s := samples.Between(cut.Time, time.Time{})
	t.Logf("from the cut to 3s after the heal: %s", s.Summary())
	if bad := s.Where(func(x netlab.HolderSample) bool { return len(x.Holders) != 1 || x.Holders[0] != owner.Name }); len(bad) > 0 {
		t.Errorf("%d of %d samples did not see %s alone holding the VIP: %v", len(bad), len(s), owner.Name, s.Transitions())
	}
	if h, err := l.OneHolder(vip); err != nil || h != owner.Name {
		t.Errorf("3s after the heal: holder %q (%v), want %s", h, err, owner.Name)
	}
	n, servers := netlab.Served(netlab.ProbesBetween(pr.Probes(), cut.Time, time.Time{}))
	t.Logf("client from the cut on: %d failed probes, servers %v", n, servers)
	if n > 0 || len(servers) != 1 || servers[owner.Name] == 0 {
		t.Errorf("client from the cut on: %d failed probes, servers %v; want none failed, all from %s", n, servers, owner.Name)
	}
}
