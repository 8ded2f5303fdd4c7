package nodewatch

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// TestShapesKubeconfig: each distribution's kubelet kubeconfig, as the
// distribution writes it and where (nodewatchtest/shapes: kubeadm's
// /etc/kubernetes/kubelet.conf, RKE2's and k3s's kubelet.kubeconfig,
// Talos's kubeconfig-kubelet), is among the files looked for by default,
// is found there, loads, and names its node through the client
// certificate (system:node:NAME).
func TestShapesKubeconfig(t *testing.T) {
	for _, s := range nodewatchtest.Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			if !slices.Contains(DefaultKubeconfigs(), s.KubeconfigPath) {
				t.Errorf("%s is not among the kubeconfigs looked for by default: %v", s.KubeconfigPath, DefaultKubeconfigs())
			}
			root := t.TempDir()
			pki := newPKI(t, s.NodeName)
			path, err := s.Install(root, pki, "")
			if err != nil {
				t.Fatal(err)
			}
			var under []string
			for _, p := range DefaultKubeconfigs() {
				under = append(under, root+p)
			}
			if got := FindKubeconfig(under); got != path {
				t.Errorf("found %q, want %q", got, path)
			}
			k, err := LoadKubeconfig(path)
			if err != nil {
				t.Fatal(err)
			}
			if k.Server == "" || len(k.CA) == 0 || k.CertFile == "" || k.KeyFile == "" || !filepath.IsAbs(k.CertFile) {
				t.Errorf("kubeconfig %+v", k)
			}
			certs := newCertLoader(k)
			if _, err := k.tlsConfig(certs); err != nil {
				t.Fatal(err)
			}
			if got := certs.nodeName(); got != s.NodeName {
				t.Errorf("node name from the client certificate %q, want %q", got, s.NodeName)
			}
		})
	}
}

// shapeNode is a distribution's control-plane Node as the watcher reads it
// from the apiserver's JSON.
func shapeNode(t *testing.T, s nodewatchtest.Shape) *Node {
	t.Helper()
	var n Node
	if err := json.Unmarshal(s.NodeJSON(), &n); err != nil {
		t.Fatal(err)
	}
	if n.Metadata.Name != s.NodeName {
		t.Fatalf("%s: Node %q", s.Name, n.Metadata.Name)
	}
	return &n
}

// TestJudgeShapes: on every distribution's control-plane Node, as the
// distribution writes it, the verdict is eligible at rest (kubeadm's and
// Talos's exclude-from-external-load-balancers label and control-plane
// taint included), and each way a Node withdraws its node works: cordon
// (and its reverse), drain, vipd's own exclusion label, the
// out-of-service taint next to the distribution's own taints, a deletion
// held by a finalizer, the deletion, a graceful node shutdown.
func TestJudgeShapes(t *testing.T) {
	changes := []struct {
		name   string
		change func(n *Node)
		want   string
	}{
		{"at rest", func(*Node) {}, "eligible"},
		{"cordoned", func(n *Node) { n.Spec.Unschedulable = true }, ReasonCordoned},
		{"cordoned, then uncordoned", func(n *Node) { n.Spec.Unschedulable = true; n.Spec.Unschedulable = false }, "eligible"},
		{"drained", func(n *Node) {
			n.Spec.Unschedulable = true
			n.Spec.Taints = append(n.Spec.Taints, Taint{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"})
		}, ReasonCordoned},
		{"labelled " + LabelExclude, func(n *Node) { n.Metadata.Labels[LabelExclude] = "" }, ReasonExcluded},
		{"tainted out-of-service", func(n *Node) {
			n.Spec.Taints = append(n.Spec.Taints, Taint{Key: TaintOutOfService, Value: "nodeshutdown", Effect: "NoExecute"})
		}, ReasonOutOfService},
		{"being deleted", func(n *Node) { n.Metadata.DeletionTimestamp = "2026-11-28T12:00:00Z" }, ReasonDeleting},
		{"shutting down", func(n *Node) {
			n.Status.Conditions = []Condition{{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "node is shutting down"}}
		}, ReasonShutdown},
		{"not ready for another reason", func(n *Node) {
			n.Status.Conditions = []Condition{{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "container runtime network not ready"}}
		}, "eligible"},
	}
	for _, s := range nodewatchtest.Shapes() {
		for _, c := range changes {
			t.Run(s.Name+"/"+c.name, func(t *testing.T) {
				n := shapeNode(t, s)
				c.change(n)
				if got := Judge(n).String(); got != c.want {
					t.Errorf("Judge = %q, want %q", got, c.want)
				}
			})
		}
		t.Run(s.Name+"/deleted", func(t *testing.T) {
			if got := Judge(nil).String(); got != ReasonDeleted {
				t.Errorf("Judge = %q", got)
			}
		})
	}
}

// TestJudgeShapesFollowingExclusionLabel: with FollowExclusionLabel the
// Kubernetes exclusion label withdraws a node: every kubeadm and Talos
// control-plane node (which is why it is off by default), no RKE2 or k3s
// one until an operator sets it.
func TestJudgeShapesFollowingExclusionLabel(t *testing.T) {
	want := map[string]string{"kubeadm": ReasonExcludedLB, "talos": ReasonExcludedLB, "rke2": "eligible", "k3s": "eligible"}
	rules := Rules{FollowExclusionLabel: true}
	for _, s := range nodewatchtest.Shapes() {
		n := shapeNode(t, s)
		if got := rules.Judge(n).String(); got != want[s.Name] {
			t.Errorf("%s at rest: %q, want %q", s.Name, got, want[s.Name])
		}
		n.Metadata.Labels[LabelExcludeLB] = ""
		n.Spec.Unschedulable = true
		if got, w := rules.Judge(n).String(), ReasonCordoned+", "+ReasonExcludedLB; got != w {
			t.Errorf("%s labelled and cordoned: %q, want %q", s.Name, got, w)
		}
		if got := Judge(n).String(); got != ReasonCordoned {
			t.Errorf("%s labelled and cordoned, default rules: %q, want %q", s.Name, got, ReasonCordoned)
		}
	}
}
