package k8slab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// Ports of the control plane in every node namespace.
const (
	// APIServerPort is kube-apiserver's --secure-port, on every address of
	// the node (kubeadm's default bind address 0.0.0.0): the node address,
	// the VIP when the node holds it, and 127.0.0.1 for vipd's check.
	APIServerPort = 6443
	// EtcdClientPort is where the node's etcd member serves its apiserver,
	// on 127.0.0.1 only.
	EtcdClientPort = 2379
	// EtcdPeerPort is where the members talk, on the node address.
	EtcdPeerPort = 2380
)

// Namespace is the Kubernetes namespace of the lab's objects.
const Namespace = "vipd-lab"

// HealthURL is vipd's documented health check URL (README, docs/bootstrap.md).
const HealthURL = "https://127.0.0.1:6443/readyz"

// ControlPlane is a stacked Kubernetes control plane on a netlab lab's
// nodes: on each, an etcd member (one cluster of all nodes) and a
// kube-apiserver talking to its local member, as kubeadm sets them up.
type ControlPlane struct {
	// Lab is the namespace lab it runs on.
	Lab *netlab.Lab
	// Bin are the binaries it runs.
	Bin Binaries
	// PKI is the cluster's PKI; its Dir also holds admin.crt/.key and
	// node-NAME.crt/.key, the clients' identities.
	PKI *PKI
	// VIP is the address the serving certificates name and the clients use.
	VIP netip.Addr
	// AdminKubeconfig is a kubeconfig for the admin identity through the VIP.
	AdminKubeconfig string

	t testing.TB

	mu         sync.Mutex
	etcds      map[string]*netlab.Proc
	apiservers map[string]*netlab.Proc
	clients    map[string]*http.Client
}

// Start builds (or takes from the cache) the binaries, writes the PKI and
// starts etcd and kube-apiserver on every node of l, then waits (bounded)
// until every apiserver is ready, and creates the lab's namespace and the
// RBAC that lets nodes' identities watch its ConfigMaps, with kubectl
// through node 1's address (the VIP has no holder yet). Failures stop the
// test; everything it starts is stopped by the lab's cleanup.
func Start(t testing.TB, l *netlab.Lab) *ControlPlane {
	t.Helper()
	bin, err := Build(logWriter{t})
	if err != nil {
		t.Fatalf("k8slab: %v", err)
	}
	if bin.Built > 0 {
		t.Logf("k8slab: built the lab's Kubernetes binaries in %v", bin.Built.Round(time.Second))
	}
	cp := &ControlPlane{Lab: l, Bin: bin, VIP: netlab.VIP4, t: t,
		etcds: map[string]*netlab.Proc{}, apiservers: map[string]*netlab.Proc{}, clients: map[string]*http.Client{}}
	var nodes []PKINode
	for _, n := range l.Nodes {
		nodes = append(nodes, PKINode{Name: n.Name, IP: n.IP})
	}
	if cp.PKI, err = NewPKI(filepath.Join(l.Dir, "pki"), nodes, cp.VIP); err != nil {
		t.Fatalf("k8slab: PKI: %v", err)
	}
	admin, err := cp.PKI.ClientPair("admin", Admin)
	if err != nil {
		t.Fatalf("k8slab: %v", err)
	}
	for _, n := range l.Nodes {
		if _, err := cp.PKI.ClientPair("node-"+n.Name, NodeIdentity(n.Name)); err != nil {
			t.Fatalf("k8slab: %v", err)
		}
	}
	cp.AdminKubeconfig = filepath.Join(cp.PKI.Dir, "admin.conf")
	if err := os.WriteFile(cp.AdminKubeconfig, []byte(Kubeconfig(fmt.Sprintf("https://%s", netip.AddrPortFrom(cp.VIP, APIServerPort)), cp.PKI.CACert, admin)), 0o600); err != nil {
		t.Fatalf("k8slab: %v", err)
	}
	t.Cleanup(cp.dumpLogs)
	start := time.Now()
	for _, n := range l.Nodes {
		if err := cp.StartEtcd(n); err != nil {
			t.Fatalf("k8slab: %v", err)
		}
	}
	for _, n := range l.Nodes {
		if err := cp.StartAPIServer(n); err != nil {
			t.Fatalf("k8slab: %v", err)
		}
	}
	for _, n := range l.Nodes {
		if err := cp.WaitReady(n, 3*time.Minute); err != nil {
			t.Fatalf("k8slab: %v", err)
		}
	}
	t.Logf("k8slab: etcd and kube-apiserver ready on %d nodes in %v", len(l.Nodes), time.Since(start).Round(100*time.Millisecond))
	if out, err := cp.KubectlVia(l.Nodes[0], "apply", "-f", cp.writeManifest()); err != nil {
		t.Fatalf("k8slab: %v", err)
	} else {
		t.Logf("k8slab: %s", strings.TrimSpace(out))
	}
	return cp
}

