package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/nodewatch"
	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// kubeCluster is a test cluster whose nodes each follow their own Node,
// served by a fake apiserver of their own, shaped as kubeadm makes them
// (control-plane label and taint, exclude-from-external-load-balancers
// label, kubelet.conf with system:node:NAME credentials), registered and
// schedulable.
func kubeCluster(t *testing.T, names ...string) (*testCluster, map[string]*nodewatchtest.Server) {
	t.Helper()
	return shapedCluster(t, nodewatchtest.ShapeNamed("kubeadm"), names...)
}

// fastNodeWatch shortens the Node watch's timers for tests.
func fastNodeWatch(c nodewatch.Config) nodewatch.Config {
	c.MinBackoff, c.MaxBackoff, c.RequestTimeout = 20*time.Millisecond, 200*time.Millisecond, 2*time.Second
	return c
}

// waitNodeReasons waits until node's status gives its Node's withdraw
// reasons as want (none: eligible by its Node).
func (c *testCluster) waitNodeReasons(node string, want ...string) {
	c.t.Helper()
	c.waitStatus(node, func(st *apipb.StatusResponse) bool {
		return slices.Equal(st.NodeWithdrawReasons, want) && st.Kubernetes != nil && st.Kubernetes.Reachable
	}, fmt.Sprintf("the Node's reasons %v", want))
}

// keeps checks, every 50 ms for d, that owner alone holds the VIP, and
// then that nobody claimed it since the first claims.
func (c *testCluster) keeps(owner string, claims int, d time.Duration, what string) {
	c.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != owner {
			c.t.Fatalf("%s: holders %v, want %s to keep it", what, h, owner)
		}
	}
	if got := c.w.claimsSince(claims); len(got) != 0 {
		c.t.Errorf("%s: claims %v", what, got)
	}
}

// eligibleIn reports whether node is eligible for the VIP in st.
func eligibleIn(st *apipb.StatusResponse, node string) bool {
	for _, e := range st.Vips[0].Eligibility {
		if e.Node == node {
			return e.Eligible
		}
	}
	return false
}

// TestNodeWithdrawsAndHandsOff: on every distribution's Node shape, each
// way a Node withdraws its node (cordon, vipd's exclusion label, the
// deletion, a graceful shutdown, the out-of-service taint) moves the VIP
// off the owner make-before-break (the successor holds it before the owner
// releases it), the reason shows in status and events, nothing is written
// to state_dir, and the reverse makes the node eligible again without
// moving the VIP back (no preempt).
func TestNodeWithdrawsAndHandsOff(t *testing.T) {
	for _, shape := range nodewatchtest.Shapes() {
		t.Run(shape.Name, func(t *testing.T) { testNodeWithdrawsAndHandsOff(t, shape) })
	}
}

func testNodeWithdrawsAndHandsOff(t *testing.T, shape nodewatchtest.Shape) {
	c, apis := shapedCluster(t, shape, "a", "b", "c")
	c.startSteady()
	for _, n := range []string{"a", "b", "c"} {
		c.waitNodeReasons(n)
	}
	steps := []struct {
		reason   string
		do, undo func(*nodewatchtest.Server)
	}{
		{nodewatch.ReasonCordoned, func(s *nodewatchtest.Server) { s.Cordon(true) }, func(s *nodewatchtest.Server) { s.Cordon(false) }},
		{nodewatch.ReasonExcluded, func(s *nodewatchtest.Server) { s.Label(nodewatch.LabelExclude, "") },
			func(s *nodewatchtest.Server) { s.Unlabel(nodewatch.LabelExclude) }},
		{nodewatch.ReasonDeleted, (*nodewatchtest.Server).Delete, (*nodewatchtest.Server).Register},
		{nodewatch.ReasonShutdown, func(s *nodewatchtest.Server) { s.Ready("False", "KubeletNotReady", "node is shutting down") },
			func(s *nodewatchtest.Server) { s.Ready("True", "KubeletReady", "kubelet is posting ready status") }},
		{nodewatch.ReasonOutOfService, func(s *nodewatchtest.Server) { s.Taint(nodewatch.TaintOutOfService) },
			func(s *nodewatchtest.Server) { s.Taint() }},
	}
	for _, st := range steps {
		owner := c.waitHolders(10*time.Second, exactlyOne, "before "+st.reason)[0]
		claims := c.w.claimCount()
		released := func(next string) int {
			return c.log.count("node="+owner, "released VIP", "successor "+next+" holds it")
		}
		before := map[string]int{}
		for _, n := range []string{"a", "b", "c"} {
			before[n] = released(n)
		}
		st.do(apis[owner])
		c.waitNodeReasons(owner, st.reason)
		next := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, st.reason+": the VIP off "+owner)[0]
		// Make-before-break: the owner released only once the successor
		// held it (its release names the successor). The line may follow
		// the address's removal by a few milliseconds.
		deadline := time.Now().Add(5 * time.Second)
		for released(next) == before[next] && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if released(next) == before[next] {
			t.Errorf("%s: %s did not hand the VIP to %s make-before-break", st.reason, owner, next)
		}
		if got := c.w.claimsSince(claims); !slices.Equal(got, []string{next}) {
			t.Errorf("%s: claims %v, want only %s's", st.reason, got, next)
		}
		for _, n := range []string{"a", "b", "c"} {
			c.waitStatus(n, func(s *apipb.StatusResponse) bool {
				for _, m := range s.Members {
					if m.Name == owner {
						return m.NodeWithdrawn && !m.Withdrawn && !eligibleIn(s, owner)
					}
				}
				return false
			}, owner+" withdrawn by its Node, not by the operator")
		}
		if _, err := os.Stat(filepath.Join(c.nodes[owner].cfg.StateDir, withdrawFile)); !os.IsNotExist(err) {
			t.Errorf("%s: the Node's withdraw was persisted (%v)", st.reason, err)
		}
		st.undo(apis[owner])
		c.waitNodeReasons(owner)
		c.waitStatus(next, func(s *apipb.StatusResponse) bool { return eligibleIn(s, owner) }, owner+" eligible again")
		if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != next {
			t.Errorf("%s undone: holders %v, want %s to keep it", st.reason, h, next)
		}
	}
	if n := c.log.count("the Node withdraws this node"); n != len(steps) {
		t.Errorf("%d log lines of the Node's withdraw, want %d", n, len(steps))
	}
	ev := 0
	for _, n := range []string{"a", "b", "c"} {
		events, err := c.client(n).Events(t.Context(), &apipb.EventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			e, err := events.Recv()
			if err != nil {
				break
			}
			if e.Kind == "node" && strings.HasPrefix(e.Message, "withdrawn by its Node: ") {
				ev++
			}
		}
	}
	if ev != len(steps) {
		t.Errorf("%d node events of a withdraw, want %d", ev, len(steps))
	}
}

