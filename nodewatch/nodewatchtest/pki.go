package nodewatchtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// NodeUser is the user name of node name's kubelet credentials, the common
// name of its client certificate.
func NodeUser(name string) string { return "system:node:" + name }

// PKI is a cluster CA shaped like kubeadm's: a serving certificate for the
// fake apiserver (valid for 127.0.0.1, localhost and "kubernetes") and a
// kubelet client certificate (NodeUser(node) in system:nodes) with its key
// in one file, as kubeadm's /var/lib/kubelet/pki/kubelet-client-current.pem.
type PKI struct {
	// Dir holds the files.
	Dir string
	// CAPEM is the CA certificate.
	CAPEM []byte
	// ClientPEM is the kubelet client certificate and key file.
	ClientPEM string

	mu     sync.Mutex
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
	pool   *x509.CertPool
	server tls.Certificate
	serial int64
}

// NewPKI makes the CA and certificates in dir for node.
func NewPKI(dir, node string) (*PKI, error) {
	p := &PKI{Dir: dir, ClientPEM: filepath.Join(dir, "kubelet-client-current.pem"), serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	p.caKey = key
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.caCert)
	certPEM, keyPEM, err := p.Issue("kube-apiserver", nil, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	if p.server, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	if _, err := p.WriteClient(p.ClientPEM, NodeUser(node)); err != nil {
		return nil, err
	}
	return p, nil
}

// Issue signs a certificate for cn in orgs and returns it with its key, as
// PEM. A server certificate (usage server auth) is valid for 127.0.0.1,
// localhost and "kubernetes" (kubeadm's apiserver certificates always name
// "kubernetes").
func (p *PKI) Issue(cn string, orgs []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost", "kubernetes"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// WriteClient writes a new client certificate for user (in system:nodes),
// with its key, to path, replacing the file at once as the kubelet's
// certificate rotation does, and returns the certificate's serial number.
func (p *PKI) WriteClient(path, user string) (string, error) {
	c, k, err := p.Issue(user, []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(c, k...), 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return strconv.FormatInt(p.serial, 10), nil
}

// WriteKubeconfig writes to path a kubeconfig like kubeadm's kubelet.conf:
// the CA inline, ClientPEM as client certificate and key, server as the
// apiserver's URL.
func (p *PKI) WriteKubeconfig(path, server string) error {
	return os.WriteFile(path, fmt.Appendf(nil, `apiVersion: v1
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
`, base64.StdEncoding.EncodeToString(p.CAPEM), server, p.ClientPEM, p.ClientPEM), 0o600)
}