// logWriter sends Build's progress to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// Kubeconfig renders a kubeconfig for server with the CA and a client pair.
func Kubeconfig(server, ca string, p Pair) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: lab
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: lab
  context: {cluster: lab, user: lab}
current-context: lab
`, server, ca, p.Cert, p.Key)
}

// manifest is what Start applies: the lab's namespace, and read access to
// its ConfigMaps for every node identity (the Node authorizer has no
// opinion on them; RBAC decides), so kubelet-like clients watch them.
const manifest = `apiVersion: v1
kind: Namespace
metadata:
  name: ` + Namespace + `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: lab-watch
  namespace: ` + Namespace + `
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: lab-watch-nodes
  namespace: ` + Namespace + `
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: lab-watch
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
`

func (cp *ControlPlane) writeManifest() string {
	p := filepath.Join(cp.Lab.Dir, "lab-rbac.yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o644); err != nil {
		cp.t.Fatalf("k8slab: %v", err)
	}
	return p
}

// Kubectl runs kubectl with the admin kubeconfig (through the VIP) in the
// client namespace and returns its combined output.
func (cp *ControlPlane) Kubectl(args ...string) (string, error) {
	return cp.Lab.Exec(cp.Lab.Client, append([]string{cp.Bin.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "--request-timeout", "20s"}, args...)...)
}

// KubectlVia is Kubectl to node h's address instead of the VIP.
func (cp *ControlPlane) KubectlVia(h *netlab.Host, args ...string) (string, error) {
	server := fmt.Sprintf("https://%s", netip.AddrPortFrom(h.IP, APIServerPort))
	return cp.Lab.Exec(cp.Lab.Client, append([]string{cp.Bin.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "--server", server, "--request-timeout", "20s"}, args...)...)
}

// etcdArgs is node h's etcd member: clients on 127.0.0.1, peers on the
// node address, one cluster of every lab node, data in h.Dir/etcd, no TLS
// (what is measured is the apiserver's and the VIP's behaviour, and the two
// CPUs are better spent elsewhere; kubeadm uses mutual TLS).
func (cp *ControlPlane) etcdArgs(h *netlab.Host) []string {
	var members []string
	for _, n := range cp.Lab.Nodes {
		members = append(members, fmt.Sprintf("%s=http://%s", n.Name, netip.AddrPortFrom(n.IP, EtcdPeerPort)))
	}
	peer := fmt.Sprintf("http://%s", netip.AddrPortFrom(h.IP, EtcdPeerPort))
	client := fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort)
	return []string{cp.Bin.Etcd,
		"--name", h.Name,
		"--data-dir", filepath.Join(h.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(members, ","),
		"--initial-cluster-state", "new", "--initial-cluster-token", cp.Lab.Prefix,
		"--snapshot-count", "10000", // kubeadm's
		"--log-level", "warn",
	}
}

// StartEtcd starts h's etcd member (again after a stop: its data stays).
func (cp *ControlPlane) StartEtcd(h *netlab.Host) error {
	p, err := cp.Lab.Start(h, "etcd "+h.Name, filepath.Join(h.Dir, "etcd.log"), nil, cp.etcdArgs(h)...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcds[h.Name] = p
	cp.mu.Unlock()
	return nil
}

// GoawayChance is the lab's kube-apiserver --goaway-chance: the fraction
// of requests (watches excepted) after which the apiserver ends the
// connection gracefully (the highest it takes, 1 in 50).
const GoawayChance = "0.02"

// apiserverArgs is node h's kube-apiserver, with kubeadm's flags where they
// matter here: advertised on the node address, serving on every address,
// Node and RBAC authorization, NodeRestriction, client certificates from
// the cluster CA, its local etcd member.
func (cp *ControlPlane) apiserverArgs(h *netlab.Host) []string {
	serving := cp.PKI.ServingPair(h.Name)
	return append([]string{cp.Bin.APIServer,
		"--advertise-address", h.IP.String(),
		"--secure-port", fmt.Sprint(APIServerPort),
		"--allow-privileged=true",
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--client-ca-file", cp.PKI.CACert,
		"--tls-cert-file", serving.Cert, "--tls-private-key-file", serving.Key,
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", cp.PKI.SAPub,
		"--service-account-signing-key-file", cp.PKI.SAKey,
		"--service-cluster-ip-range", ServiceCIDR.String(),
		"--cert-dir", filepath.Join(h.Dir, "apiserver-certs"),
		"--profiling=false",
		// As docs/design.md ("Lingering") asks of an operator who wants
		// planned moves that cut nothing: a connection the old holder
		// lingers on ends by itself once the apiserver sent it a GOAWAY.
		"--goaway-chance", GoawayChance,
	}, cp.auditArgs(h)...)
}

// StartAPIServer starts h's kube-apiserver and returns at once (WaitReady
// waits for it).
func (cp *ControlPlane) StartAPIServer(h *netlab.Host) error {
	p, err := cp.Lab.Start(h, "kube-apiserver "+h.Name, filepath.Join(h.Dir, "apiserver.log"), nil, cp.apiserverArgs(h)...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiservers[h.Name] = p
	cp.mu.Unlock()
	return nil
}

// Etcd returns h's current etcd process (nil if none was started).
func (cp *ControlPlane) Etcd(h *netlab.Host) *netlab.Proc {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.etcds[h.Name]
}

// APIServer returns h's current kube-apiserver process.
func (cp *ControlPlane) APIServer(h *netlab.Host) *netlab.Proc {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.apiservers[h.Name]
}

// client is an HTTPS client that connects to h's 127.0.0.1:6443 from
// inside h's namespace (whatever host the URL names) and verifies the
// serving certificate against the cluster CA and the name "kubernetes": what
// vipd's documented check does. One kept-alive connection, like vipd's.
func (cp *ControlPlane) client(h *netlab.Host) *http.Client {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if c := cp.clients[h.Name]; c != nil {
		return c
	}
	pem, err := os.ReadFile(cp.PKI.CACert)
	if err != nil {
		cp.t.Fatalf("k8slab: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	lab := cp.Lab
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: ServerName},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var conn net.Conn
			err := lab.InNamespace(h, func() error {
				var err error
				conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", APIServerPort))
				return err
			})
			return conn, err
		},
		MaxIdleConnsPerHost: 1,
	}}
	cp.clients[h.Name] = c
	return c
}

// Get fetches path (e.g. "/readyz") from h's apiserver on 127.0.0.1 within
// timeout, anonymously, and returns the status code, the body's start and
// how long it took.
func (cp *ControlPlane) Get(h *netlab.Host, path string, timeout time.Duration) (int, string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://kubernetes"+path, nil)
	if err != nil {
		return 0, "", 0, err
	}
	resp, err := cp.client(h).Do(req)
	if err != nil {
		return 0, "", time.Since(start), err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), time.Since(start), nil
}

// Ready reports whether h's apiserver answers /readyz with 200 within 2 s,
// and says what it saw.
func (cp *ControlPlane) Ready(h *netlab.Host) (bool, string) {
	code, body, d, err := cp.Get(h, "/readyz", 2*time.Second)
	if err != nil {
		return false, fmt.Sprintf("%s /readyz: %v", h.Name, err)
	}
	return code == http.StatusOK, fmt.Sprintf("%s /readyz: %d %q in %v", h.Name, code, firstLine(body), d.Round(time.Millisecond))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// WaitReady waits up to timeout until h's apiserver is ready.
func (cp *ControlPlane) WaitReady(h *netlab.Host, timeout time.Duration) error {
	var last string
	ok, _ := netlab.Eventually(timeout, 200*time.Millisecond, func() (bool, string) {
		if p := cp.APIServer(h); p == nil || !p.Running() {
			last = fmt.Sprintf("kube-apiserver on %s is not running", h.Name)
			if p != nil {
				last += fmt.Sprintf(" (exited: %v, log %s)", p.ExitErr(), p.Log)
			}
			return true, ""
		}
		ok, detail := cp.Ready(h)
		last = detail
		return ok, ""
	})
	if p := cp.APIServer(h); !ok || p == nil || !p.Running() {
		return fmt.Errorf("kube-apiserver on %s not ready within %v: %s", h.Name, timeout, last)
	}
	return nil
}

// WaitAllReady waits until every node's apiserver is ready.
func (cp *ControlPlane) WaitAllReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range cp.Lab.Nodes {
		if err := cp.WaitReady(n, time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// Signal sends sig to h's etcd and/or kube-apiserver, by PID.
func (cp *ControlPlane) Signal(h *netlab.Host, sig syscall.Signal, etcd, apiserver bool) error {
	var errs []string
	for _, p := range []struct {
		on bool
		p  *netlab.Proc
	}{{etcd, cp.Etcd(h)}, {apiserver, cp.APIServer(h)}} {
		if !p.on {
			continue
		}
		if p.p == nil {
			errs = append(errs, "not started")
			continue
		}
		if err := p.p.Signal(sig); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("signal %v on %s: %s", sig, h.Name, strings.Join(errs, "; "))
	}
	return nil
}

// dumpLogs writes the end of every etcd and apiserver log to the test log
// when the test failed.
func (cp *ControlPlane) dumpLogs() {
	if !cp.t.Failed() {
		return
	}
	for _, n := range cp.Lab.Nodes {
		for _, f := range []string{"etcd.log", "apiserver.log"} {
			b, err := os.ReadFile(filepath.Join(n.Dir, f))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			cp.t.Logf("==== end of %s of %s ====\n%s", f, n.Name, strings.Join(lines, "\n"))
		}
	}
}

// etcdCutTable is the nftables table CutEtcd adds.
const etcdCutTable = "k8slab-etcd-cut"

// CutEtcd drops h's etcd peer traffic (both ways): its member runs but has
// no quorum, so its apiserver, which talks only to it, has lost etcd while
// everything else of the node works. UncutEtcd undoes it.
func (cp *ControlPlane) CutEtcd(h *netlab.Host) error {
	return cp.Lab.DropTraffic(h, etcdCutTable, netlab.Both, []string{
		fmt.Sprintf("tcp dport %d", EtcdPeerPort), fmt.Sprintf("tcp sport %d", EtcdPeerPort)})
}

// UncutEtcd removes CutEtcd's table.
func (cp *ControlPlane) UncutEtcd(h *netlab.Host) error {
	return cp.Lab.RemoveTable(h, "inet", etcdCutTable)
}

// Throttle starves h's kube-apiserver of CPU the way a CPU quota does:
// every period it is stopped (SIGSTOP) for stopped, then runs (SIGCONT),
// until the returned function is called or max passes. The function ends
// the throttling and leaves the process running.
func (cp *ControlPlane) Throttle(h *netlab.Host, stopped, period, max time.Duration) (stop func()) {
	p := cp.APIServer(h)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer p.Signal(syscall.SIGCONT)
		for deadline := time.Now().Add(max); time.Now().Before(deadline); {
			p.Signal(syscall.SIGSTOP)
			select {
			case <-quit:
				return
			case <-time.After(stopped):
			}
			p.Signal(syscall.SIGCONT)
			select {
			case <-quit:
				return
			case <-time.After(period - stopped):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