// TestNodeWithdrawApartFromOperators: the operator's withdraw and the
// Node's are apart. A vipctl withdraw survives an uncordon (only vipctl
// restore clears it), and vipctl restore does not clear the Node's
// withdraw (only the Node does).
func TestNodeWithdrawApartFromOperators(t *testing.T) {
	c, apis := kubeCluster(t, "a", "b", "c")
	owner := c.startSteady()
	if _, err := c.client(owner).Withdraw(t.Context(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 10000}); err != nil {
		t.Fatalf("withdraw %s: %v", owner, err)
	}
	apis[owner].Cordon(true)
	c.waitNodeReasons(owner, nodewatch.ReasonCordoned)
	apis[owner].Cordon(false)
	c.waitNodeReasons(owner)
	st, err := c.client(owner).Status(t.Context(), &apipb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Withdrawn || eligibleIn(st, owner) {
		t.Errorf("after cordon and uncordon: withdrawn %v, eligible %v; want the operator's withdraw to stay", st.Withdrawn, eligibleIn(st, owner))
	}

	// The other way round: cordoned, then restored by the operator.
	apis[owner].Cordon(true)
	c.waitNodeReasons(owner, nodewatch.ReasonCordoned)
	if _, err := c.client(owner).Restore(t.Context(), &apipb.RestoreRequest{}); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(owner, func(s *apipb.StatusResponse) bool {
		return !s.Withdrawn && !eligibleIn(s, owner) && slices.Equal(s.NodeWithdrawReasons, []string{nodewatch.ReasonCordoned})
	}, "restored by the operator, still withdrawn by its Node")
	apis[owner].Cordon(false)
	c.waitStatus(owner, func(s *apipb.StatusResponse) bool { return eligibleIn(s, owner) }, "eligible once uncordoned")
}

// TestNodeAllCordoned: every node cordoned (a careless script, a
// cluster-wide maintenance): the VIP stays where it is, never without a
// holder, and the holder says why in its status and once in its log. The
// others are cordoned first, the holder last: cordons that reach the
// nodes within the same few milliseconds may legitimately move the VIP
// on the way (the holder's cordon arrives first, it hands off to a node
// whose own cordon is still in flight), and such crossing handoffs can
// leave it without a holder for a moment (docs/design.md, "Crossing
// handoffs"), which this test does not cover.
func TestNodeAllCordoned(t *testing.T) {
	c, apis := kubeCluster(t, "a", "b", "c")
	owner := c.startSteady()
	claims := c.w.claimCount()
	for n, api := range apis {
		if n != owner {
			api.Cordon(true)
		}
	}
	for n := range apis {
		if n != owner {
			c.waitNodeReasons(n, nodewatch.ReasonCordoned)
		}
	}
	apis[owner].Cordon(true)
	c.waitNodeReasons(owner, nodewatch.ReasonCordoned)
	c.waitStatus(owner, func(s *apipb.StatusResponse) bool {
		return len(s.Warnings) == 1 && strings.Contains(s.Warnings[0], "no other node can take the VIP")
	}, "the warning")
	c.keeps(owner, claims, time.Second, "every node cordoned")
	if n := c.log.count("node="+owner, "level=WARN", "no other node can take over"); n != 1 {
		t.Errorf("%d warnings in the log, want 1", n)
	}
	// One node uncordoned: it takes the VIP, and the warning ends.
	var other string
	for n := range apis {
		if n != owner {
			other = n
			break
		}
	}
	apis[other].Cordon(false)
	c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == other }, "the uncordoned node takes the VIP")
	c.waitStatus(owner, func(s *apipb.StatusResponse) bool { return len(s.Warnings) == 0 }, "no warning")
}

