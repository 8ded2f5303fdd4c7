package bgplab

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/lab/netlab"
)

// The fence step's timing.
const (
	// fenceCut is how long the owner's membership traffic is dropped, and
	// fenceAfterHeal how long holders and the router are still sampled
	// once the lab is steady again after the heal.
	fenceCut       = 5 * time.Second
	fenceAfterHeal = 3 * time.Second
	// fenceQuiet is how long the cluster has been whole before the cut: a
	// node that regained quorum less than 3 s ago (vipd's
	// staleHolderSettle; the node restarted after ownerMode's SIGKILL)
	// settles 1 s longer before claiming, which the step would measure
	// instead of the fence.
	fenceQuiet = 3500 * time.Millisecond
	// fenceSettle bounds convergence after the restart and after the heal.
	fenceSettle = 20 * time.Second
	// holderEvery is the holder sampling interval; routerEvery the pause
	// between two reads of the router's BGP table (each read is a vtysh or
	// birdc process, a few tens of milliseconds).
	holderEvery = 10 * time.Millisecond
	routerEvery = 10 * time.Millisecond
	// fenceTable is the nftables table that drops the owner's membership
	// traffic.
	fenceTable = "vt_fence"
)

// ownerFence proves issue 17's "the fence applies to BGP too" with
// announce = "owner": the owner's membership traffic (UDP and TCP port
// 7946, both directions) is dropped by nftables in its own namespace while
// its BGP session with the router stays up. The owner must release (the
// VIP leaves its lo, its path leaves the router) before any other node
// announces, and the VIP must move to another node. Holders are read
// through netlink in every node namespace every 10 ms and the router's BGP
// table as fast as its CLI answers, from just before the cut until 3 s
// after the lab is steady again after the heal: not one holder sample may
// show two holders and not one router sample two paths via different
// nodes. At the end of the cut the router has one path, via the node the
// connected nodes name as owner; after the heal one path via the owner
// every status names.
func ownerFence(t *testing.T, l *lab) {
	// ownerMode ended with a SIGKILL: restart that vipd so the cluster is
	// whole again (with one node down the two left have no majority to
	// spare and could not take over).
	var restarted []*node
	for _, n := range l.nodes {
		if !n.vipd.running() {
			l.startVipd(n, "owner")
			restarted = append(restarted, n)
		}
	}
	l.waitEstablished(restarted...)
	formed := l.waitFormed(fenceSettle)
	var owner *node
	l.waitView(fenceSettle, "one path via the owner before the cut", l.onePathVia(&owner, nil))
	time.Sleep(time.Until(formed.Add(fenceQuiet)))
	if o, detail := l.agreedOwner(); o != owner {
		t.Fatalf("owner changed while waiting for the cut (%s): %s", owner.name, detail)
	}
	t.Logf("fence: owner %s (%s), cluster whole for %v", owner.name, owner.ip, time.Since(formed).Round(time.Millisecond))

	var hn []netlab.HolderNode
	for _, n := range l.nodes {
		hn = append(hn, netlab.HolderNode{Name: n.name, NS: n.ns})
	}
	rec := netlab.RecordHoldersIn(t, hn, vip, holderEvery, 2*time.Minute)
	defer rec.Stop()
	rs := l.sampleRouter(routerEvery, 2*time.Minute)
	defer rs.stop()
	time.Sleep(100 * time.Millisecond) // a few samples of the steady state

	cut := time.Now()
	l.dropMembership(owner)
	time.Sleep(fenceCut)

	// End of the cut: the VIP is on one other node, whose path alone is at
	// the router; the owner's BGP session never went down.
	var to *node
	var connected []*node
	for _, n := range l.nodes {
		if n != owner {
			connected = append(connected, n)
		}
	}
	_, moved := l.waitView(2*time.Second, "one path via the new owner at the end of the cut", l.onePathAmong(&to, owner, connected))
	if ok, detail := l.router.established(owner); !ok {
		t.Errorf("the router's session with the cut owner %s went down: the path left by BGP, not by the fence: %s", owner.name, detail)
	}
	if st, err := l.status(owner); err != nil {
		t.Errorf("status of the cut owner %s: %v", owner.name, err)
	} else {
		if len(st.BGPPeers) != 1 || !strings.EqualFold(st.BGPPeers[0].State, "established") {
			t.Errorf("cut owner %s: bgp_peers %+v, want its session established", owner.name, st.BGPPeers)
		}
		if st.Fence.State != "expired" || len(st.VIPs) != 1 || st.VIPs[0].Held {
			t.Errorf("cut owner %s: fence %+v, vips %+v; want the fence expired and the VIP not held", owner.name, st.Fence, st.VIPs)
		}
		t.Logf("fence: cut owner %s says fence %q (evidence %d ms old), owner %q, %d of %d members alive, bgp session %s",
			owner.name, st.Fence.State, st.Fence.EvidenceAgeMs, ownerOf(st), st.AliveMembers, st.KnownMembers, st.BGPPeers[0].State)
	}

	heal := time.Now()
	l.undropMembership(owner)
	var final *node
	_, settled := l.waitView(fenceSettle, "one path via the owner every status names after the heal", l.onePathVia(&final, nil))
	steady := l.waitFormed(fenceSettle)
	if settled.After(steady) {
		steady = settled
	}
	time.Sleep(time.Until(steady.Add(fenceAfterHeal)))
	ss, sampleErrs := rec.Stop()
	routerSS := rs.stop()

	// Holders.
	if len(sampleErrs) > 0 {
		t.Errorf("%d holder sampling errors, first: %s", len(sampleErrs), sampleErrs[0])
	}
	inCut, afterHeal := ss.Between(cut, heal), ss.Between(heal, time.Time{})
	var maxStep time.Duration
	for i := 1; i < len(ss); i++ {
		maxStep = max(maxStep, ss[i].At.Sub(ss[i-1].At))
	}
	release, claim := time.Duration(-1), time.Duration(-1)
	if s, ok := inCut.First(func(s netlab.HolderSample) bool { return !s.Has(owner.name) }); ok {
		release = s.At.Sub(cut)
	}
	if s, ok := inCut.First(func(s netlab.HolderSample) bool {
		return slices.ContainsFunc(s.Holders, func(h string) bool { return h != owner.name })
	}); ok {
		claim = s.At.Sub(cut)
	}
	twoCut := inCut.Where(func(s netlab.HolderSample) bool { return len(s.Holders) >= 2 })
	twoHeal := afterHeal.Where(func(s netlab.HolderSample) bool { return len(s.Holders) >= 2 })
	t.Logf("fence: holders (netlink on lo, every %v): owner %s released +%s, %s claimed +%s after the cut; "+
		"two-holder samples %d of %d in the cut, %d of %d after the heal; longest sampling step %s",
		holderEvery, owner.name, msOrNever(release), to.name, msOrNever(claim), len(twoCut), len(inCut),
		len(twoHeal), len(afterHeal), fmtMS(maxStep))
	t.Logf("fence: holders in the cut: %s; after the heal: %s; longest stretch without a holder after the heal %s",
		inCut.Summary(), afterHeal.Summary(), fmtMS(longestEmpty(afterHeal)))
	for _, tr := range ss.Transitions() {
		t.Logf("fence: holders %s", tr)
	}
	if want := int(fenceCut/holderEvery) / 2; len(inCut) < want {
		t.Errorf("only %d holder samples in the %v cut; want at least %d to trust the count", len(inCut), fenceCut, want)
	}
	if len(twoCut) > 0 || len(twoHeal) > 0 {
		t.Errorf("TWO HOLDERS of %s: %d samples in the cut, %d after the heal; transitions: %s",
			vip, len(twoCut), len(twoHeal), strings.Join(ss.Transitions(), "; "))
	}
	if release < 0 || claim < 0 || claim < release {
		t.Errorf("owner %s released +%s, another node claimed +%s: want a release, then a claim", owner.name, msOrNever(release), msOrNever(claim))
	}
	if n := len(inCut); n == 0 || len(inCut[n-1].Holders) != 1 || inCut[n-1].Holders[0] != to.name {
		t.Errorf("at the end of the cut the holders were not exactly %s (the router's path): %s", to.name, strings.Join(inCut.Transitions(), "; "))
	}
	// A heal changes nothing the election cares about (preempt is off and
	// the node that took over is healthy): the VIP stays where it went,
	// without a moment with no holder.
	if final != to {
		t.Errorf("after the heal the VIP moved from %s to %s; want it to stay (no preemption): %s",
			to.name, final.name, strings.Join(afterHeal.Transitions(), "; "))
	}
	if gap := longestEmpty(afterHeal); gap > 3*holderEvery {
		t.Errorf("after the heal no node held the VIP for %s: %s", fmtMS(gap), strings.Join(afterHeal.Transitions(), "; "))
	}
	if ok, detail := onlyHolder(ss.Between(steady, time.Time{}), final.name); !ok {
		t.Errorf("after the heal the lab was steady with %s as owner, but then: %s", final.name, detail)
	}

	// The router.
	rCut, rHeal := routerSS.between(cut, heal), routerSS.between(heal, time.Time{})
	rRelease, rAnnounce := time.Duration(-1), time.Duration(-1)
	if s, ok := rCut.first(func(s routerSample) bool { return s.err == "" && !slices.Contains(s.hops, owner.ip) }); ok {
		rRelease = s.at.Sub(cut)
	}
	if s, ok := rCut.first(func(s routerSample) bool { return s.err == "" && slices.Contains(s.hops, to.ip) }); ok {
		rAnnounce = s.at.Sub(cut)
	}
	twoPaths := routerSS.where(func(s routerSample) bool { return len(s.hops) >= 2 })
	errs := routerSS.where(func(s routerSample) bool { return s.err != "" })
	t.Logf("fence: router (%s, a read every %s on average, longest step %s): %s's path gone +%s, %s's path +%s after the cut, "+
		"at the end of the cut one path via %s (+%s); samples with two paths %d of %d (%d in the cut, %d after the heal), read errors %d",
		l.router.kind, fmtMS(routerSS.meanStep()), fmtMS(routerSS.maxStep()), owner.name, msOrNever(rRelease), to.name,
		msOrNever(rAnnounce), to.name, fmtMS(moved.Sub(cut)), len(twoPaths), len(routerSS), len(rCut), len(rHeal), len(errs))
	for _, tr := range routerSS.transitions(l, cut) {
		t.Logf("fence: router %s", tr)
	}
	if len(rCut) < 10 {
		t.Errorf("only %d router samples in the %v cut; want at least 10", len(rCut), fenceCut)
	}
	if len(twoPaths) > 0 {
		t.Errorf("TWO PATHS for %s at the router in %d samples: %s", vipPrefix, len(twoPaths), strings.Join(routerSS.transitions(l, cut), "; "))
	}
	if len(errs) > len(routerSS)/10 {
		t.Errorf("%d of %d router reads failed, first: %s", len(errs), len(routerSS), errs[0].err)
	}
	if rRelease < 0 || rAnnounce < 0 || rAnnounce < rRelease {
		t.Errorf("router: %s's path gone +%s, %s's path +%s: want the withdraw first", owner.name, msOrNever(rRelease), to.name, msOrNever(rAnnounce))
	}
	t.Logf("fence: after the heal (+%s) one path via %s, the owner in every status, and one holder; steady +%s after the heal",
		fmtMS(heal.Sub(cut)), final.name, fmtMS(steady.Sub(heal)))

	for _, line := range l.logLines(cut.Add(-time.Second), steady, "fenced", "fence held", "holding VIP", "released VIP",
		"bgp route announced", "bgp route withdrawn", "bgp peer state") {
		t.Logf("fence: %s", line)
	}
}

