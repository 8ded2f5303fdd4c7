package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/nodewatch"
	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// shapedCluster is a test cluster whose nodes each follow their own Node,
// served by a fake apiserver of their own, with the Node and the kubelet's
// kubeconfig shaped as the distribution shape makes them (its labels,
// annotations and taints; its kubeconfig layout and files), registered
// and schedulable.
func shapedCluster(t *testing.T, shape nodewatchtest.Shape, names ...string) (*testCluster, map[string]*nodewatchtest.Server) {
	t.Helper()
	c := newTestCluster(t, names...)
	c.tail = map[string]string{}
	apis := map[string]*nodewatchtest.Server{}
	for _, n := range names {
		dir := filepath.Join(c.dir, n, "kube")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		pki, err := nodewatchtest.NewPKI(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		api, err := nodewatchtest.NewServer(pki, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(api.Stop)
		api.Register()
		api.Shape(shape)
		own := shape
		own.NodeName = n
		kc, err := own.Install(filepath.Join(dir, "root"), pki, api.URL())
		if err != nil {
			t.Fatal(err)
		}
		apis[n] = api
		c.tail[n] = fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\n", kc)
		c.nodes[n].cfg = c.config(n, "")
	}
	c.beforeRun = func(_ string, a *Agent) { a.opts.NodeWatch = fastNodeWatch }
	return c, apis
}

// TestNodeAtRestOnEveryShape: a healthy cluster at rest, its Nodes as each
// distribution makes them (kubeadm's and Talos's with the
// exclude-from-external-load-balancers label and the control-plane taint
// on every node): no node is withdrawn by its Node, every node is
// eligible, the VIP stays put, and nothing warns: no status warning, no
// "kept eligible" log line, no vipd_node_withdrawn series at 1 (what the
// VipdNodeWithdrawnHolding alert needs).
func TestNodeAtRestOnEveryShape(t *testing.T) {
	for _, shape := range nodewatchtest.Shapes() {
		t.Run(shape.Name, func(t *testing.T) {
			names := []string{"a", "b", "c"}
			c, _ := shapedCluster(t, shape, names...)
			owner := c.startSteady()
			for _, n := range names {
				c.waitNodeReasons(n)
			}
			claims := c.w.claimCount()
			c.keeps(owner, claims, time.Second, shape.Name+" cluster at rest")
			for _, n := range names {
				st, err := c.client(n).Status(t.Context(), &apipb.StatusRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Warnings) != 0 || len(st.NodeWithdrawReasons) != 0 || st.Kubernetes == nil || !st.Kubernetes.Registered {
					t.Errorf("%s: warnings %q, Node's reasons %v, kubernetes %v", n, st.Warnings, st.NodeWithdrawReasons, st.Kubernetes)
				}
				for _, m := range st.Members {
					if m.NodeWithdrawn || !eligibleIn(st, m.Name) {
						t.Errorf("%s sees %s withdrawn by its Node %v, eligible %v", n, m.Name, m.NodeWithdrawn, eligibleIn(st, m.Name))
					}
				}
				for _, r := range nodewatch.Reasons() {
					if v := testutil.ToFloat64(c.nodes[n].agent.metrics.nodeWithdrawn.WithLabelValues(r)); v != 0 {
						t.Errorf("%s: vipd_node_withdrawn{reason=%q} = %v", n, r, v)
					}
				}
			}
			for _, line := range []string{"no other node can take over", "the Node withdraws this node", "kept eligible"} {
				if n := c.log.count(line); n != 0 {
					t.Errorf("%d log lines %q", n, line)
				}
			}
		})
	}
}

// TestNodeJoinKubeadm: a node joins as `kubeadm join --control-plane`
// makes it: vipd runs before the kubelet registered the Node, the Node
// appears unlabelled, then kubeadm's mark-control-plane phase labels and
// taints it. The VIP moves 0 times, and the new node ends eligible like
// the others.
func TestNodeJoinKubeadm(t *testing.T) {
	kubeadm := nodewatchtest.ShapeNamed("kubeadm")
	c, apis := shapedCluster(t, kubeadm, "a", "b", "c")
	apis["c"].Delete() // the joining node's kubelet has not registered its Node yet
	c.start("a")
	c.start("b")
	c.waitMember("a", "b", StateAlive)
	c.waitMember("b", "a", StateAlive)
	owner := c.waitHolders(10*time.Second, exactlyOne, "a and b steady")[0]
	for _, n := range []string{"a", "b"} {
		c.waitStatus(n, func(s *apipb.StatusResponse) bool {
			return s.Kubernetes != nil && s.Kubernetes.Reachable && s.Kubernetes.Registered
		}, "its kubeadm-shaped Node read")
	}
	claims := c.w.claimCount()

	c.start("c")
	for _, n := range []string{"a", "b"} {
		c.waitMember(n, "c", StateAlive)
	}
	c.waitStatus("c", func(s *apipb.StatusResponse) bool {
		return s.Kubernetes != nil && s.Kubernetes.Reachable && !s.Kubernetes.Registered
	}, "its Node not registered yet")
	c.keeps(owner, claims, time.Second, "c joined, its Node not registered")

	apis["c"].Register() // the kubelet registers the Node: no role label, no taint
	c.waitStatus("c", func(s *apipb.StatusResponse) bool {
		return s.Kubernetes != nil && s.Kubernetes.Registered && len(s.NodeWithdrawReasons) == 0
	}, "its Node registered")
	c.keeps(owner, claims, time.Second, "c's Node registered, unlabelled")

	apis["c"].Shape(kubeadm) // [mark-control-plane]: labels and taint
	c.keeps(owner, claims, 1500*time.Millisecond, "c's Node labelled and tainted by kubeadm")
	if got := c.w.claimsSince(claims); len(got) != 0 {
		t.Errorf("the VIP moved during the join: claims %v", got)
	}
	for _, n := range []string{"a", "b", "c"} {
		c.waitStatus(n, func(s *apipb.StatusResponse) bool {
			return slices.ContainsFunc(s.Members, func(m *apipb.MemberStatus) bool { return m.Name == "c" }) && eligibleIn(s, "c") && len(s.Warnings) == 0
		}, "c eligible, no warning")
	}
}

// TestNodeWatchOffByDefault: without a [kubernetes] section no Node watch
// runs (no kubeconfig is looked for, nothing is logged about one), and
// status says the watch is off (vipctl turns that into how to turn it on).
func TestNodeWatchOffByDefault(t *testing.T) {
	c := newTestCluster(t, "a")
	c.start("a")
	c.waitHolders(10*time.Second, exactlyOne, "a alone")
	c.waitStatus("a", func(s *apipb.StatusResponse) bool {
		return s.Kubernetes != nil && !s.Kubernetes.Enabled && len(s.NodeWithdrawReasons) == 0
	}, "the watch off")
	if w := c.nodes["a"].agent.st.node.watcher; w != nil {
		t.Error("a Node watch runs")
	}
	if n := c.log.count("kube"); n != 0 {
		t.Errorf("%d log lines about the Node watch", n)
	}
}
