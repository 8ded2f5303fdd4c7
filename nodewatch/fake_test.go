package nodewatch

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI is an in-process apiserver for one Node, over TLS with client
// certificates, enforcing what the Node authorizer enforces: a kubelet
// (system:node:NAME) may list and watch only its own Node, through a field
// selector on its name. It keeps the Node's history for watches, and can
// be made to fail, stall, expire resource versions, cut watches, or stop.
type fakeAPI struct {
	t    *testing.T
	pki  *testPKI
	addr string
	node string // the Node's name

	mu       sync.Mutex
	srv      *httptest.Server
	obj      *Node // nil: no such Node
	rv       int
	history  []fakeEvent
	changed  chan struct{} // closed and replaced on every change
	cut      chan struct{} // closed to abort every open watch
	minRV    int           // a watch from an older resource version gets 410
	goneAs   string        // "status" (HTTP 410) or "event" (an ERROR event)
	endAt    int           // a watch that sent this resource version ends
	failCode int           // answer every request with this status (0: none)
	delay    time.Duration // wait before answering
	requests []string      // "list", "watch rv=N"
	serials  []string      // the client certificate serial of each request
}

type fakeEvent struct {
	rv  int
	typ string
	obj []byte
}

func newFakeAPI(t *testing.T, pki *testPKI, node string) *fakeAPI {
	f := &fakeAPI{t: t, pki: pki, node: node, rv: 100, changed: make(chan struct{}), cut: make(chan struct{}), goneAs: "status"}
	f.start()
	t.Cleanup(f.stop)
	return f
}

// start serves, on the same address as before if it ran already.
func (f *fakeAPI) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.t.Fatalf("fake apiserver listen: %v", err)
	}
	f.addr = ln.Addr().String()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{f.pki.server}, ClientCAs: f.pki.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	f.srv = srv
}

// stop closes the server and every connection to it: the apiserver is gone.
func (f *fakeAPI) stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

func (f *fakeAPI) url() string { return "https://" + f.addr }

// set changes the Node (creating it when absent) and records the event.
func (f *fakeAPI) set(change func(n *Node)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	typ := "MODIFIED"
	if f.obj == nil {
		typ = "ADDED"
		f.obj = &Node{Metadata: ObjectMeta{Name: f.node, Labels: map[string]string{"kubernetes.io/hostname": f.node}}}
	}
	change(f.obj)
	f.record(typ)
}

// remove deletes the Node.
func (f *fakeAPI) remove() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.obj == nil {
		return
	}
	f.record("DELETED")
	f.obj = nil
}

// bookmark sends a bookmark to open watches, and ends them after it (as at
// their timeout), and returns its resource version.
func (f *fakeAPI) bookmark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endAt = f.rv + 1
	f.rv++
	b, _ := json.Marshal(Node{Metadata: ObjectMeta{ResourceVersion: strconv.Itoa(f.rv)}})
	f.history = append(f.history, fakeEvent{rv: f.rv, typ: "BOOKMARK", obj: b})
	f.broadcast()
	return f.rv
}

func (f *fakeAPI) record(typ string) {
	f.rv++
	f.obj.Metadata.ResourceVersion = strconv.Itoa(f.rv)
	b, err := json.Marshal(f.obj)
	if err != nil {
		f.t.Fatal(err)
	}
	f.history = append(f.history, fakeEvent{rv: f.rv, typ: typ, obj: b})
	f.broadcast()
}

func (f *fakeAPI) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// expire forgets every resource version so far (etcd compaction): open
// watches are cut, and a watch from an old version gets 410 Gone, as an
// HTTP status or as an ERROR event (as).
func (f *fakeAPI) expire(as string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.minRV, f.goneAs = f.rv+1, as
	f.cutLocked()
}

// cutWatches aborts every open watch stream (a proxy or apiserver restart).
func (f *fakeAPI) cutWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutLocked()
}

func (f *fakeAPI) cutLocked() {
	close(f.cut)
	f.cut = make(chan struct{})
}

// failWith makes every request fail with code (0: answer again), cutting
// open watches so the next request sees it.
func (f *fakeAPI) failWith(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failCode = code
	f.cutLocked()
}

// stall delays every answer by d (0: answer at once).
func (f *fakeAPI) stall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
	f.cutLocked()
}