// onePathAmong is the condition "exactly one BGP path and one kernel next
// hop, via a node of among that every node of among names as owner and
// that reports holding the VIP (and not via not)"; it stores that node in
// *owner. onePathVia asks every node; this one leaves out a node that
// cannot know (its membership traffic cut).
func (l *lab) onePathAmong(owner **node, not *node, among []*node) func(view) (bool, string) {
	return func(v view) (bool, string) {
		if len(v.paths) != 1 || len(v.paths[0].NextHops) != 1 || len(v.kernel) != 1 || v.kernel[0] != v.paths[0].NextHops[0] {
			return false, "want exactly one path and the kernel route via its next hop"
		}
		nh := v.paths[0].NextHops[0]
		o := l.nodeByIP(nh)
		if o == nil || o == not || !slices.Contains(among, o) {
			return false, fmt.Sprintf("path via %s, want one of %v", nh, ipsOf(among...))
		}
		for _, n := range among {
			st, err := l.status(n)
			if err != nil {
				return false, err.Error()
			}
			if ownerOf(st) != o.name {
				return false, fmt.Sprintf("%s says owner %q, path via %s", n.name, ownerOf(st), o.name)
			}
			if held := len(st.VIPs) == 1 && st.VIPs[0].Held; held != (n == o) {
				return false, fmt.Sprintf("%s: held=%t with the path via %s", n.name, held, o.name)
			}
		}
		*owner = o
		return true, ""
	}
}

