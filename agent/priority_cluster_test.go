package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// lowestRanked is the node the rendezvous hash puts last for the test
// cluster's VIP: the one that never holds it by rank alone.
func lowestRanked(names ...string) string {
	ranked := slices.Clone(names)
	sortByRank("apiserver", ranked, func(n string) string { return n })
	return ranked[len(ranked)-1]
}

// withPriority writes priority p into node's [[vip]] and extra (preempt
// keys) into every node's, and reloads the configurations.
func (c *testCluster) withPriority(node string, p int, extra string) {
	c.t.Helper()
	c.vipExtra = extra
	if c.tail == nil {
		c.tail = map[string]string{}
	}
	c.tail[node] = fmt.Sprintf("priority = %d\n", p)
	for name := range c.nodes {
		c.nodes[name].cfg = c.config(name, "")
	}
}

// eligibilityOf is member's line in node's status for the first VIP.
func (c *testCluster) eligibilityOf(st *apipb.StatusResponse, member string) *apipb.NodeEligibility {
	for _, e := range st.GetVips()[0].GetEligibility() {
		if e.GetNode() == member {
			return e
		}
	}
	return nil
}

// TestClusterPriorityDecidesHolder: the node ranked last holds the VIP
// when its priority is the highest; status shows its priority and place;
// without preempt, when it returns after a failover the holder keeps the
// VIP; reloading files that do not change the priorities moves nothing.
func TestClusterPriorityDecidesHolder(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	prio := lowestRanked("a", "b", "c")
	c.withPriority(prio, 150, "")
	if h := c.startSteady(); h != prio {
		t.Fatalf("holder %s, want %s (priority 150; ranked last)", h, prio)
	}
	other := "a"
	if other == prio {
		other = "b"
	}
	c.waitStatus(other, func(st *apipb.StatusResponse) bool {
		e := c.eligibilityOf(st, prio)
		return e != nil && e.Priority == 150 && e.Order == 1
	}, prio+" priority 150, order 1")

	c.stop(prio)
	next := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != prio }, "after the priority node stopped")[0]
	c.start(prio)
	c.waitStatus(prio, func(st *apipb.StatusResponse) bool {
		e := c.eligibilityOf(st, prio)
		return e != nil && e.Eligible && e.Order == 1 && st.Vips[0].Owner == next && st.Vips[0].Reason == ReasonKeep
	}, "returned priority node first in order, holder "+next+" kept (no preempt)")
	if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != next {
		t.Fatalf("returned priority node without preempt: holders %v, want [%s]", h, next)
	}

	claims := c.w.claimCount()
	for name, n := range c.nodes {
		reloads := c.log.count("configuration reloaded", "node="+name)
		n.agent.Reload()
		waitFor(t, 5*time.Second, name+" reloaded", func() bool { return c.log.count("configuration reloaded", "node="+name) > reloads })
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != next {
			t.Fatalf("holders %v after reloading unchanged priorities, want only %s", h, next)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := c.w.claimsSince(claims); len(got) > 0 {
		t.Errorf("reload with unchanged priorities moved the VIP: claims %v", got)
	}
}

// TestClusterPreempt: with preempt, the priority node takes the VIP back
// when it returns; with a preempt delay it first waits it out (the others
// see it waiting while the holder keeps the VIP), then takes it.
func TestClusterPreempt(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		wait        bool
	}{
		{"no delay", "preempt = true\n", false},
		{"delay", "preempt = true\npreempt_delay = \"3s\"\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, "a", "b", "c")
			prio := lowestRanked("a", "b", "c")
			c.withPriority(prio, 150, tc.extra)
			c.startSteady()
			// A node that claimed before the others joined (a loaded host)
			// is preempted: wait for the priority node.
			c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == prio }, "priority 150 holds it")
			c.stop(prio)
			next := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != prio }, "after the priority node stopped")[0]
			c.start(prio)
			if tc.wait {
				c.waitStatus(next, func(st *apipb.StatusResponse) bool {
					e := c.eligibilityOf(st, prio)
					return e != nil && e.Eligible && e.Waiting && st.Vips[0].Owner == next && st.Vips[0].Reason == ReasonWaiting
				}, prio+" waits out its preempt delay while "+next+" keeps the VIP")
				if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != next {
					t.Fatalf("during the preempt delay: holders %v, want [%s]", h, next)
				}
			}
			c.waitHolders(15*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == prio }, "priority node took the VIP back")
			if got := c.log.count("preempt delay over", "node="+prio) > 0; got != tc.wait {
				t.Errorf("log says the preempt delay ended: %v, want %v", got, tc.wait)
			}
		})
	}
}

// TestClusterGroupMovesTogether: an IPv4 and an IPv6 VIP of one group
// are held by one node; when that node's check for the IPv6 VIP fails,
// both move to the same other node.
func TestClusterGroupMovesTogether(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	v6 := netip.MustParseAddr("2001:db8::10")
	dir := t.TempDir()
	c.vipExtra = "group = \"api\"\n"
	c.tail = map[string]string{}
	for name := range c.nodes {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c.tail[name] = fmt.Sprintf("[[vip]]\nname = \"apiserver-v6\"\naddress = %q\ninterface = \"fake0\"\ngroup = \"api\"\n"+
			"[vip.health]\ncommand = [\"test\", \"-f\", %q]\ninterval = \"100ms\"\ntimeout = \"1s\"\nrise = 1\nfall = 1\n", v6, file)
		c.nodes[name].cfg = c.config(name, "")
	}
	holder := c.startSteady()
	waitFor(t, 10*time.Second, "the IPv6 VIP with the IPv4 one", func() bool {
		h := c.w.holdersOf(v6)
		return len(h) == 1 && h[0] == holder
	})
	if err := os.Remove(filepath.Join(dir, holder)); err != nil {
		t.Fatal(err)
	}
	h4 := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != holder }, "IPv4 VIP moved with the IPv6 one")
	waitFor(t, 10*time.Second, "IPv6 VIP on "+h4[0], func() bool {
		h := c.w.holdersOf(v6)
		return len(h) == 1 && h[0] == h4[0]
	})
	st, err := c.client(h4[0]).Status(context.Background(), &apipb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.Vips {
		if e := c.eligibilityOf(&apipb.StatusResponse{Vips: []*apipb.VIPStatus{v}}, holder); e == nil || e.Eligible || e.Reason != "unhealthy" {
			t.Errorf("%s: %s's eligibility %v, want not eligible: unhealthy (for the group's IPv6 VIP)", v.Name, holder, e)
		}
	}
}
