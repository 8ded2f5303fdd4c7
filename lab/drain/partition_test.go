package drain

import (
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestPartitionAndHeal cuts the owner off at the switch (its bridge port
// leaves the bridge; its own link stays up, so vipd sees no link event):
// the isolated node must release the VIP for lack of quorum and the two
// others hold it on exactly one node; after the heal there must be one
// holder within rejoin_interval + 5 s and never two at any 20 ms sample from
// the heal until 3 s after convergence.
func TestPartitionAndHeal(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	rest := l.Others(owner)
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 60 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	rec := l.RecordHolders(vip.Address, sampleInterval, 50*time.Second)
	defer rec.Stop()

	// failure_detection = "fast" declares a node dead in about 1 s.
	bound := time.Second + 5*time.Second
	var next string
	ok := t.Run("isolated owner releases, majority holds", func(t *testing.T) {
		cut := pr.Mark("cut " + owner.Name)
		l.Cut(owner)
		var err error
		// OneHolder with rest: the address on one node only (the isolated
		// owner included), and the majority's status agrees.
		next, err = l.WaitMoved(vip, owner.Name, bound, rest...)
		if err != nil {
			t.Fatalf("within %v of cutting %s off: %v", bound, owner.Name, err)
		}
		s := rec.Samples().Between(cut.Time, time.Time{})
		released, _ := s.First(func(s netlab.HolderSample) bool { return !s.Has(owner.Name) })
		taken, _ := s.First(func(s netlab.HolderSample) bool { return s.Has(next) })
		t.Logf("cut %s: it released the VIP after %v, %s held it after %v (bound %v); holders %s",
			owner.Name, released.At.Sub(cut.Time).Round(time.Millisecond), next, taken.At.Sub(cut.Time).Round(time.Millisecond), bound, s.Summary())
		// Its quorum is membership's view: the isolated node loses it when
		// memberlist declares the others dead, which takes longer than the
		// lease's move (it is fenced long before).
		if waitNoQuorum(t, l, owner, 30*time.Second) {
			t.Logf("isolated %s reports no quorum %v after the cut", owner.Name, time.Since(cut.Time).Round(time.Millisecond))
		} else {
			t.Errorf("isolated %s still reports quorum 30s after the cut", owner.Name)
		}
		if err := pr.WaitServedBy(next, 25, cut.Time, 5*time.Second); err != nil {
			t.Errorf("client on the majority side: %v", err)
		}
		// Stay partitioned a moment: the majority keeps one holder, the
		// isolated node none.
		time.Sleep(time.Second)
		// The isolated owner may still hold the address for a moment after
		// the majority took over (each side detects the failure on its own);
		// the client cannot reach it, so only the majority side counts for
		// "one holder", and the isolated side must be empty once released.
		during := rec.Samples().Between(taken.At, time.Time{})
		majority := during.Where(func(s netlab.HolderSample) bool {
			n := len(s.Holders)
			if s.Has(owner.Name) {
				n--
			}
			return n != 1 || !s.Has(next)
		})
		if len(majority) > 0 {
			t.Errorf("while partitioned, %d of %d samples did not see %s as the only holder on the majority side: %v", len(majority), len(during), next, during.Transitions())
		}
		overlap := during.Where(func(s netlab.HolderSample) bool { return s.Has(owner.Name) })
		t.Logf("isolated %s still held the address in %d samples (%v) after %s took it", owner.Name, len(overlap), max(0, released.At.Sub(taken.At)).Round(time.Millisecond), next)
		if again := rec.Samples().Between(released.At, time.Time{}).Where(func(s netlab.HolderSample) bool { return s.Has(owner.Name) }); len(again) > 0 {
			t.Errorf("isolated %s held the address again after releasing it: %v", owner.Name, rec.Samples().Transitions())
		}
		g := pr.Gaps()[0]
		t.Logf("client: %s -> %s, first answer from the new holder %v after the cut, longest gap %v (%d probes)",
			g.Before, g.After, g.ToNewNode.Round(time.Millisecond), g.Outage.Round(time.Millisecond), g.LongestRun)
	})
	if !ok {
		t.FailNow()
	}

	t.Run("heal: one holder, never two", func(t *testing.T) {
		heal := pr.Mark("heal " + owner.Name)
		l.Uncut(owner)
		bound := netlab.RejoinInterval + 5*time.Second
		waitHealed(t, l, owner, rest[0], heal.Time)
		rejoined := time.Since(heal.Time)
		holder, err := l.WaitOneHolder(vip, bound-time.Since(heal.Time))
		if err != nil {
			t.Fatalf("within %v of the heal: %v", bound, err)
		}
		converged := time.Now()
		t.Logf("heal: %s alive on both sides after %v, one holder (%s) agreed by every node after %v (bound %v)",
			owner.Name, rejoined.Round(time.Millisecond), holder, converged.Sub(heal.Time).Round(time.Millisecond), bound)
		time.Sleep(3 * time.Second)
		samples, errs := rec.Stop()
		checkSamplingErrs(t, errs)
		after := samples.Between(heal.Time, time.Time{})
		two := after.Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 1 })
		t.Logf("from the heal to 3s after convergence: %d samples, %d with two holders, %d with none: %s",
			len(after), len(two), after.Count(0), after.Summary())
		if len(two) > 0 {
			t.Errorf("after the heal %d of %d samples saw two holders: %v", len(two), len(after), after.Transitions())
		}
		if n := after.Count(0); n > 0 {
			t.Errorf("after the heal %d of %d samples saw no holder: %v", n, len(after), after.Transitions())
		}
		if holder != next {
			t.Errorf("after the heal: %s holds the VIP, want %s to keep it (preempt off)", holder, next)
		}
		// The healed node gossips the deaths it concluded while cut off;
		// a member dead in the holder's view for a moment must not cost
		// it quorum (agent.hasQuorum counts members the lease hears).
		// Whether the gossip lands depends on incarnations: log when it
		// did, so a run shows the path was taken.
		for _, line := range logLines(l.Node(next), "counted alive for quorum") {
			t.Logf("heal: %s: %s", next, line)
		}
		tail := after.Between(converged, time.Time{})
		if len(tail) < 100 {
			t.Errorf("only %d samples in the 3s after convergence, want at least 100", len(tail))
		}
		if h, err := l.OneHolder(vip); err != nil || h != holder {
			t.Errorf("3s after convergence: holder %q (%v), want %s", h, err, holder)
		}
		n, servers := netlab.Served(netlab.ProbesBetween(pr.Probes(), heal.Time, time.Time{}))
		t.Logf("client after the heal: %d failed probes, servers %v", n, servers)
		if n > 0 || servers[owner.Name] > 0 {
			t.Errorf("client after the heal: %d failed probes, servers %v; want none failed, all from %s", n, servers, holder)
		}
	})
}
