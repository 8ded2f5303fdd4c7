package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
)

func TestClientsMessage(t *testing.T) {
	b := clientsMessage(clientsFeed, "cp-1", []byte{1, 2, 3})
	kind, from, body, err := parseClientsMessage(b)
	if err != nil || kind != clientsFeed || from != "cp-1" || string(body) != "\x01\x02\x03" {
		t.Fatalf("parse(%x) = %d %q %x %v", b, kind, from, body, err)
	}
	for _, bad := range [][]byte{nil, {'C'}, {'X', 1, 0}, {'C', 9, 1, 'a'}, {'C', 1, 5, 'a'}, {'C', 1, 2, '-', 0x1b}} {
		if _, _, _, err := parseClientsMessage(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

// TestClusterResetsClients runs the mechanism in an in-process cluster with
// fake connections. The owner hands the VIP off but cannot take its address
// away (its withdraw fails): while it still holds the VIP nobody resets its
// clients, though the successor holds it too. Once it has released, the
// successor resets the connections the owner had published, except the one
// the successor has itself, and the owner closed its own before releasing.
func TestClusterResetsClients(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	vip := c.vip
	conn := func(client string, port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port)}
	}
	a1, a2, a3 := conn("198.51.100.7", 40000), conn("198.51.100.8", 40001), conn("198.51.100.9", 40002)
	c.nodes[owner].conns.set(a1, a2, a3)
	var others []string
	for name, n := range c.nodes {
		if name != owner {
			others = append(others, name)
			n.conns.set(a2) // a connection the successor has itself: never reset
			n.conns.onPoke = func() {
				if slices.Contains(c.w.holdersOf(vip), owner) {
					t.Errorf("%s resets clients while %s still holds the VIP", name, owner)
				}
			}
		}
	}
	// The others learn the owner's connections within a second or two.
	for _, name := range others {
		c.waitPublished(name, owner, 3)
	}

	c.w.setStuck(owner, true)
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	both := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 2 }, "the successor holding beside the stuck owner")
	succ := both[0]
	if succ == owner {
		succ = both[1]
	}
	// The owner keeps the VIP (its withdraw fails): nobody resets anything.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range others {
			if p := c.nodes[name].conns.poked(); len(p) > 0 {
				t.Fatalf("%s reset %v while %s still holds the VIP", name, p, owner)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	c.w.setStuck(owner, false)
	c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == succ }, "the owner released")
	want := []conns.Conn{a1, a3}
	deadline = time.Now().Add(5 * time.Second)
	for {
		got := c.nodes[succ].conns.poked()
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s reset %v, want %v (the owner's connections but its own)", succ, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range others {
		if name != succ {
			if p := c.nodes[name].conns.poked(); len(p) > 0 {
				t.Errorf("%s, not holding the VIP, reset %v", name, p)
			}
		}
	}
	c.nodes[owner].conns.mu.Lock()
	closed := c.nodes[owner].conns.closed
	c.nodes[owner].conns.mu.Unlock()
	if closed != 3 {
		t.Errorf("the owner closed %d of its connections on the handoff, want 3", closed)
	}
}

// TestClusterResetsAfterFence: the owner loses its membership traffic (it
// hears nobody); it fences itself and releases, the others take over, and
// the new holder resets the owner's clients, only once the owner no longer
// holds the VIP.
func TestClusterResetsAfterFence(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	vip := c.vip
	a1 := conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.MustParseAddrPort("198.51.100.7:40000")}
	c.nodes[owner].conns.set(a1)
	for name, n := range c.nodes {
		if name != owner {
			c.waitPublished(name, owner, 1)
			n.conns.onPoke = func() {
				if slices.Contains(c.w.holdersOf(vip), owner) {
					t.Errorf("%s resets clients while %s still holds the VIP", name, owner)
				}
			}
		}
	}
	c.nodes[owner].agent.members.SetAllowed([]netip.Prefix{netip.MustParsePrefix("192.0.2.99/32")})
	succ := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "the deaf owner's VIP on another node")[0]
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(c.nodes[succ].conns.poked(), []conns.Conn{a1}) {
		if time.Now().After(deadline) {
			t.Fatalf("%s reset %v, want [%v]", succ, c.nodes[succ].conns.poked(), a1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.nodes[owner].agent.members.SetAllowed(nil)
}

// TestClusterResetsUnlistedClients: the owner's client opened connections
// after the owner's last list (a kubectl's, for one request); when the
// owner is lost and the client comes back to the successor on a higher
// port, the successor resets the owner's listed connection and then the
// client's ports between the list and its new connection (conns.Unlisted),
// never the new connection itself.
func TestClusterResetsUnlistedClients(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	vip := c.vip
	conn := func(port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr("198.51.100.7"), port)}
	}
	c.nodes[owner].conns.set(conn(40000))
	for name, n := range c.nodes {
		if name != owner {
			c.waitPublished(name, owner, 1)
			n.conns.set(conn(40006)) // the client back, on this node
		}
	}
	c.nodes[owner].agent.members.SetAllowed([]netip.Prefix{netip.MustParsePrefix("192.0.2.99/32")})
	succ := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "the deaf owner's VIP on another node")[0]
	want := []conns.Conn{conn(40000), conn(40001), conn(40002), conn(40003), conn(40004), conn(40005)}
	deadline := time.Now().Add(8 * time.Second)
	for !slices.Equal(c.nodes[succ].conns.poked(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s reset %v, want %v", succ, c.nodes[succ].conns.poked(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.nodes[owner].agent.members.SetAllowed(nil)
}

// TestClusterHandoffResetsNoUnlistedPorts: on a planned handoff the owner
// closes its connections itself, those opened after its list included;
// the successor resets what the owner listed and no port below the
// client's new connection (those are for a lost owner).
func TestClusterHandoffResetsNoUnlistedPorts(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	vip := c.vip
	conn := func(port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr("198.51.100.7"), port)}
	}
	c.nodes[owner].conns.set(conn(40000))
	for name, n := range c.nodes {
		if name != owner {
			c.waitPublished(name, owner, 1)
			n.conns.set(conn(40006)) // the client, back on this node
		}
	}
	c.w.setStuck(owner, true)
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	both := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 2 }, "the successor holding beside the stuck owner")
	succ := both[0]
	if succ == owner {
		succ = both[1]
	}
	c.w.setStuck(owner, false)
	want := []conns.Conn{conn(40000)}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(c.nodes[succ].conns.poked(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s reset %v, want %v", succ, c.nodes[succ].conns.poked(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The unlisted resets would come 0.1 to 1 s after the first.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := c.nodes[succ].conns.poked(); !slices.Equal(got, want) {
			t.Fatalf("%s reset %v after a planned handoff, want only %v", succ, got, want)
		}
	}
}

