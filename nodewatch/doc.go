// Package nodewatch follows one Kubernetes Node object, this host's own,
// and says whether the host should carry the apiserver VIP: eligible, or
// withdraw with a reason (cordoned, labelled vipd.io/exclude, being
// deleted, deleted, shutting down, out of service; excluded from external
// load balancers only when Rules ask for it: kubeadm and Talos put that
// label on every control-plane node).
//
// Judge is the verdict, a pure function of the Node's fields. Watcher does
// the I/O: it reads a kubelet kubeconfig (kubeadm's
// /etc/kubernetes/kubelet.conf, RKE2's and k3s's kubelet.kubeconfig,
// Talos's kubeconfig-kubelet, or a path given), lists and watches the Node with a field selector on its name
// (the only read the Node authorizer grants a kubelet's credentials:
// "node cannot read all nodes, only its own Node object"), follows
// bookmarks, relists after 410 Gone, and backs off after errors. It reports
// to a callback each time the verdict or the API's reachability changes.
//
// Fail-static: the VIP is what the API depends on, so an API that cannot be
// read never changes the verdict. An unreachable, slow, erroring or
// unauthorized (401, 403) apiserver, a missing kubeconfig, a response that
// does not parse: the last verdict stays, the failure is logged once when
// it starts (every retry after that at debug level) and once when it ends.
// Only a successful read of the Node changes the verdict; a Node that is
// absent counts as deleted only when this watcher saw it before (a node
// whose kubelet has not registered yet, at cluster bootstrap or join, is
// not withdrawn).
//
// The client is a small REST watch on net/http and encoding/json, not
// client-go: linking client-go's typed core client, clientcmd and informers
// doubled vipd's binary (47 MiB instead of 23) and added about 15 MiB of
// resident memory before the first request, 17 MiB on an idle node;
// nodewatch adds 76 KB and about 3 MiB (docs/benchmarks.md, "Kubernetes
// client"). The Node is read as JSON into the few fields Judge needs.
//
// Not supported: exec and auth-provider credential plugins, basic auth,
// proxy-url (the kubelet's kubeconfig uses none of them). The package never
// writes to the API.
package nodewatch
