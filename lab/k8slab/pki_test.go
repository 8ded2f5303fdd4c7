package k8slab

import (
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"slices"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPKIShapedLikeKubeadm checks the serving certificate's names (the
// ones vipd's documented check relies on: "kubernetes" but not 127.0.0.1)
// and the client identities.
func TestPKIShapedLikeKubeadm(t *testing.T) {
	node := PKINode{Name: "cp-1", IP: netip.MustParseAddr("192.0.2.11")}
	vip := netip.MustParseAddr("192.0.2.10")
	p, err := NewPKI(t.TempDir(), []PKINode{node}, vip)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CACert))
	srv := readCert(t, p.ServingPair("cp-1").Cert)
	for _, name := range []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "192.0.2.11", "192.0.2.10", ServiceIP.String()} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", name, err)
		}
	}
	for _, name := range []string{"127.0.0.1", "localhost", "192.0.2.12"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err == nil {
			t.Errorf("serving certificate verifies for %s: a check of 127.0.0.1 must not pass without tls_server_name", name)
		}
	}
	if !slices.Contains(srv.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("serving certificate usages %v, want server auth", srv.ExtKeyUsage)
	}
	for _, tc := range []struct {
		name string
		id   Identity
	}{{"admin", Admin}, {"node-cp-1", NodeIdentity("cp-1")}} {
		pr, err := p.ClientPair(tc.name, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		c := readCert(t, pr.Cert)
		if c.Subject.CommonName != tc.id.User || !slices.Equal(c.Subject.Organization, tc.id.Groups) {
			t.Errorf("%s: subject %v, want CN %s O %v", tc.name, c.Subject, tc.id.User, tc.id.Groups)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: not a client certificate of the CA: %v", tc.name, err)
		}
	}
	if NodeIdentity("cp-2").User != "system:node:cp-2" || NodeIdentity("cp-2").Groups[0] != "system:nodes" {
		t.Errorf("NodeIdentity = %+v", NodeIdentity("cp-2"))
	}
}
