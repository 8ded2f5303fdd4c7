package converge

import (
	"fmt"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// cutWatch is how long holders are sampled after the cut.
const cutWatch = 10 * time.Second

// TestPartitionAfterGracefulLeave stops one of three nodes gracefully
// (SIGTERM: it hands the VIP off if it holds it, then leaves), then cuts
// the remaining two apart at the switch. A member that left stays in the
// quorum base (3) until `vipctl forget`, so each of the two sees 1 of 3:
// neither has quorum, the holder releases and the other does not claim.
// Sampled every 20 ms for 10 s after the cut, never two holders; after the
// heal the VIP is held again by exactly one node.
func TestPartitionAfterGracefulLeave(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{Vipd: netlab.VipdOptions{}})
	gone := owner // the worst case: the VIP moves first
	l.StopCleanly(t, gone, l.StopTimeout)
	rest := l.Others(gone)
	holder, err := l.WaitOneHolder(vip, l.Settle, rest...)
	if err != nil {
		t.Fatalf("after %s left: %v", gone.Name, err)
	}
	for _, n := range rest {
		st, err := l.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after %s left, %s: quorum=%t known=%d alive=%d, %s is %s", gone.Name, n.Name, st.Quorum, st.KnownMembers, st.AliveMembers, gone.Name, memberState(st, gone.Name))
		if !st.Quorum || st.KnownMembers != 3 || st.AliveMembers != 2 {
			t.Errorf("after %s left, %s reports quorum=%t known=%d alive=%d; want quorum with 2 of 3 (a member that left stays in the quorum base)",
				gone.Name, n.Name, st.Quorum, st.KnownMembers, st.AliveMembers)
		}
	}

	h := l.Node(holder)
	rec := l.RecordHolders(vip.Address, sampleEvery, cutWatch+30*time.Second)
	defer rec.Stop()
	cut := time.Now()
	l.Cut(h)
	time.Sleep(cutWatch)
	during := rec.Samples().Between(cut, time.Time{})
	two := during.Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 1 })
	released, ok := during.First(func(s netlab.HolderSample) bool { return len(s.Holders) == 0 })
	rel := "never"
	if ok {
		rel = released.At.Sub(cut).Round(time.Millisecond).String()
	}
	t.Logf("cut %s off from %s: %d samples over %v, %d with two holders; %s released after %s; holders %s; transitions %v",
		h.Name, otherThan(rest, h).Name, len(during), cutWatch, len(two), h.Name, rel, during.Summary(), during.Transitions())
	if len(two) > 0 {
		t.Errorf("while cut: %d samples with two holders: %v", len(two), during.Transitions())
	}
	if len(during) < int(cutWatch/sampleEvery)/2 {
		t.Errorf("while cut: only %d samples in %v", len(during), cutWatch)
	}
	for _, n := range rest {
		st, err := l.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("while cut, %s: quorum=%t known=%d alive=%d", n.Name, st.Quorum, st.KnownMembers, st.AliveMembers)
		if st.Quorum {
			t.Errorf("while cut, %s reports quorum (known=%d alive=%d): want none, 1 of 3", n.Name, st.KnownMembers, st.AliveMembers)
		}
	}
	// Without quorum nobody may hold it: the holder releases (it sees 1 of
	// 3) and the other never claims.
	if !ok {
		t.Errorf("while cut: %s kept the VIP for %v without quorum", h.Name, cutWatch)
	} else if again := during.Between(released.At, time.Time{}).Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 0 }); len(again) > 0 {
		t.Errorf("while cut: the VIP was held again after %s released it: %v", h.Name, during.Transitions())
	}

	heal := time.Now()
	l.Uncut(h)
	next, err := l.WaitOneHolder(vip, netlab.RejoinInterval+10*time.Second, rest...)
	if err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	back := time.Since(heal)
	time.Sleep(2 * time.Second)
	samples, errs := rec.Stop()
	if len(errs) > 0 {
		t.Errorf("sampling holders: %d errors, first: %s", len(errs), errs[0])
	}
	after := samples.Between(heal, time.Time{})
	t.Logf("heal: %s holds the VIP %v after the heal (every status agreeing); holders %s", next, back.Round(time.Millisecond), after.Summary())
	if two := after.Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 1 }); len(two) > 0 {
		t.Errorf("after the heal: %d samples with two holders: %v", len(two), after.Transitions())
	}
	if h, err := l.OneHolder(vip, rest...); err != nil || h != next {
		t.Errorf("2s after the heal: holder %q (%v), want %s", h, err, next)
	}
}

// memberState is name's state in st, "absent" when st does not list it.
func memberState(st netlab.Status, name string) string {
	if m, ok := st.Member(name); ok {
		return m.State
	}
	return "absent"
}

// otherThan returns the first host of hs that is not h.
func otherThan(hs []*netlab.Host, h *netlab.Host) *netlab.Host {
	for _, x := range hs {
		if x != h {
			return x
		}
	}
	panic(fmt.Sprintf("no host other than %s", h.Name))
}
