package faults

import (
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// maxFlapOverlap bounds the cumulative time two nodes may hold the VIP at
// once while the owner's link flaps, should vipd not achieve zero.
const maxFlapOverlap = time.Second

// TestFlappingOwnerLink takes the owner's link down and up 10 times in 20 s
// (node side: the node sees its carrier go) while sampling which nodes hold
// the VIP every 20 ms, during the flaps and 5 s after. The isolated owner
// loses quorum and releases; the others take over. Two holders at once
// would be a split brain; every sample that saw one is reported, and the
// VIP must end up on exactly one node.
func TestFlappingOwnerLink(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(nil))
	s := startSampler(t, l, vip, 60*time.Second)
	start := time.Now()
	var down []window
	for i := 0; i < 10; i++ {
		w := window{label: "down", from: time.Now()}
		l.LinkDown(owner)
		time.Sleep(time.Second)
		l.LinkUp(owner)
		w.to = time.Now()
		down = append(down, w)
		time.Sleep(time.Second)
	}
	flapped := time.Since(start)
	time.Sleep(5 * time.Second)
	ss := s.stop()
	st := stats(ss)
	t.Logf("%s link flapped 10 times in %v, then 5 s quiet: %s", owner.Name, flapped.Round(time.Millisecond), st)
	// While the owner's link is down its copy of the address answers
	// nobody; two holders while it is up is what clients could see.
	in, out := split(ss, down)
	t.Logf("samples while %s's link was down: %s", owner.Name, stats(in))
	t.Logf("samples while %s's link was up: %s", owner.Name, stats(out))
	if len(st.errs) > 0 {
		t.Errorf("sampling holders: %d errors, first: %s", len(st.errs), st.errs[0])
	}
	if st.samples < 500 {
		t.Errorf("only %d holder samples in %v; want at least 500 to trust the count", st.samples, st.span)
	}
	if st.multi > 0 {
		t.Logf("DAEMON FINDING: two nodes held %s at once in %d samples (%v cumulative, longest %v) while %s's link flapped",
			vip.Address, st.multi, st.multiTime.Round(time.Millisecond), st.longestMulti.Round(time.Millisecond), owner.Name)
		// What the nodes did around the longest stretch.
		for _, n := range l.Nodes {
			for _, line := range n.VipdLogBetween(t, st.longestFrom.Add(-3*time.Second), st.longestTo.Add(500*time.Millisecond),
				"holding VIP", "released VIP", "quorum", "ownership change", "duplicate", "re-announc", "member state") {
				t.Logf("%s: %s", n.Name, line)
			}
		}
		if st.multiTime >= maxFlapOverlap {
			t.Errorf("two holders of %s for %v cumulative during the flaps, want under %v: %s "+
				"(known daemon issue: an owner whose link flaps faster than failure detection keeps quorum and the VIP "+
				"while the others move it, and its duplicate-owner watcher has stopped on the first link down)",
				vip.Address, st.multiTime, maxFlapOverlap, st)
		}
	}
	holder, err := l.WaitOneHolder(vip, l.Settle)
	if err != nil {
		t.Fatalf("after the flaps: want exactly one holder: %v", err)
	}
	if err := l.WaitAlive(owner, l.Nodes, netlab.RejoinInterval+l.Settle); err != nil {
		t.Errorf("after the flaps: %v", err)
	}
	if h, err := l.OneHolder(vip); err != nil || h != holder {
		t.Errorf("after %s rejoined: holder %q, err %v; want %s to keep it", owner.Name, h, err, holder)
	}
	t.Logf("after the flaps: %s holds %s", holder, vip.Address)
}