// ownerOf is the owner st names for the lab's VIP ("" when none).
func ownerOf(st status) string {
	if len(st.VIPs) != 1 {
		return ""
	}
	return st.VIPs[0].Owner
}

// waitFormed waits until every running vipd sees every known member alive
// and returns when they all did.
func (l *lab) waitFormed(timeout time.Duration) time.Time {
	l.t.Helper()
	netnstest.Eventually(l.t, timeout, 50*time.Millisecond, "every vipd sees all members alive", func() (bool, string) {
		var seen []string
		ok := true
		for _, n := range l.nodes {
			st, err := l.status(n)
			if err != nil {
				return false, err.Error()
			}
			seen = append(seen, fmt.Sprintf("%s: %d of %d alive, quorum %t", n.name, st.AliveMembers, st.KnownMembers, st.Quorum))
			ok = ok && st.Quorum && st.KnownMembers == int32(len(l.nodes)) && st.AliveMembers == st.KnownMembers
		}
		return ok, strings.Join(seen, "; ")
	})
	return time.Now()
}

// dropMembership drops n's membership traffic (UDP and TCP port 7946 as
// source or destination, netlab.MembershipMatches) in both directions with
// the nftables table "inet vt_fence" in n's own namespace; everything
// else (BGP, BFD, clients) passes. The table is also deleted in t.Cleanup.
func (l *lab) dropMembership(n *node) {
	l.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", fenceTable)
	for _, c := range []struct{ name, hook string }{{"in", "input"}, {"out", "output"}} {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority raw; policy accept;\n", c.name, c.hook)
		for _, m := range netlab.MembershipMatches() {
			fmt.Fprintf(&b, "\t\t%s drop\n", m)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	cmd := exec.Command("ip", "netns", "exec", n.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v: %s\n%s", n.ns, err, out, b.String())
	}
	l.t.Cleanup(func() {
		// Gone already after undropMembership: the error says so.
		_, _ = netnstest.Run("ip", "netns", "exec", n.ns, "nft", "delete", "table", "inet", fenceTable)
	})
}

// undropMembership deletes dropMembership's table.
func (l *lab) undropMembership(n *node) {
	l.t.Helper()
	netnstest.MustRun(l.t, "ip", "netns", "exec", n.ns, "nft", "delete", "table", "inet", fenceTable)
}

// routerSample is one read of the router's BGP table for the VIP: the next
// hops of its paths, sorted and distinct.
type routerSample struct {
	at   time.Time
	hops []netip.Addr
	err  string
}

type routerSamples []routerSample

// routerRecorder reads the router's BGP table for the VIP in a loop.
type routerRecorder struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	ss    routerSamples
}

// sampleRouter reads the router's paths for the VIP, pausing every between
// reads, until stop or until max passes.
func (l *lab) sampleRouter(every, max time.Duration) *routerRecorder {
	r := &routerRecorder{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		deadline := time.Now().Add(max)
		for time.Now().Before(deadline) {
			var s routerSample
			ps, err := l.router.Routes(vipPrefix)
			s.at = time.Now()
			if err != nil {
				s.err = err.Error()
			}
			for _, p := range ps {
				for _, h := range p.NextHops {
					if !slices.Contains(s.hops, h) {
						s.hops = append(s.hops, h)
					}
				}
			}
			slices.SortFunc(s.hops, netip.Addr.Compare)
			r.mu.Lock()
			r.ss = append(r.ss, s)
			r.mu.Unlock()
			select {
			case <-r.stopc:
				return
			case <-time.After(every):
			}
		}
	}()
	return r
}

// stop ends the sampling and returns every sample.
func (r *routerRecorder) stop() routerSamples {
	select {
	case <-r.stopc:
	default:
		close(r.stopc)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ss)
}

// between returns the samples taken in [from, to); a zero to means no end.
func (ss routerSamples) between(from, to time.Time) routerSamples {
	return ss.where(func(s routerSample) bool { return !s.at.Before(from) && (to.IsZero() || s.at.Before(to)) })
}

func (ss routerSamples) where(keep func(routerSample) bool) routerSamples {
	var out routerSamples
	for _, s := range ss {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func (ss routerSamples) first(match func(routerSample) bool) (routerSample, bool) {
	for _, s := range ss {
		if match(s) {
			return s, true
		}
	}
	return routerSample{}, false
}

func (ss routerSamples) maxStep() time.Duration {
	var m time.Duration
	for i := 1; i < len(ss); i++ {
		m = max(m, ss[i].at.Sub(ss[i-1].at))
	}
	return m
}

func (ss routerSamples) meanStep() time.Duration {
	if len(ss) < 2 {
		return 0
	}
	return ss[len(ss)-1].at.Sub(ss[0].at) / time.Duration(len(ss)-1)
}

// transitions lists the changes of the router's path set, stamped
// relative to zero ("+312 ms paths via [n1] -> []"); read errors are not
// changes.
func (ss routerSamples) transitions(l *lab, zero time.Time) []string {
	var out []string
	prev := ""
	for i, s := range ss {
		if s.err != "" {
			continue
		}
		var names []string
		for _, h := range s.hops {
			if n := l.nodeByIP(h); n != nil {
				names = append(names, n.name)
			} else {
				names = append(names, h.String())
			}
		}
		k := "[" + strings.Join(names, " ") + "]"
		if i > 0 && prev != "" && k != prev {
			out = append(out, fmt.Sprintf("%s paths via %s -> %s", relMS(s.at.Sub(zero)), prev, k))
		}
		prev = k
	}
	return out
}

// logLines returns the lines of every node's vipd log stamped in [from,
// to] that contain any of words, prefixed with the node's name, in time
// order.
func (l *lab) logLines(from, to time.Time, words ...string) []string {
	type stamped struct {
		at   time.Time
		line string
	}
	var all []stamped
	for _, n := range l.nodes {
		b, err := os.ReadFile(filepath.Join(n.dir, "vipd.log"))
		if err != nil {
			all = append(all, stamped{from, fmt.Sprintf("%s: %v", n.name, err)})
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if !ok || !strings.HasPrefix(line, "time=") {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || at.Before(from) || at.After(to) {
				continue
			}
			for _, w := range words {
				if strings.Contains(line, w) {
					all = append(all, stamped{at, n.name + ": " + line})
					break
				}
			}
		}
	}
	slices.SortStableFunc(all, func(a, b stamped) int { return a.at.Compare(b.at) })
	var out []string
	for _, s := range all {
		out = append(out, s.line)
	}
	return out
}

// longestEmpty is the longest time from a sample without a holder to the
// next sample with one (or to the last sample).
func longestEmpty(ss netlab.HolderSamples) time.Duration {
	var longest time.Duration
	var start time.Time
	for _, s := range ss {
		switch {
		case len(s.Holders) == 0 && start.IsZero():
			start = s.At
		case len(s.Holders) > 0 && !start.IsZero():
			longest = max(longest, s.At.Sub(start))
			start = time.Time{}
		}
	}
	if !start.IsZero() {
		longest = max(longest, ss[len(ss)-1].At.Sub(start))
	}
	return longest
}

// onlyHolder reports whether every sample saw exactly name holding, and
// describes the first one that did not.
func onlyHolder(ss netlab.HolderSamples, name string) (bool, string) {
	for _, s := range ss {
		if len(s.Holders) != 1 || s.Holders[0] != name {
			return false, fmt.Sprintf("%s holders %v", s.At.Format("15:04:05.000"), s.Holders)
		}
	}
	return true, ""
}

// fmtMS formats d in whole milliseconds.
func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// relMS formats d as "+N ms" (or "-N ms").
func relMS(d time.Duration) string {
	if d < 0 {
		return "-" + fmtMS(-d)
	}
	return "+" + fmtMS(d)
}

// msOrNever is fmtMS, or "never" for a negative d.
func msOrNever(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmtMS(d)
}