// TestNodeAPIDownChangesNothing: fail-static. Every apiserver stopped: no
// VIP moves, the Node's last verdict stays (a cordoned node stays
// withdrawn), status says the API is not readable; started again, the
// watches read the Node again and a change is followed.
func TestNodeAPIDownChangesNothing(t *testing.T) {
	c, apis := kubeCluster(t, "a", "b", "c")
	owner := c.startSteady()
	var cordoned string
	for n := range apis {
		if n != owner {
			cordoned = n
			break
		}
	}
	apis[cordoned].Cordon(true)
	c.waitNodeReasons(cordoned, nodewatch.ReasonCordoned)
	claims := c.w.claimCount()
	for _, api := range apis {
		api.Stop()
	}
	for n := range apis {
		c.waitStatus(n, func(s *apipb.StatusResponse) bool {
			return s.Kubernetes != nil && !s.Kubernetes.Reachable && s.Kubernetes.Error != ""
		}, "the API not readable")
	}
	c.keeps(owner, claims, 1500*time.Millisecond, "apiservers down")
	st, err := c.client(cordoned).Status(t.Context(), &apipb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.NodeWithdrawReasons, []string{nodewatch.ReasonCordoned}) {
		t.Errorf("cordoned node's reasons while the API is down: %v, want the last verdict kept", st.NodeWithdrawReasons)
	}
	for _, api := range apis {
		if err := api.Start(); err != nil {
			t.Fatal(err)
		}
	}
	c.waitNodeReasons(cordoned, nodewatch.ReasonCordoned)
	apis[owner].Cordon(true)
	c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner && h[0] != cordoned }, "the VIP on the one node not cordoned")
}

// TestNodeWatchReload: a reload that changes [kubernetes] restarts the
// watch and keeps the Node's verdict until the new watch reads the Node;
// one that turns it off ends the Node's withdraw.
func TestNodeWatchReload(t *testing.T) {
	c, apis := kubeCluster(t, "a", "b")
	owner := c.startSteady()
	apis[owner].Cordon(true)
	c.waitNodeReasons(owner, nodewatch.ReasonCordoned)
	path := c.nodes[owner].cfg.Path
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "enabled = true\n", "enabled = true\ntls_server_name = \"kubernetes\"\n", 1)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes[owner].agent.Reload()
	c.waitStatus(owner, func(*apipb.StatusResponse) bool {
		return c.log.count("node="+owner, "node watch restarted by reload") == 1
	}, "the watch restarted")
	c.waitNodeReasons(owner, nodewatch.ReasonCordoned)
	if n := c.log.count("node="+owner, "eligible again"); n != 0 {
		t.Errorf("the restart dropped the Node's withdraw: %d lines", n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(text, "enabled = true", "enabled = false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes[owner].agent.Reload()
	c.waitStatus(owner, func(s *apipb.StatusResponse) bool {
		return s.Kubernetes != nil && !s.Kubernetes.Enabled && len(s.NodeWithdrawReasons) == 0 && eligibleIn(s, owner)
	}, "the watch off, the Node's withdraw ended")
}

// TestNodeWithdrawIsPlanned: a withdraw by the Node is a planned departure,
// as vipctl withdraw is: a held BGP VIP is first announced with
// GRACEFUL_SHUTDOWN, then handed off.
func TestNodeWithdrawIsPlanned(t *testing.T) {
	cfg, err := config.Parse("p.toml", []byte(`node_name = "a"
[cluster]
bind_address = "192.0.2.11"
[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
[[vip]]
name = "api"
address = "203.0.113.10"
mode = "bgp"
`))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{now: time.Now, self: "a", st: loopState{cfg: cfg}}
	v := &vipState{cfg: cfg.VIPs[0], ann: &fakeAnnouncer{w: newWire(), node: "a"}, held: true}
	res := Result{Owner: "b", Eligible: []string{"b"}}
	view := peersOf([]Member{node("a", holds, cordoned), node("b")}, "api", nil)
	if in := a.decideInput(v, res, view, lease.Quorum{OK: true}); in.Planned {
		t.Fatalf("planned without a withdraw: %+v", in)
	}
	a.st.node.reasons = []string{nodewatch.ReasonCordoned}
	in := a.decideInput(v, res, view, lease.Quorum{OK: true})
	if !in.Planned || in.Drain != cfg.BGP.GracefulShutdownDuration() {
		t.Fatalf("withdrawn by its Node: planned %v, drain %v; want planned with the graceful shutdown", in.Planned, in.Drain)
	}
	if d := lifecycle.Decide(in); d.Do != lifecycle.Drain {
		t.Errorf("decide: %v, want the graceful-shutdown announcement first", d.Do)
	}
}
