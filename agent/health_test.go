package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
)

func TestRiseFall(t *testing.T) {
	rf := riseFall{rise: 2, fall: 3}
	steps := []struct {
		ok      bool
		healthy bool
		changed bool
	}{
		{true, false, false}, // starts unhealthy; one success is not enough
		{true, true, true},   // rise reached
		{false, true, false}, // one failure
		{true, true, false},  // success resets the failure run
		{false, true, false},
		{false, true, false},
		{false, false, true}, // fall reached
		{true, false, false},
		{false, false, false}, // failure resets the success run
		{true, false, false},
		{true, true, true},
	}
	for i, st := range steps {
		changed := rf.observe(st.ok)
		if rf.healthy != st.healthy || changed != st.changed {
			t.Fatalf("step %d (ok=%v): healthy=%v changed=%v, want %v %v", i, st.ok, rf.healthy, changed, st.healthy, st.changed)
		}
	}
}

func TestHTTPProbe(t *testing.T) {
	var code atomic.Int32
	code.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	probe, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: srv.URL + "/readyz"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("200: %v", err)
	}
	code.Store(503)
	if err := probe(context.Background()); err == nil {
		t.Errorf("503 passed")
	}
	code.Store(302) // redirects are not followed, and not healthy
	if err := probe(context.Background()); err == nil {
		t.Errorf("302 passed")
	}
	srv.Close()
	if err := probe(context.Background()); err == nil {
		t.Errorf("closed server passed")
	}
}

// TestHTTPProbeKeepsConnection: checks reuse one connection (a handshake
// per interval was most of an idle node's CPU), and a check after the server
// dropped it dials again and passes.
func TestHTTPProbeKeepsConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	probe, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: srv.URL + "/readyz"}, interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := probe(context.Background()); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 checks opened %d connections, want 1", n)
	}
	srv.CloseClientConnections()
	if err := probe(context.Background()); err != nil {
		t.Fatalf("check after the server closed the connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("after the server closed the connection: %d connections in all, want 2", n)
	}
}

func TestCommandProbe(t *testing.T) {
	ok, _ := newProbe(&healthCheck{HealthConfig: config.HealthConfig{Command: []string{"true"}}})
	bad, _ := newProbe(&healthCheck{HealthConfig: config.HealthConfig{Command: []string{"sh", "-c", "echo broken; exit 3"}}})
	if err := ok(context.Background()); err != nil {
		t.Errorf("true: %v", err)
	}
	if err := bad(context.Background()); err == nil {
		t.Errorf("exit 3 passed")
	}
}

// TestSharedHealthCheck: one checker reports to every VIP that shares it.
func TestSharedHealthCheck(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	probe := func(context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("down")
		}
		return nil
	}
	h := &healthCheck{HealthConfig: config.HealthConfig{Rise: 1, Fall: 1}, interval: 5 * time.Millisecond, timeout: time.Second}
	out := make(chan healthResult, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		checkRun{id: 1, vips: []string{"a", "b"}, cfg: h, probe: probe, out: out,
			log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(nil), now: time.Now}.run(ctx)
		close(done)
	}()
	got := map[string]bool{}
	for len(got) < 2 {
		r := <-out
		if !r.Healthy {
			continue
		}
		got[r.VIP] = true
	}
	fail.Store(true)
	down := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(down) < 2 {
		select {
		case r := <-out:
			if !r.Healthy {
				down[r.VIP] = true
			}
		case <-deadline:
			t.Fatalf("unhealthy verdicts for %v only", down)
		}
	}
	cancel()
	<-done
	if calls.Load() == 0 {
		t.Fatal("probe never ran")
	}
}

