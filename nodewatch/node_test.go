package nodewatch

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	ready := Condition{Type: "Ready", Status: "True", Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	cases := []struct {
		name string
		node *Node
		want string
	}{
		{"plain ready node", &Node{Status: NodeStatus{Conditions: []Condition{ready}}}, "eligible"},
		{"node without status yet", &Node{}, "eligible"},
		{"deleted", nil, ReasonDeleted},
		{"cordoned", &Node{Spec: NodeSpec{Unschedulable: true}}, ReasonCordoned},
		{"vipd's exclusion label, empty value", &Node{Metadata: ObjectMeta{Labels: map[string]string{LabelExclude: ""}}}, ReasonExcluded},
		{"vipd's exclusion label, any value", &Node{Metadata: ObjectMeta{Labels: map[string]string{LabelExclude: "false"}}}, ReasonExcluded},
		{"Kubernetes exclusion label (on every kubeadm control plane)", &Node{Metadata: ObjectMeta{Labels: map[string]string{LabelExcludeLB: ""}}}, "eligible"},
		{"other labels", &Node{Metadata: ObjectMeta{Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}, "eligible"},
		{"being deleted (finalizer pending)", &Node{Metadata: ObjectMeta{DeletionTimestamp: "2026-11-26T12:00:00Z"}}, ReasonDeleting},
		{"graceful shutdown", &Node{Status: NodeStatus{Conditions: []Condition{
			{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "node is shutting down"}}}}, ReasonShutdown},
		{"graceful shutdown among other errors", &Node{Status: NodeStatus{Conditions: []Condition{
			{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "[container runtime is down, node is shutting down]"}}}}, ReasonShutdown},
		{"not ready for another reason", &Node{Status: NodeStatus{Conditions: []Condition{
			{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "container runtime network not ready"}}}}, "eligible"},
		{"ready status unknown (node lost)", &Node{Status: NodeStatus{Conditions: []Condition{
			{Type: "Ready", Status: "Unknown", Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}}}, "eligible"},
		{"shutdown message in another condition", &Node{Status: NodeStatus{Conditions: []Condition{
			ready, {Type: "MemoryPressure", Status: "False", Message: "node is shutting down"}}}}, "eligible"},
		{"out-of-service taint", &Node{Spec: NodeSpec{Taints: []Taint{{Key: TaintOutOfService, Value: "nodeshutdown", Effect: "NoExecute"}}}}, ReasonOutOfService},
		{"not-ready taint only", &Node{Spec: NodeSpec{Taints: []Taint{{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}}}}, "eligible"},
		{"control-plane taint only", &Node{Spec: NodeSpec{Taints: []Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}}}}, "eligible"},
		{"drained: cordoned and its unschedulable taint", &Node{Spec: NodeSpec{Unschedulable: true,
			Taints: []Taint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}}}}, ReasonCordoned},
		{"everything at once, in a fixed order", &Node{
			Metadata: ObjectMeta{DeletionTimestamp: "2026-11-26T12:00:00Z", Labels: map[string]string{LabelExcludeLB: "true", LabelExclude: ""}},
			Spec:     NodeSpec{Unschedulable: true, Taints: []Taint{{Key: TaintOutOfService, Effect: "NoExecute"}}},
			Status: NodeStatus{Conditions: []Condition{
				{Type: "Ready", Status: "False", Message: "node is shutting down"}}},
		}, strings.Join([]string{ReasonDeleting, ReasonShutdown, ReasonOutOfService, ReasonCordoned, ReasonExcluded, ReasonExcludedLB}, ", ")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Rules{FollowExclusionLabel: strings.HasPrefix(c.name, "everything")}.Judge(c.node)
			if got := v.String(); got != c.want {
				t.Errorf("Judge = %q; want %q", got, c.want)
			}
			if v.Eligible() != (c.want == "eligible") {
				t.Errorf("Eligible() = %v for %q", v.Eligible(), c.want)
			}
		})
	}
}

// TestJudgeKubectlJSON: the verdict from a Node as the apiserver sends it
// (kubectl get node -o json of a drained control-plane node, trimmed).
func TestJudgeKubectlJSON(t *testing.T) {
	const doc = `{"apiVersion":"v1","kind":"Node","metadata":{"name":"cp-1","resourceVersion":"4711",
	"labels":{"kubernetes.io/hostname":"cp-1","node-role.kubernetes.io/control-plane":"","node.kubernetes.io/exclude-from-external-load-balancers":""},
	"annotations":{"node.alpha.kubernetes.io/ttl":"0"}},
	"spec":{"podCIDR":"10.244.0.0/24","taints":[{"effect":"NoSchedule","key":"node-role.kubernetes.io/control-plane"},
	{"effect":"NoSchedule","key":"node.kubernetes.io/unschedulable","timeAdded":"2026-11-26T12:00:00Z"}],"unschedulable":true},
	"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status",
	"lastHeartbeatTime":"2026-11-26T12:00:00Z"}],"images":[{"names":["registry.k8s.io/etcd:3.6.4-0"],"sizeBytes":1}]}}`
	var n Node
	if err := json.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	if got, want := Judge(&n).String(), ReasonCordoned; got != want {
		t.Errorf("Judge = %q; want %q", got, want)
	}
	if n.Metadata.Name != "cp-1" || n.Metadata.ResourceVersion != "4711" {
		t.Errorf("metadata %+v", n.Metadata)
	}
}

// TestDeps: nodewatch stays a small client of its own: no client-go, no
// vipd daemon code.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/vipd/vipd/agent", "github.com/vipd/vipd/l2", "github.com/vipd/vipd/bgp"} {
			if strings.HasPrefix(pkg, bad) {
				t.Errorf("nodewatch links %s", pkg)
			}
		}
	}
}
