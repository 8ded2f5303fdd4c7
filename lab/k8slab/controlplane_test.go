package k8slab

import (
	"strings"
	"testing"

	"github.com/vipd/vipd/lab/netlab"
)

// TestControlPlane starts the real control plane with no VIP holder and
// checks what the other tests rely on: every apiserver ready on its own
// node, kubectl working through a node address, and authorization as
// kubeadm's (Node,RBAC): a node identity may watch the lab's ConfigMaps
// (the lab's RoleBinding) but not read secrets, the admin may do anything.
func TestControlPlane(t *testing.T) {
	l := netlab.New(t, netlab.Options{})
	cp := Start(t, l)
	for _, n := range l.Nodes {
		if ok, detail := cp.Ready(n); !ok {
			t.Errorf("after Start: %s", detail)
		}
	}
	for _, tc := range []struct {
		as   []string
		verb string
		what []string
		want string
	}{
		{nil, "list", []string{"secrets", "-A"}, "yes"},
		{[]string{"--as", "system:node:n2", "--as-group", "system:nodes"}, "watch", []string{"configmaps", "-n", Namespace}, "yes"},
		{[]string{"--as", "system:node:n2", "--as-group", "system:nodes"}, "list", []string{"secrets", "-A"}, "no"},
		{[]string{"--as", "system:node:n2", "--as-group", "system:nodes"}, "create", []string{"configmaps", "-n", Namespace}, "no"},
	} {
		args := append(append([]string{"auth", "can-i", tc.verb}, tc.what...), tc.as...)
		out, _ := cp.KubectlVia(l.Nodes[1], args...) // can-i exits 1 for "no"
		// "no" comes with the Node authorizer's reason.
		if got := strings.TrimSpace(out); got != tc.want && !strings.HasPrefix(got, tc.want+" - ") {
			t.Errorf("kubectl %s: %q, want %q", strings.Join(args, " "), got, tc.want)
		}
	}
}
