package k8slab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vipd/vipd/lab/netlab"
	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// nodeManifest is a Node object for each of the lab's nodes (the lab runs
// no kubelet: the admin creates them) as kubeadm makes it once `kubeadm
// init` or `kubeadm join --control-plane` is done: the labels,
// annotations and taints of nodewatchtest's kubeadm shape
// (node-role.kubernetes.io/control-plane="",
// node.kubernetes.io/exclude-from-external-load-balancers="", the taint
// node-role.kubernetes.io/control-plane:NoSchedule), its own hostname.
func nodeManifest(names ...string) string {
	return shapedManifest(nodewatchtest.ShapeNamed("kubeadm"), names...)
}

// registeredManifest is a Node as the kubelet registers it, before
// kubeadm's mark-control-plane phase labels and taints it: the hostname
// label only.
func registeredManifest(name string) string {
	return fmt.Sprintf("---\napiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n  labels:\n    kubernetes.io/hostname: %s\n", name, name)
}

// shapedManifest is a Node for each name, labelled, annotated and tainted
// as shape.
func shapedManifest(shape nodewatchtest.Shape, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		labels := shape.Labels()
		labels["kubernetes.io/hostname"] = n
		obj := map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": n, "labels": labels, "annotations": shape.Annotations()},
			"spec":     map[string]any{"taints": shape.Taints()}}
		y, err := yaml.Marshal(obj)
		if err != nil {
			panic(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}

// nodeWatchLab is the real control plane with vipd following each node's
// Node through the VIP with the node's own credentials (system:node:NAME,
// as a kubelet's kubeconfig gives them; the last node a least-privilege
// identity of its own), and the Node objects created as kubeadm leaves
// them.
type nodeWatchLab struct {
	t  *testing.T
	l  *netlab.Lab
	cp *ControlPlane
	a  *VipdAgent
}

func startNodeWatchLab(t *testing.T) *nodeWatchLab {
	l := netlab.New(t, netlab.Options{})
	cp := Start(t, l)
	nl := &nodeWatchLab{t: t, l: l, cp: cp}
	var names []string
	for _, n := range l.Nodes {
		names = append(names, n.Name)
	}
	nl.applyNodes(names...)
	// The last node reads its Node with the least-privilege identity of
	// docs/drain.md ("Turning the Node watch on"): a user vipd:NAME that a
	// ClusterRole lets get, list and watch that one Node (resourceNames:
	// the watch's field selector on the name is what lets list and watch
	// through). The others use their kubelet's credentials.
	lp := l.Nodes[len(l.Nodes)-1]
	nl.kubectl("create", "clusterrole", "vipd-node-"+lp.Name, "--verb=get,list,watch", "--resource=nodes", "--resource-name="+lp.Name)
	nl.kubectl("create", "clusterrolebinding", "vipd-node-"+lp.Name, "--clusterrole=vipd-node-"+lp.Name, "--user=vipd:"+lp.Name)
	server := fmt.Sprintf("https://%s", netip.AddrPortFrom(cp.VIP, APIServerPort))
	kubeconfigs := map[string]string{}
	for _, n := range l.Nodes {
		pairName, id := "node-"+n.Name, NodeIdentity(n.Name)
		if n == lp {
			pairName, id = "vipd-"+n.Name, Identity{User: "vipd:" + n.Name}
		}
		pair, err := cp.PKI.ClientPair(pairName, id)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(n.Dir, "kubelet.conf")
		if err := os.WriteFile(path, []byte(Kubeconfig(server, cp.PKI.CACert, pair)), 0o600); err != nil {
			t.Fatal(err)
		}
		kubeconfigs[n.Name] = path
	}
	// No health check: what moves the VIP here is the Node watch alone
	// (stopping every apiserver fails every health check, and a check
	// that fails on one node a beat before the others moves the VIP: the
	// health check's part, TestSlowControlPlane's).
	nl.a = cp.NewVipd(netlab.VipdOptions{VIPs: []netlab.VIP{{Name: "apiserver", Address: cp.VIP}}, RejoinInterval: "5s", LogLevel: "info",
		HostExtra: func(h *netlab.Host) string {
			return fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q", kubeconfigs[h.Name])
		}})
	if err := nl.a.StartAll(); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes {
		nl.waitStatus(n, "the Node read", func(s netlab.Status) bool {
			return s.Kubernetes != nil && s.Kubernetes.Reachable && s.Kubernetes.Registered && s.Kubernetes.Node == n.Name
		})
	}
	return nl
}

// applyNodes creates (or re-creates) the Node objects, as kubeadm leaves
// them.
func (nl *nodeWatchLab) applyNodes(names ...string) { nl.apply(nodeManifest(names...)) }

// apply runs kubectl apply on a manifest.
func (nl *nodeWatchLab) apply(manifest string) {
	nl.t.Helper()
	path := filepath.Join(nl.l.Dir, "nodes.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		nl.t.Fatal(err)
	}
	nl.kubectl("apply", "-f", path)
}

// kubectl runs the real kubectl as the admin, through the VIP when it has
// a holder (node 1's address otherwise).
func (nl *nodeWatchLab) kubectl(args ...string) string {
	nl.t.Helper()
	out, err := nl.cp.Kubectl(args...)
	if err != nil {
		if out, err = nl.cp.KubectlVia(nl.l.Nodes[0], args...); err != nil {
			nl.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	nl.t.Logf("kubectl %s: %s", strings.Join(args, " "), strings.TrimSpace(out))
	return out
}

// waitStatus waits (one minute at most) until h's vipd status satisfies ok.
func (nl *nodeWatchLab) waitStatus(h *netlab.Host, what string, ok func(netlab.Status) bool) netlab.Status {
	nl.t.Helper()
	var last netlab.Status
	var lastErr error
	done, _ := netlab.Eventually(time.Minute, 100*time.Millisecond, func() (bool, string) {
		last, lastErr = nl.l.Status(h)
		return lastErr == nil && ok(last), ""
	})
	if !done {
		nl.t.Fatalf("%s: %s not seen within a minute; last status %+v (%v)", h.Name, what, last, lastErr)
	}
	return last
}

// eligible reports whether node is eligible for the lab's VIP in s.
func eligible(s netlab.Status, node string) bool {
	v, ok := s.VIP("apiserver")
	if !ok {
		return false
	}
	for _, e := range v.Eligibility {
		if e.Node == node {
			return e.Eligible
		}
	}
	return false
}

// move runs act on the holder with the clients running through the VIP,
// and checks that the VIP went to another node, never without a holder;
// it returns the old and the new holder, and what the clients saw.
func (nl *nodeWatchLab) move(what string, act func(holder *netlab.Host)) (from, to *netlab.Host, st ClientStats, moved time.Duration) {
	nl.t.Helper()
	holder, err := nl.cp.WaitSteady(nl.a, steadyTimeout)
	if err != nil {
		nl.t.Fatal(err)
	}
	cl, err := nl.cp.StartClients()
	if err != nil {
		nl.t.Fatal(err)
	}
	defer cl.Kill()
	if err := cl.WaitLive(liveTimeout); err != nil {
		nl.t.Fatal(err)
	}
	rec := nl.l.RecordHolders(nl.cp.VIP, 20*time.Millisecond, 10*time.Minute)
	defer rec.Stop()
	ev := time.Now()
	act(holder)
	newHolder, err := nl.l.WaitMoved(nl.a.Options.VIPs[0], holder.Name, time.Minute)
	if err != nil {
		nl.t.Fatalf("%s on %s: %v", what, holder.Name, err)
	}
	moved = time.Since(ev)
	backErr := waitBack(cl, ev)
	r, stopErr := cl.Stop()
	samples, _ := rec.Stop()
	if backErr != nil || stopErr != nil {
		nl.t.Fatalf("%s: clients: %v %v", what, backErr, stopErr)
	}
	st = r.Stats(ev, time.Time{})
	none := samples.Count(0)
	nl.t.Logf("%s on %s: the VIP on %s after %v; clients: %d requests, %d failed, longest %v, watch stall %v, all back after %v, %d relists; %d holder samples without a holder (first error %q)",
		what, holder.Name, newHolder, moved.Round(time.Millisecond), st.Requests, st.Failed, st.LongestRequest, st.Stall, st.Back, st.Relists, none, st.FirstError)
	if none != 0 {
		nl.t.Errorf("%s: %d samples without a holder: the handoff broke before it made", what, none)
	}
	if none != 0 || st.Failed != 0 || moved > netlab.Scaled(2*time.Second) {
		// What the old and the new holder's vipd said, for the reader.
		for _, h := range []*netlab.Host{holder, nl.l.Node(newHolder)} {
			log, _ := h.VipdLog()
			lines := strings.Split(strings.TrimSpace(log), "\n")
			nl.t.Logf("%s's vipd log, last lines:\n%s", h.Name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
	}
	return holder, nl.l.Node(newHolder), st, moved
}

// TestNodeWatchRealAPIServer: vipd follows its Node on a real kube-apiserver
// (v1.37.2, the Node authorizer), through the VIP, with the node's own
// credentials, the Nodes labelled and tainted as kubeadm makes them. At
// rest no node is withdrawn and nothing warns. A node that joins as
// kubeadm join does (vipd first, its Node registered unlabelled, then
// labelled and tainted) moves the VIP 0 times. kubectl cordon on the
// owner's Node moves the VIP within 2 s, never without a holder, with no
// failed client request (checkPlanned) and no watch stalled more than
// plannedStall, as the planned handoff of vipctl withdraw --wait (measured
// first, as the reference) does, and uncordon makes the node eligible
// again; a real kubectl drain does the same; vipd's label vipd.io/exclude
// and deleting the Node each withdraw; a vipctl withdraw survives an
// uncordon; every apiserver stopped for 30 s moves nothing; every node
// cordoned keeps the VIP, with the warning in status and once in the log.
func TestNodeWatchRealAPIServer(t *testing.T) {
	nl := startNodeWatchLab(t)
	l, cp := nl.l, nl.cp

	// At rest, kubeadm-shaped: nobody withdrawn, no warning.
	for _, n := range l.Nodes {
		st := nl.waitStatus(n, "at rest", func(s netlab.Status) bool {
			return len(s.NodeWithdrawReasons) == 0 && len(s.Warnings) == 0 && eligible(s, n.Name)
		})
		for _, m := range l.Nodes {
			if !eligible(st, m.Name) {
				t.Errorf("at rest: %s sees %s not eligible", n.Name, m.Name)
			}
		}
	}

	// kubeadm join: a node's vipd runs before its kubelet registered the
	// Node; the Node appears unlabelled, then kubeadm's mark-control-plane
	// phase labels and taints it. The VIP does not move.
	holder, err := cp.WaitSteady(nl.a, steadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var joiner *netlab.Host
	for _, n := range l.Nodes {
		if n != holder {
			joiner = n
			break
		}
	}
	rec := l.RecordHolders(cp.VIP, 20*time.Millisecond, 5*time.Minute)
	if err := nl.a.Stop(joiner); err != nil {
		t.Fatal(err)
	}
	nl.kubectl("delete", "node", joiner.Name)
	if err := nl.a.Start(joiner); err != nil {
		t.Fatal(err)
	}
	nl.waitStatus(joiner, "its Node not registered yet", func(s netlab.Status) bool {
		return s.Kubernetes != nil && s.Kubernetes.Reachable && !s.Kubernetes.Registered
	})
	nl.waitStatus(holder, joiner.Name+" back", func(s netlab.Status) bool { return eligible(s, joiner.Name) })
	time.Sleep(2 * time.Second)
	nl.apply(registeredManifest(joiner.Name))
	nl.waitStatus(joiner, "its Node registered", func(s netlab.Status) bool {
		return s.Kubernetes != nil && s.Kubernetes.Registered
	})
	time.Sleep(2 * time.Second)
	nl.kubectl("label", "node", joiner.Name, "node-role.kubernetes.io/control-plane=", "node.kubernetes.io/exclude-from-external-load-balancers=")
	nl.kubectl("taint", "node", joiner.Name, "node-role.kubernetes.io/control-plane:NoSchedule")
	time.Sleep(3 * time.Second)
	samples, _ := rec.Stop()
	t.Logf("kubeadm join of %s: %d moves, %d samples without a holder; %v", joiner.Name, Moves(samples), samples.Count(0), samples.Transitions())
	if Moves(samples) != 0 || samples.Count(0) != 0 {
		t.Errorf("kubeadm join of %s: %d moves, %d samples without a holder; want the VIP to stay on %s", joiner.Name, Moves(samples), samples.Count(0), holder.Name)
	}
	for _, n := range l.Nodes {
		nl.waitStatus(n, "after the join: "+joiner.Name+" eligible, no warning", func(s netlab.Status) bool {
			return eligible(s, joiner.Name) && len(s.Warnings) == 0 && len(s.NodeWithdrawReasons) == 0
		})
	}

	// The reference: the planned handoff of vipctl withdraw --wait. The
	// Node's withdraws are the same handoff; the issue wants 0 failed
	// client requests of both (the old holder closes its connections
	// once the successor holds the VIP: TestClientsThroughFailovers).
	_, _, ref, _ := nl.move("vipctl withdraw --wait", func(h *netlab.Host) {
		if out, err := l.Vipctl(h, "withdraw", "--wait", "--timeout", "30s"); err != nil {
			t.Fatalf("vipctl withdraw on %s: %v %s", h.Name, err, out)
		}
		defer func() {
			if out, err := l.Vipctl(h, "restore"); err != nil {
				t.Errorf("vipctl restore on %s: %v %s", h.Name, err, out)
			}
		}()
	})
	if msg := checkPlanned(ref); msg != "" {
		t.Errorf("vipctl withdraw --wait: %s", msg)
	}

	// The Node's withdraws, each undone.
	for _, step := range []struct {
		what, reason string
		do, undo     func(h *netlab.Host)
	}{
		{"kubectl cordon", "node cordoned",
			func(h *netlab.Host) { nl.kubectl("cordon", h.Name) }, func(h *netlab.Host) { nl.kubectl("uncordon", h.Name) }},
		{"kubectl drain", "node cordoned",
			func(h *netlab.Host) {
				nl.kubectl("drain", h.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout", "60s")
			}, func(h *netlab.Host) { nl.kubectl("uncordon", h.Name) }},
		{"vipd.io/exclude label", "node labelled vipd.io/exclude",
			func(h *netlab.Host) { nl.kubectl("label", "node", h.Name, "vipd.io/exclude=") },
			func(h *netlab.Host) { nl.kubectl("label", "node", h.Name, "vipd.io/exclude-") }},
		{"kubectl delete node", "node deleted",
			func(h *netlab.Host) { nl.kubectl("delete", "node", h.Name, "--wait=false") }, func(h *netlab.Host) { nl.applyNodes(h.Name) }},
	} {
		from, to, cs, moved := nl.move(step.what, step.do)
		if msg := checkPlanned(cs); msg != "" {
			t.Errorf("%s: %s (vipctl withdraw --wait: %d failed)", step.what, msg, ref.Failed)
		}
		if step.what == "kubectl cordon" {
			if moved > netlab.Scaled(2*time.Second) {
				t.Errorf("kubectl cordon: the VIP moved after %v, want within %v", moved.Round(time.Millisecond), netlab.Scaled(2*time.Second))
			}
			if cs.Stall > netlab.Scaled(plannedStall) {
				t.Errorf("kubectl cordon: a watch (%s) stalled %v, want at most %v", cs.StallWatch, cs.Stall, netlab.Scaled(plannedStall))
			}
		}
		st := nl.waitStatus(from, step.reason, func(s netlab.Status) bool { return slices.Contains(s.NodeWithdrawReasons, step.reason) })
		if st.Withdrawn {
			t.Errorf("%s: %s shows the operator's withdraw flag", step.what, from.Name)
		}
		step.undo(from)
		nl.waitStatus(to, step.what+" undone: "+from.Name+" eligible again", func(s netlab.Status) bool { return eligible(s, from.Name) })
		if hs, _ := l.AddrHolders(cp.VIP); len(hs) != 1 || hs[0] != to.Name {
			t.Errorf("%s undone: holders %v, want %s to keep the VIP", step.what, hs, to.Name)
		}
	}

	// A manual withdraw survives an uncordon.
	holder, err = cp.WaitSteady(nl.a, steadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := l.Vipctl(holder, "withdraw", "--wait", "--timeout", "30s"); err != nil {
		t.Fatalf("vipctl withdraw on %s: %v %s", holder.Name, err, out)
	}
	nl.kubectl("cordon", holder.Name)
	nl.waitStatus(holder, "cordoned", func(s netlab.Status) bool { return slices.Contains(s.NodeWithdrawReasons, "node cordoned") })
	nl.kubectl("uncordon", holder.Name)
	st := nl.waitStatus(holder, "uncordoned", func(s netlab.Status) bool { return len(s.NodeWithdrawReasons) == 0 })
	time.Sleep(2 * time.Second)
	if st, err = l.Status(holder); err != nil || !st.Withdrawn || eligible(st, holder.Name) {
		t.Errorf("after uncordon: %s withdrawn %v eligible %v (%v); want vipctl's withdraw to stay", holder.Name, st.Withdrawn, eligible(st, holder.Name), err)
	}
	if out, err := l.Vipctl(holder, "restore"); err != nil {
		t.Fatalf("vipctl restore: %v %s", err, out)
	}
	nl.waitStatus(holder, "restored", func(s netlab.Status) bool { return eligible(s, holder.Name) })

	// Every apiserver stopped for 30 s: nothing moves.
	holder, err = cp.WaitSteady(nl.a, steadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	rec = l.RecordHolders(cp.VIP, 20*time.Millisecond, 5*time.Minute)
	for _, n := range l.Nodes {
		if err := cp.Signal(n, syscall.SIGSTOP, false, true); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(30 * time.Second)
	// A stopped apiserver is found out when a request times out or the
	// HTTP/2 ping goes unanswered (up to 45 s on a quiet watch): what the
	// watches knew at the end of the 30 s, for the log.
	for _, n := range l.Nodes {
		if s, err := l.Status(n); err == nil && s.Kubernetes != nil {
			t.Logf("after 30 s: %s's node watch reachable %v %q, the Node's reasons %v", n.Name, s.Kubernetes.Reachable, s.Kubernetes.Error, s.NodeWithdrawReasons)
		}
	}
	for _, n := range l.Nodes {
		if err := cp.Signal(n, syscall.SIGCONT, false, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.WaitAllReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes {
		nl.waitStatus(n, "the API readable again", func(s netlab.Status) bool { return s.Kubernetes != nil && s.Kubernetes.Reachable })
	}
	samples, _ = rec.Stop()
	t.Logf("apiservers stopped 30 s: %d moves, %d samples without a holder; %v", Moves(samples), samples.Count(0), samples.Transitions())
	if Moves(samples) != 0 || samples.Count(0) != 0 {
		t.Errorf("apiservers stopped: %d moves, %d samples without a holder; want the VIP to stay on %s", Moves(samples), samples.Count(0), holder.Name)
	}

	// Every node cordoned: the VIP stays, with the warning.
	holder, err = cp.WaitSteady(nl.a, steadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	rec = l.RecordHolders(cp.VIP, 20*time.Millisecond, 5*time.Minute)
	var names []string
	for _, n := range l.Nodes {
		names = append(names, n.Name)
	}
	nl.kubectl(append([]string{"cordon"}, names...)...)
	st = nl.waitStatus(holder, "the warning", func(s netlab.Status) bool {
		return len(s.Warnings) == 1 && strings.Contains(s.Warnings[0], "no other node can take the VIP")
	})
	t.Logf("every node cordoned: %s says %q", holder.Name, st.Warnings[0])
	time.Sleep(5 * time.Second)
	samples, _ = rec.Stop()
	if Moves(samples) != 0 || samples.Count(0) != 0 {
		t.Errorf("every node cordoned: %d moves, %d samples without a holder; want the VIP to stay on %s", Moves(samples), samples.Count(0), holder.Name)
	}
	log, err := holder.VipdLog()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(netlab.LogLines(log, "no other node can take over")); n != 1 {
		t.Errorf("%d warnings in %s's log, want 1", n, holder.Name)
	}
	nl.kubectl(append([]string{"uncordon"}, names...)...)
	nl.waitStatus(holder, "no warning", func(s netlab.Status) bool { return len(s.Warnings) == 0 })
}