// waitPublished waits (bounded) until node has n of publisher's
// connections.
func (c *testCluster) waitPublished(node, publisher string, n int) {
	c.t.Helper()
	a := c.nodes[node].agent
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := -1
		if err := a.do(context.Background(), func() { got = a.clients.published(publisher, c.vip).Len() }); err != nil {
			c.t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s has %d of %s's connections, want %d", node, got, publisher, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterDaisyChainHandoff: with announcers that can forward and
// linger, a planned handoff goes: the successor forwards the owner's
// connections to it and then announces, the owner releases the VIP by
// lingering on it (the address goes, its connections stay), and closes
// nothing: when its connections have ended by themselves (the apiserver's
// GOAWAY, the client), it stops lingering, and the successor stops
// forwarding ForwardGrace later.
func TestClusterDaisyChainHandoff(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	c.chain = true
	owner := c.startSteady()
	vip := c.vip
	conn := func(client string, port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port)}
	}
	c.nodes[owner].conns.set(conn("198.51.100.7", 40000), conn("198.51.100.8", 40001))
	mark := len(c.w.stepsSince(0))
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	holders := c.waitHolders(15*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "the successor alone")
	succ := holders[0]
	// The successor forwards before it announces: a client that moves at
	// its gratuitous ARP finds its writes passed on, not reset.
	want := []string{succ + " forward to [127.0.0.1] []", succ + " announce", owner + " linger", owner + " stop linger", succ + " stop forward"}
	// The owner lingers: its connections still open, forwarded, for as
	// long as they last.
	waitSteps(t, c.w, mark, owner+" linger")
	time.Sleep(2 * lingerPoll)
	if got := c.w.stepsSince(mark); slices.Contains(got, owner+" stop linger") || slices.Contains(got, succ+" stop forward") {
		t.Fatalf("steps %q: the owner's connections are open, yet the chain ended", got)
	}
	if h := c.w.holdersOf(vip); !slices.Equal(h, []string{succ}) {
		t.Fatalf("holders %v while the owner lingers, want [%s]: a lingering node holds nothing", h, succ)
	}
	// They end by themselves.
	c.nodes[owner].conns.set()
	deadline := time.Now().Add(lingerPoll + lifecycle.ForwardGrace + 5*time.Second)
	var got []string
	for {
		got = nil
		announced := false
		for _, s := range c.w.stepsSince(mark) {
			// The successor announces again when the owner released (a
			// contest it won); what matters is the order of the chain's
			// steps.
			if s == succ+" announce" {
				if announced {
					continue
				}
				announced = true
			}
			if strings.HasPrefix(s, owner+" ") || strings.HasPrefix(s, succ+" ") {
				got = append(got, s)
			}
		}
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	n := &c.nodes[owner].conns
	n.mu.Lock()
	closed, idle := n.closed, n.idleCalls
	n.mu.Unlock()
	if closed != 0 || idle != 0 {
		t.Errorf("the owner closed %d connections in %d idle closings, want none: they ended by themselves", closed, idle)
	}
}

// waitSteps waits (bounded, 10 s) until the wire's steps since mark
// include each of steps.
func waitSteps(t *testing.T, w *wire, mark int, steps ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, step := range steps {
		for !slices.Contains(w.stepsSince(mark), step) {
			if time.Now().After(deadline) {
				t.Fatalf("no step %q in %q", step, w.stepsSince(mark))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestClusterResetsDeadSuccessorsClients: the owner hands the VIP off
// but cannot take its address away (its withdraw fails); the successor
// holds it beside it and has clients of its own, then dies (deaf: the
// others declare it dead, it fences itself). The third node takes the VIP
// over while the old owner, alive, still holds it (the old owner closed
// its own clients at the handoff). Once the old owner has released, the
// third node resets the dead successor's clients.
func TestClusterResetsDeadSuccessorsClients(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	vip := c.vip
	conn := func(client string, port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port)}
	}
	s1 := conn("198.51.100.20", 40020)
	c.nodes[owner].conns.set(conn("198.51.100.7", 40000))
	for name, n := range c.nodes {
		if name != owner {
			n.conns.set(s1) // only the successor lists it: the VIP's connections of a node that holds it
		}
	}
	c.w.setStuck(owner, true)
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	both := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 2 }, "the successor holding beside the stuck owner")
	succ := both[0]
	if succ == owner {
		succ = both[1]
	}
	third := ""
	for name := range c.nodes {
		if name != owner && name != succ {
			third = name
		}
	}
	c.nodes[third].conns.set() // the third node has no client of its own
	c.waitPublished(third, succ, 1)
	// The successor's clients are reset once it no longer holds the VIP
	// (it fenced itself); the old owner holding it does not matter to
	// them: they were not its connections.
	for name, n := range c.nodes {
		n.conns.onPoke = func() {
			if slices.Contains(c.w.holdersOf(vip), succ) {
				t.Errorf("%s resets clients while %s still holds the VIP", name, succ)
			}
		}
	}

	// The successor dies; the third node takes the VIP beside the owner.
	c.nodes[succ].agent.members.SetAllowed([]netip.Prefix{netip.MustParsePrefix("192.0.2.99/32")})
	c.waitHolders(15*time.Second, func(h []string) bool { return slices.Equal(h, slices.Sorted(slices.Values([]string{owner, third}))) },
		"the third node holding beside the stuck owner, the successor gone")
	c.w.setStuck(owner, false)
	c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == third }, "the owner released")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := c.nodes[third].conns.poked()
		if slices.Contains(got, s1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s reset %v, want %v, the dead successor's client, among them", third, got, s1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.nodes[succ].agent.members.SetAllowed(nil)
}