func (f *fakeAPI) requestLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *fakeAPI) count(prefix string) int {
	n := 0
	for _, r := range f.requestLog() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": msg})
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	delay, failCode, cut := f.delay, f.failCode, f.cut
	serial := ""
	if len(r.TLS.PeerCertificates) > 0 {
		serial = r.TLS.PeerCertificates[0].SerialNumber.String()
	}
	f.serials = append(f.serials, serial)
	if q.Get("watch") == "1" {
		f.requests = append(f.requests, "watch rv="+q.Get("resourceVersion"))
	} else {
		f.requests = append(f.requests, "list")
	}
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-cut:
			panic(http.ErrAbortHandler)
		}
	}
	if failCode != 0 {
		f.status(w, failCode, "injected failure")
		return
	}
	// Authentication, then the Node authorizer's rule for nodes.
	user := ""
	if len(r.TLS.PeerCertificates) > 0 {
		user = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if user == "" {
		f.status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	name, isNode := strings.CutPrefix(user, nodeUserPrefix)
	if r.URL.Path != "/api/v1/nodes" {
		f.status(w, http.StatusNotFound, "the server could not find the requested resource")
		return
	}
	if sel := q.Get("fieldSelector"); !isNode || sel != "metadata.name="+name || name != f.node {
		f.status(w, http.StatusForbidden, fmt.Sprintf(`nodes is forbidden: User %q cannot list resource "nodes": node %q cannot read all nodes, only its own Node object`, user, name))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "1" {
		f.mu.Lock()
		l := nodeList{Items: []Node{}}
		l.Metadata.ResourceVersion = strconv.Itoa(f.rv)
		if f.obj != nil {
			l.Items = append(l.Items, *f.obj)
		}
		f.mu.Unlock()
		json.NewEncoder(w).Encode(l)
		return
	}
	f.watch(w, r)
}

func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := strconv.Atoi(q.Get("resourceVersion"))
	if err != nil {
		f.status(w, http.StatusBadRequest, "resourceVersion: "+err.Error())
		return
	}
	timeout := time.Hour
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	f.mu.Lock()
	gone := from < f.minRV
	goneAs := f.goneAs
	f.mu.Unlock()
	if gone && goneAs == "status" {
		f.status(w, http.StatusGone, "too old resource version: "+strconv.Itoa(from))
		return
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if gone {
		b, _ := json.Marshal(map[string]any{"type": "ERROR", "object": map[string]any{"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}})
		w.Write(append(b, '\n'))
		return
	}
	timeUp := time.After(timeout)
	sent := from
	for {
		f.mu.Lock()
		var out bytes.Buffer
		for _, ev := range f.history {
			if ev.rv <= sent {
				continue
			}
			if ev.typ == "BOOKMARK" && q.Get("allowWatchBookmarks") != "true" {
				continue
			}
			b, _ := json.Marshal(watchEvent{Type: ev.typ, Object: ev.obj})
			out.Write(append(b, '\n'))
			sent = ev.rv
		}
		changed, cut, end := f.changed, f.cut, f.endAt != 0 && sent >= f.endAt
		f.mu.Unlock()
		if out.Len() > 0 {
			w.Write(out.Bytes())
			w.(http.Flusher).Flush()
		}
		if end {
			return
		}
		select {
		case <-changed:
		case <-cut:
			panic(http.ErrAbortHandler)
		case <-timeUp:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// testPKI is a CA, a server certificate for 127.0.0.1 and "kubernetes",
// and a kubelet client certificate.
type testPKI struct {
	dir     string
	caKey   *ecdsa.PrivateKey
	caCert  *x509.Certificate
	caPEM   []byte
	pool    *x509.CertPool
	server  tls.Certificate
	serial  int64
	nodePEM string // the client certificate and key in one file, as kubeadm's kubelet-client-current.pem
}

func newTestPKI(t *testing.T, node string) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), serial: 1}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.caKey = key
	p.caCert, _ = x509.ParseCertificate(der)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.caCert)
	certPEM, keyPEM := p.issue(t, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth)
	p.server, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p.nodePEM = filepath.Join(p.dir, "kubelet-client-current.pem")
	p.writeClient(t, p.nodePEM, nodeUserPrefix+node)
	return p
}

// issue signs a certificate for cn (a server certificate for 127.0.0.1 and
// "kubernetes" when usage is server auth).
func (p *testPKI) issue(t *testing.T, cn string, orgs []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"kubernetes"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// writeClient writes a client certificate for user, with its key, to path
// (replacing it at once, as the kubelet's rotation does) and returns its
// serial number.
func (p *testPKI) writeClient(t *testing.T, path, user string) string {
	t.Helper()
	c, k := p.issue(t, user, []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(c, k...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(p.serial, 10)
}

// kubeletConf writes a kubeconfig like kubeadm's kubelet.conf for server:
// inline CA, client certificate and key in one file.
func (p *testPKI) kubeletConf(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(p.dir, "kubelet.conf")
	writeFile(t, path, fmt.Sprintf(`apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
preferences: {}
users:
- name: default-auth
  user:
    client-certificate: %s
    client-key: %s
`, base64.StdEncoding.EncodeToString(p.caPEM), server, p.nodePEM, p.nodePEM))
	return path
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stateLog records what a Watcher reports and lets a test wait for a state.
type stateLog struct {
	mu     sync.Mutex
	states []State
	signal chan struct{}
}

func newStateLog() *stateLog { return &stateLog{signal: make(chan struct{}, 1)} }

func (l *stateLog) notify(s State) {
	l.mu.Lock()
	l.states = append(l.states, s)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (l *stateLog) last() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.states) == 0 {
		return State{}
	}
	return l.states[len(l.states)-1]
}

// all returns every state reported so far.
func (l *stateLog) all() []State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]State(nil), l.states...)
}

// waitFor waits (10 s at most) until the last state reported satisfies ok.
func (l *stateLog) waitFor(t *testing.T, what string, ok func(State) bool) State {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := l.last(); ok(s) {
			return s
		}
		select {
		case <-l.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last state %+v", what, l.last())
		}
	}
}

// logBuffer is a slog handler's output a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines at level (INFO, WARN, DEBUG) holding s.
func (b *logBuffer) lines(level, s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, "level="+level) && strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// runWatcher runs a watcher for cfg (with short timeouts unless set) until
// the test ends, and returns its state log and log output.
func runWatcher(t *testing.T, cfg Config) (*stateLog, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	setDefault(&cfg.MinBackoff, 20*time.Millisecond)
	setDefault(&cfg.MaxBackoff, 100*time.Millisecond)
	setDefault(&cfg.RequestTimeout, 2*time.Second)
	setDefault(&cfg.WatchTimeout, 5*time.Second)
	states := newStateLog()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(cfg).Run(ctx, states.notify)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return states, logs
}
