package nodewatch

import (
	"slices"
	"strings"
)

// Withdraw reasons, in the order Judge lists them. They appear in vipd's
// status, events, logs and metric labels.
const (
	ReasonDeleted      = "node deleted"
	ReasonDeleting     = "node being deleted"
	ReasonShutdown     = "node shutting down"
	ReasonOutOfService = "node out of service"
	ReasonCordoned     = "node cordoned"
	ReasonExcluded     = "node labelled " + LabelExclude
	ReasonExcludedLB   = "node excluded from external load balancers"
)

// Reasons lists every withdraw reason, in the order Judge gives them.
func Reasons() []string {
	return []string{ReasonDeleted, ReasonDeleting, ReasonShutdown, ReasonOutOfService, ReasonCordoned, ReasonExcluded, ReasonExcludedLB}
}

// Well-known names Judge reads.
const (
	// LabelExclude is vipd's own label: a Node that carries it (any
	// value, "" included) withdraws its node. No distribution sets it, so
	// it means what the operator who set it meant: `kubectl label node
	// NAME vipd.io/exclude=` to take the node out, `kubectl label node
	// NAME vipd.io/exclude-` to bring it back.
	LabelExclude = "vipd.io/exclude"
	// LabelExcludeLB is the Kubernetes label that keeps a node out of
	// external load balancers (its value does not matter). kubeadm's
	// mark-control-plane phase and Talos put it on every control-plane
	// node, so Judge reads it only when Rules.FollowExclusionLabel says so.
	LabelExcludeLB = "node.kubernetes.io/exclude-from-external-load-balancers"
	// TaintOutOfService is the taint an operator puts on a node that is
	// down for good (non-graceful node shutdown).
	TaintOutOfService = "node.kubernetes.io/out-of-service"
	// shutdownMessage is what the kubelet's graceful node shutdown manager
	// puts in the Ready condition's message while the node shuts down
	// (k8s.io/kubernetes pkg/kubelet/nodeshutdown, ShutdownStatus; the
	// condition is Ready=False, reason KubeletNotReady, and the message
	// joins every error, so it is searched, not compared).
	shutdownMessage = "node is shutting down"
)

// Node is the part of a Kubernetes Node object that Judge reads, with the
// API's JSON field names.
type Node struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     NodeSpec   `json:"spec"`
	Status   NodeStatus `json:"status"`
}

// ObjectMeta is the part of a Node's metadata the watcher reads.
type ObjectMeta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels,omitempty"`
	// DeletionTimestamp is set (RFC 3339) once the Node is being deleted.
	DeletionTimestamp string `json:"deletionTimestamp,omitempty"`
}

// NodeSpec is the part of a Node's spec Judge reads.
type NodeSpec struct {
	// Unschedulable is set by `kubectl cordon` and `kubectl drain`.
	Unschedulable bool    `json:"unschedulable,omitempty"`
	Taints        []Taint `json:"taints,omitempty"`
}

// Taint is a Node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

// NodeStatus is the part of a Node's status Judge reads.
type NodeStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is a Node condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Verdict is what the Node says about this host carrying the VIP.
type Verdict struct {
	// Reasons lists why the host should not carry the VIP, in the order of
	// the Reason constants; none: eligible.
	Reasons []string
}

// Eligible reports whether the Node allows this host to carry the VIP.
func (v Verdict) Eligible() bool { return len(v.Reasons) == 0 }

// String is "eligible", or the reasons joined with ", ".
func (v Verdict) String() string {
	if v.Eligible() {
		return "eligible"
	}
	return strings.Join(v.Reasons, ", ")
}

// Equal reports whether two verdicts give the same reasons.
func (v Verdict) Equal(o Verdict) bool { return slices.Equal(v.Reasons, o.Reasons) }

// Rules are the choices Judge leaves to the configuration.
type Rules struct {
	// FollowExclusionLabel: LabelExcludeLB withdraws the node, as
	// LabelExclude does. Only for clusters where it is not on every
	// control-plane node (not kubeadm's, not Talos's by default).
	FollowExclusionLabel bool
}

// Judge returns the verdict for a Node under the default Rules; nil means
// the Node was deleted. It is a pure function.
func Judge(n *Node) Verdict { return Rules{}.Judge(n) }

// Judge returns the verdict for a Node; nil means the Node was deleted. It
// is a pure function.
//
// The host withdraws when its Node is deleted or being deleted (a Cluster
// API rollout or `kubectl delete node`), when the kubelet reports a
// graceful node shutdown in the Ready condition, when it carries the
// out-of-service taint, when it is cordoned (spec.unschedulable: `kubectl
// cordon`, `kubectl drain`, upgrade controllers), when it has vipd's own
// label LabelExclude, or, with FollowExclusionLabel, the
// exclude-from-external-load-balancers label. Nothing else counts: the
// labels and taints each distribution puts on its control-plane nodes
// (node-role.kubernetes.io/control-plane, the control-plane NoSchedule
// taint, kubeadm's and Talos's exclude-from-external-load-balancers) are
// there on every healthy one; a NotReady node is the health check's
// business, not the Node's.
func (rules Rules) Judge(n *Node) Verdict {
	if n == nil {
		return Verdict{Reasons: []string{ReasonDeleted}}
	}
	var r []string
	if n.Metadata.DeletionTimestamp != "" {
		r = append(r, ReasonDeleting)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" && c.Status != "True" && strings.Contains(c.Message, shutdownMessage) {
			r = append(r, ReasonShutdown)
			break
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintOutOfService {
			r = append(r, ReasonOutOfService)
			break
		}
	}
	if n.Spec.Unschedulable {
		r = append(r, ReasonCordoned)
	}
	if _, ok := n.Metadata.Labels[LabelExclude]; ok {
		r = append(r, ReasonExcluded)
	}
	if _, ok := n.Metadata.Labels[LabelExcludeLB]; ok && rules.FollowExclusionLabel {
		r = append(r, ReasonExcludedLB)
	}
	return Verdict{Reasons: r}
}