// testCA makes a CA and a serving certificate issued by it for dnsNames
// only (no IP SAN: like a kubeadm apiserver certificate checked at
// 127.0.0.1), and returns the CA's PEM and the server's certificate.
func testCA(t *testing.T, dnsNames ...string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: dnsNames, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestHTTPSProbeServerName: the kubeadm apiserver's certificate carries
// "kubernetes" but not 127.0.0.1. Checked at https://127.0.0.1 against the
// cluster CA it fails with the x509 reason; with tls_server_name =
// "kubernetes" it passes. A ca_file that does not exist yet (vipd starts
// before kubeadm writes it) fails the check until it appears.
func TestHTTPSProbeServerName(t *testing.T) {
	caPEM, cert := testCA(t, "kubernetes", "kubernetes.default.svc")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	url := srv.URL + "/readyz" // https://127.0.0.1:PORT

	// Without the CA yet: the check fails and says why, then passes once
	// the file exists.
	probe, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: url, CAFile: caFile, TLSServerName: "kubernetes"}, interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Errorf("check before ca_file exists: %v, want an error naming ca_file", err)
	}
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("with tls_server_name = kubernetes: %v", err)
	}

	noName, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: url, CAFile: caFile}, interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := noName(context.Background()); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("without tls_server_name: %v, want the certificate to be refused for 127.0.0.1", err)
	}
	wrongName, _ := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: url, CAFile: caFile, TLSServerName: "etcd"}, interval: time.Second})
	if err := wrongName(context.Background()); err == nil {
		t.Errorf("tls_server_name = etcd passed against a certificate for kubernetes")
	}
}

// TestHealthFailureLogged: a failing check is logged at WARN with its
// reason, at most once per healthFailureLogEvery (with the count left out).
func TestHealthFailureLogged(t *testing.T) {
	var buf syncBuf
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1000, 0)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	probe := func(context.Context) error {
		clock.Add(int64(time.Second))
		return errors.New("x509: certificate is valid for kubernetes, not 127.0.0.1")
	}
	out := make(chan healthResult, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkRun{id: 1, vips: []string{"a"}, cfg: &healthCheck{HealthConfig: config.HealthConfig{Rise: 1, Fall: 1}, interval: time.Millisecond, timeout: time.Second},
			probe: probe, out: out, log: lg, metrics: newMetrics(nil),
			now: func() time.Time { return time.Unix(0, clock.Load()) }}.run(ctx)
	}()
	for clock.Load() < now.Add(65*time.Second).UnixNano() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	logged := strings.Count(buf.String(), "level=WARN msg=\"health check failed\"")
	if logged < 2 || logged > 4 {
		t.Errorf("65 failing checks over 65 s logged %d WARN lines, want one per %v:\n%s", logged, healthFailureLogEvery, buf.String())
	}
	if !strings.Contains(buf.String(), "not 127.0.0.1") || !strings.Contains(buf.String(), "suppressed=") {
		t.Errorf("the warning lacks the reason or the count left out:\n%s", buf.String())
	}
}

// syncBuf is a bytes.Buffer safe for a logger and a test reading it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHTTPSProbeCARotation: a CA file replaced on disk (rotated) is read
// again at the next check.
func TestHTTPSProbeCARotation(t *testing.T) {
	oldCA, _ := testCA(t, "kubernetes")
	newCA, cert := testCA(t, "kubernetes")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, oldCA, 0o644); err != nil {
		t.Fatal(err)
	}
	probe, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{URL: srv.URL, CAFile: caFile, TLSServerName: "kubernetes"}, interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err == nil {
		t.Fatal("a certificate of another CA passed")
	}
	if err := os.WriteFile(caFile, newCA, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("after the CA file was rotated: %v", err)
	}
}

// TestHealthReasonFollowsFailure: while a check keeps failing, a new reason
// is reported (the verdict unchanged), so status says why it fails now.
func TestHealthReasonFollowsFailure(t *testing.T) {
	var calls atomic.Int32
	probe := func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("ca_file: no such file")
		}
		return errors.New("connection refused")
	}
	out := make(chan healthResult, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkRun{id: 1, vips: []string{"a"}, cfg: &healthCheck{HealthConfig: config.HealthConfig{Rise: 2, Fall: 3}, interval: time.Millisecond, timeout: time.Second},
			probe: probe, out: out, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(nil), now: time.Now}.run(ctx)
	}()
	var reasons []string
	for len(reasons) < 2 {
		r := <-out
		if r.Healthy {
			t.Fatalf("healthy verdict from a failing check")
		}
		reasons = append(reasons, r.Err.Error())
	}
	cancel()
	<-done
	if reasons[0] != "ca_file: no such file" || reasons[1] != "connection refused" {
		t.Errorf("reasons sent %q, want the first one and then the new one", reasons)
	}
}