// TestClusterCalledOffLingerClosesNothing: an owner lingering after a
// planned handoff (one client idle, one always busy) wins the VIP back
// (vipctl restore: it ranks first, preempt on). Its lingering is called off and
// closes none of its clients: it keeps them, as it takes the VIP back.
// And the successor, now handing back, does not close its own clients at
// once either: the owner forwards them to it and it lingers in turn.
func TestClusterCalledOffLingerClosesNothing(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	c.chain = true
	c.vipExtra = "preempt = true\n"
	for name := range c.nodes {
		c.nodes[name].cfg = c.config(name, "")
	}
	owner := c.startSteady()
	vip := c.vip
	idle := conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.MustParseAddrPort("198.51.100.7:40000")}
	busy := conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.MustParseAddrPort("198.51.100.8:40001")}
	on := &c.nodes[owner].conns
	on.set(idle, busy)
	on.mu.Lock()
	on.busy = []conns.Conn{busy}
	on.mu.Unlock()
	mark := len(c.w.stepsSince(0))
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	succ := "a"
	if owner == "a" {
		succ = "b"
	}
	waitStep := func(step string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Contains(c.w.stepsSince(mark), step) {
			if time.Now().After(deadline) {
				t.Fatalf("no step %q in %q", step, c.w.stepsSince(mark))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStep(owner + " linger")
	if n := on.closedCount(); n != 0 {
		t.Fatalf("the lingering owner closed %d connections, want none", n)
	}
	// The successor's own client, busy too.
	sc := conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.MustParseAddrPort("198.51.100.9:40002")}
	sn := &c.nodes[succ].conns
	sn.set(sc)
	sn.mu.Lock()
	sn.busy = []conns.Conn{sc}
	sn.mu.Unlock()

	// The owner, ranked first and lingering, is back in service and wins
	// the VIP back.
	mark = len(c.w.stepsSince(0))
	if _, err := c.client(owner).Restore(context.Background(), &apipb.RestoreRequest{}); err != nil {
		t.Fatal(err)
	}
	waitStep(owner + " announce") // the lingering called off
	c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == owner }, "the owner alone")
	waitStep(succ + " linger")
	if n := on.closedCount(); n != 0 {
		t.Errorf("the owner closed %d connections, want none: calling its lingering off closed its clients", n)
	}
	if n := sn.closedCount(); n != 0 {
		t.Errorf("the successor closed %d connections handing back, want none: it lingers", n)
	}
}
