package k8slab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// ServiceCIDR is the apiservers' --service-cluster-ip-range: a
// documentation range (nothing routes to it; only the kubernetes Service
// takes its first address, which the serving certificates name as kubeadm's
// do).
var ServiceCIDR = netip.MustParsePrefix("198.51.100.0/24")

// ServiceIP is the kubernetes Service's cluster IP: ServiceCIDR's first
// address.
var ServiceIP = ServiceCIDR.Addr().Next()

// ServerName is the name vipd's health check verifies the local
// apiserver's certificate against (tls_server_name), as docs/bootstrap.md
// recommends.
const ServerName = "kubernetes"

// Identity is a client certificate's subject: the user (CN) and its groups
// (O), as the apiserver reads them.
type Identity struct {
	User   string
	Groups []string
}

// Admin is kubeadm's super-admin identity (super-admin.conf): in
// system:masters, authorized for everything without RBAC.
var Admin = Identity{User: "kubernetes-admin", Groups: []string{"system:masters"}}

// NodeIdentity is the identity of node name's kubelet, which the Node
// authorizer knows: system:node:NAME in system:nodes.
func NodeIdentity(name string) Identity {
	return Identity{User: "system:node:" + name, Groups: []string{"system:nodes"}}
}

// PKINode is a control-plane node the PKI issues a serving certificate for.
type PKINode struct {
	Name string
	IP   netip.Addr
}

// PKI is the files of a kubeadm-shaped cluster PKI, written by NewPKI: one
// cluster CA; per node a serving certificate for kube-apiserver; client
// certificates; the service-account key pair. Keys are ECDSA P-256 (kubeadm's
// encryptionAlgorithm ECDSA-P256): cheaper handshakes on the lab's two CPUs
// than kubeadm's default RSA-2048, with the same names.
type PKI struct {
	// Dir holds every file.
	Dir string
	// CACert is the cluster CA (ca.crt): vipd's health check ca_file, every
	// client's trust anchor, the apiservers' --client-ca-file.
	CACert string
	// SAKey and SAPub are the service-account signing key pair (sa.key,
	// sa.pub).
	SAKey, SAPub string

	caCert *x509.Certificate
	caKey  crypto.Signer
}

// Pair is a certificate and its key, as file paths.
type Pair struct{ Cert, Key string }

// NewPKI creates the CA and service-account keys in dir, and a serving
// certificate for every node (ServingPair), whose SANs are what kubeadm
// puts in apiserver.crt: the node name, kubernetes, kubernetes.default,
// kubernetes.default.svc, kubernetes.default.svc.cluster.local, ServiceIP,
// the node address and the VIP (kubeadm's controlPlaneEndpoint), and not
// 127.0.0.1: a client of 127.0.0.1 must verify another name, as vipd's
// tls_server_name does.
func NewPKI(dir string, nodes []PKINode, vip netip.Addr) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CACert: filepath.Join(dir, "ca.crt"),
		SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubernetes"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.caKey = caKey
	if err := writePEM(p.CACert, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, "ca.key"), caKey); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.SAPub, "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		tmpl := &x509.Certificate{
			Subject: pkix.Name{CommonName: "kube-apiserver"},
			DNSNames: []string{n.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
			IPAddresses: []net.IP{ServiceIP.AsSlice(), n.IP.AsSlice(), vip.AsSlice()},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if _, err := p.issue("apiserver-"+n.Name, tmpl); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// ServingPair is node name's kube-apiserver serving certificate
// (apiserver.crt on that node).
func (p *PKI) ServingPair(node string) Pair { return p.pair("apiserver-" + node) }

// ClientPair issues (once; later calls return the files) a client
// certificate for id, named name in Dir.
func (p *PKI) ClientPair(name string, id Identity) (Pair, error) {
	if _, err := os.Stat(p.pair(name).Cert); err == nil {
		return p.pair(name), nil
	}
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.User, Organization: id.Groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p *PKI) pair(name string) Pair {
	return Pair{Cert: filepath.Join(p.Dir, name+".crt"), Key: filepath.Join(p.Dir, name+".key")}
}

// issue signs tmpl (subject, names and usages filled in) with the CA and
// writes name.crt and name.key.
func (p *PKI) issue(name string, tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return Pair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("issue %s: %w", name, err)
	}
	pr := p.pair(name)
	if err := writePEM(pr.Cert, "CERTIFICATE", der, 0o644); err != nil {
		return Pair{}, err
	}
	if err := writeKey(pr.Key, key); err != nil {
		return Pair{}, err
	}
	return pr, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
