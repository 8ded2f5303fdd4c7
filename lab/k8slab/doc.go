// Package k8slab runs a real Kubernetes control plane in a lab/netlab
// namespace lab, with vipd (or keepalived) in front of it and real
// client-go clients behind the VIP, and measures what those clients go
// through at a failover.
//
// # The control plane
//
// Each node namespace runs, as a kubeadm control-plane node does:
//
//   - an etcd member (go.etcd.io/etcd/server/v3 v3.7.0, etcd's own main,
//     the release kube-apiserver's etcd client is from). The members form
//     one cluster, stacked as kubeadm does: the peers talk on the node
//     addresses (port 2380), each apiserver uses only its local member on
//     127.0.0.1:2379. One cluster, not one per node, because the clients
//     move between apiservers at a failover and must find the same data
//     (resource versions) there, and because losing a node must cost its
//     etcd member as in a real cluster: a cut node's member loses quorum
//     and its apiserver's /readyz fails. No TLS between etcd and its
//     clients or peers (kubeadm uses mutual TLS there): it is not what is
//     measured, and the two CPUs are better spent elsewhere.
//   - kube-apiserver v1.37.2 (k8s.io/kubernetes/cmd/kube-apiserver),
//     --advertise-address the node address, serving on port 6443 of every
//     address (kubeadm's default bind address): the node address, the VIP
//     when the node holds it, 127.0.0.1 for vipd's check; Node,RBAC
//     authorization, NodeRestriction, client certificates from the cluster
//     CA, service-account keys, --service-cluster-ip-range 198.51.100.0/24.
//
// The PKI (NewPKI) is kubeadm's shape with ECDSA P-256 keys: one cluster CA;
// per node a serving certificate for kube-apiserver whose SANs are the
// node name, kubernetes, kubernetes.default, kubernetes.default.svc,
// kubernetes.default.svc.cluster.local, the service IP, the node address
// and the VIP, and not 127.0.0.1; client certificates for the admin
// (system:masters) and per node (system:node:NAME in system:nodes); the
// service-account key pair. Start applies, with kubectl, the lab's
// namespace and a RoleBinding letting node identities watch its
// ConfigMaps (RBAC; the Node authorizer has no opinion on them).
//
// # The binaries
//
// kube-apiserver, kubectl, etcd and the clients tool are built from the
// lab/k8s module (a module of its own: vipd's go.mod and binaries never
// see Kubernetes; TestProductDoesNotSeeTheLab checks it) and cached in
// $VIPD_LAB_CACHE, $XDG_CACHE_HOME/vipd-lab or ~/.cache/vipd-lab, keyed by
// the Go version, lab/k8s's go.mod, go.sum and Go files. A cold build
// (modules downloaded, nothing compiled) takes 5-9 minutes on two CPUs; a
// warm one links in seconds.
//
// # The clients and what is measured
//
// lab/k8s/cmd/clients (client-go v0.37.2, defaults kept) runs in the
// client namespace through the VIP: a writer creating a ConfigMap every
// 100 ms, 20 informers on them (8 on connections of their own, 3
// kubelet-like groups of 4 on one shared HTTP/2 connection per node
// identity, which also renews the node's Lease every 10 s as a kubelet
// does), a kubectl-like loop (a new client and connection per request)
// and a long-lived client's loop. It writes JSON records; Run.Stats turns
// them into ClientStats: failed requests, the longest request, the watch
// stall (the longest time an informer delivered nothing while an object it
// had not delivered existed), when every informer was back within
// LagLimit, relists.
//
// Each apiserver also writes an audit log of the clients' creates, gets
// and updates, under the audit ID each request sends (audit.go): a
// request's time outside the apiserver (LongestOutside: the network, the
// VIP's move, the client's retries) is told from the apiserver's own (its
// etcd member waiting for a leader). TestNoRequestHangsWhenTheHolderIsLost
// loses the holder $VIPD_K8S_LOST_RUNS times (it runs only when that is
// set) in each of linkdown, nodedown and partition under one control
// plane and holds every request to 2 s outside the apiserver.
//
// MoveScenarios (vipd only) make 20 planned handoffs in a row while
// clients write on the HTTP/2 connection of their watches: the kubelet-like
// groups renewing their Lease every 100 ms (-lease-every), or a controller
// with 10 informers creating on their connection (-controller-watches).
// TestClientsThroughFailovers runs them after Scenarios (docs/design.md,
// "Lingering", has why and what they measure). The lab's kube-apiservers
// run with --goaway-chance (GoawayChance), as an operator's should.
//
// RunTrial drives one scenario (Scenarios) with an Agent: vipd here
// (VipdAgent, the documented health check), keepalived in lab/bench. The
// lab tests (TestHealthCheckRealReadyz, TestClientsThroughFailovers,
// TestNoRequestHangsWhenTheHolderIsLost, TestSlowControlPlane) need root
// and VIPD_NETNS_TESTS=1; VIPD_BIN names the vipd to measure, so another
// build is measured with
//
//	VIPD_NETNS_TESTS=1 VIPD_BIN=/path/to/bin go test -count=1 -v -run TestClientsThroughFailovers ./lab/k8slab/
//
// ($VIPD_K8S_SCENARIOS=handoff,crash picks scenarios; $VIPD_K8S_RESULTS=file
// writes the trials as JSON), and make bench (part k8s) compares vipd with
// keepalived.
package k8slab
