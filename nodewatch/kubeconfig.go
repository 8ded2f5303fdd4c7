package nodewatch

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultKubeconfigs returns the kubelet kubeconfigs looked for when none
// is configured, in order: kubeadm's, RKE2's, k3s's, Talos's.
func DefaultKubeconfigs() []string {
	return []string{
		"/etc/kubernetes/kubelet.conf",
		"/var/lib/rancher/rke2/agent/kubelet.kubeconfig",
		"/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
		"/etc/kubernetes/kubeconfig-kubelet",
	}
}

// nodeUserPrefix starts the common name of a kubelet's client certificate
// (system:node:NAME), which names the node the credentials belong to.
const nodeUserPrefix = "system:node:"

// Kubeconfig is what the watcher uses of a kubeconfig file: the current
// context's cluster and user.
type Kubeconfig struct {
	// Path is the file it was read from.
	Path string
	// Server is the apiserver's URL (https://host:port).
	Server string
	// TLSServerName, when set, is the name the server's certificate is
	// checked against instead of the host in Server.
	TLSServerName string
	// Insecure skips the server certificate check
	// (insecure-skip-tls-verify).
	Insecure bool
	// CA holds the PEM certificates the server's certificate must chain to
	// (certificate-authority-data, or the certificate-authority file read);
	// empty: the system's roots.
	CA []byte
	// CertFile and KeyFile are the client certificate and key files, read
	// again when they change (the kubelet rotates its certificate in place).
	// CertData and KeyData are inline ones (client-certificate-data).
	CertFile, KeyFile string
	CertData, KeyData []byte
	// Token is a bearer token; TokenFile a file holding one, read at each
	// connection.
	Token, TokenFile string
}

// kubeconfigFile is the YAML layout of a kubeconfig, the fields read.
type kubeconfigFile struct {
	CurrentContext string         `yaml:"current-context"`
	Clusters       []clusterEntry `yaml:"clusters"`
	Contexts       []contextEntry `yaml:"contexts"`
	Users          []userEntry    `yaml:"users"`
}

type clusterEntry struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server     string `yaml:"server"`
		ServerName string `yaml:"tls-server-name"`
		Insecure   bool   `yaml:"insecure-skip-tls-verify"`
		CAData     string `yaml:"certificate-authority-data"`
		CAFile     string `yaml:"certificate-authority"`
		ProxyURL   string `yaml:"proxy-url"`
	} `yaml:"cluster"`
}

type contextEntry struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster string `yaml:"cluster"`
		User    string `yaml:"user"`
	} `yaml:"context"`
}

type userEntry struct {
	Name string `yaml:"name"`
	User struct {
		CertFile     string    `yaml:"client-certificate"`
		CertData     string    `yaml:"client-certificate-data"`
		KeyFile      string    `yaml:"client-key"`
		KeyData      string    `yaml:"client-key-data"`
		Token        string    `yaml:"token"`
		TokenFile    string    `yaml:"tokenFile"`
		Username     string    `yaml:"username"`
		Exec         yaml.Node `yaml:"exec"`
		AuthProvider yaml.Node `yaml:"auth-provider"`
	} `yaml:"user"`
}

// LoadKubeconfig reads a kubeconfig file: its current context (or its only
// context) names the cluster and the user. Relative file names in it are
// relative to its directory, as for kubectl. Credentials that need a
// plugin (exec, auth-provider) or basic auth are refused.
func LoadKubeconfig(path string) (*Kubeconfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := parseKubeconfig(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	k.Path = path
	return k, nil
}

// named returns the entry of items called name.
func named[T any](items []T, nameOf func(T) string, name string) (T, bool) {
	for _, it := range items {
		if nameOf(it) == name {
			return it, true
		}
	}
	var zero T
	return zero, false
}

func parseKubeconfig(b []byte, dir string) (*Kubeconfig, error) {
	var f kubeconfigFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	ctxName := f.CurrentContext
	if ctxName == "" && len(f.Contexts) == 1 {
		ctxName = f.Contexts[0].Name
	}
	if ctxName == "" {
		return nil, errors.New("no current-context")
	}
	c, ok := named(f.Contexts, func(c contextEntry) string { return c.Name }, ctxName)
	if !ok {
		return nil, fmt.Errorf("context %q not found", ctxName)
	}
	cl, ok := named(f.Clusters, func(c clusterEntry) string { return c.Name }, c.Context.Cluster)
	if !ok {
		return nil, fmt.Errorf("cluster %q not found", c.Context.Cluster)
	}
	k := &Kubeconfig{}
	if err := k.setCluster(cl, dir); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cl.Name, err)
	}
	if c.Context.User == "" {
		return k, nil
	}
	u, ok := named(f.Users, func(u userEntry) string { return u.Name }, c.Context.User)
	if !ok {
		return nil, fmt.Errorf("user %q not found", c.Context.User)
	}
	if err := k.setUser(u, dir); err != nil {
		return nil, fmt.Errorf("user %q: %w", u.Name, err)
	}
	return k, nil
}

func (k *Kubeconfig) setCluster(c clusterEntry, dir string) error {
	cl := c.Cluster
	if cl.ProxyURL != "" {
		return errors.New("proxy-url is not supported")
	}
	if err := checkServer(cl.Server); err != nil {
		return err
	}
	k.Server, k.TLSServerName, k.Insecure = cl.Server, cl.ServerName, cl.Insecure
	var err error
	switch {
	case cl.CAData != "":
		k.CA, err = decodeData("certificate-authority-data", cl.CAData)
	case cl.CAFile != "":
		k.CA, err = os.ReadFile(resolve(dir, cl.CAFile))
	}
	return err
}

func (k *Kubeconfig) setUser(u userEntry, dir string) error {
	us := u.User
	switch {
	case !us.Exec.IsZero():
		return errors.New("exec credential plugins are not supported (use the kubelet's kubeconfig)")
	case !us.AuthProvider.IsZero():
		return errors.New("auth-provider plugins are not supported (use the kubelet's kubeconfig)")
	case us.Username != "":
		return errors.New("basic authentication is not supported (use the kubelet's kubeconfig)")
	}
	k.Token = strings.TrimSpace(us.Token)
	k.TokenFile, k.CertFile, k.KeyFile = resolve(dir, us.TokenFile), resolve(dir, us.CertFile), resolve(dir, us.KeyFile)
	var err error
	if k.CertData, err = decodeData("client-certificate-data", us.CertData); err != nil {
		return err
	}
	if k.KeyData, err = decodeData("client-key-data", us.KeyData); err != nil {
		return err
	}
	if (k.CertFile == "" && k.CertData == nil) != (k.KeyFile == "" && k.KeyData == nil) {
		return errors.New("a client certificate needs both a certificate and a key")
	}
	return nil
}

// checkServer accepts an https URL with a host and no path beyond "/".
func checkServer(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("no server")
	case err != nil:
		return fmt.Errorf("server %q: %w", s, err)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("server %q: want https://HOST[:PORT]", s)
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("server %q: a path prefix is not supported", s)
	}
	return nil
}

// decodeData decodes a kubeconfig's *-data field (base64 of PEM); empty
// gives nil.
func decodeData(field, s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return b, nil
}

// resolve makes a file name from a kubeconfig absolute ("" stays "").
func resolve(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// tlsConfig is the TLS client configuration for k. The client certificate
// is read through certs, so a rotated one is picked up at the next
// connection.
func (k *Kubeconfig) tlsConfig(certs *certLoader) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: k.TLSServerName, InsecureSkipVerify: k.Insecure}
	if len(k.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(k.CA) {
			return nil, fmt.Errorf("kubeconfig %s: no PEM certificate in the certificate authority", k.Path)
		}
		c.RootCAs = pool
	}
	if certs != nil {
		if _, err := certs.get(); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", k.Path, err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return certs.get() }
	}
	return c, nil
}

// certLoader returns a client certificate, reading its files again when
// they changed (the kubelet replaces kubelet-client-current.pem when it
// rotates its certificate). When a changed file does not load (caught in
// the middle of a rotation), the last good certificate is kept.
type certLoader struct {
	certFile, keyFile string
	certData, keyData []byte

	mu    sync.Mutex
	stamp string
	cert  *tls.Certificate
}

func newCertLoader(k *Kubeconfig) *certLoader {
	if k.CertFile == "" && k.CertData == nil {
		return nil
	}
	return &certLoader{certFile: k.CertFile, keyFile: k.KeyFile, certData: k.CertData, keyData: k.KeyData}
}

func (l *certLoader) get() (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stamp := fileStamp(l.certFile) + "|" + fileStamp(l.keyFile)
	if l.cert != nil && stamp == l.stamp {
		return l.cert, nil
	}
	certPEM, keyPEM := l.certData, l.keyData
	var err error
	if l.certFile != "" {
		if certPEM, err = os.ReadFile(l.certFile); err != nil {
			return l.keep(fmt.Errorf("client certificate: %w", err))
		}
	}
	if l.keyFile != "" {
		if keyPEM, err = os.ReadFile(l.keyFile); err != nil {
			return l.keep(fmt.Errorf("client key: %w", err))
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return l.keep(fmt.Errorf("client certificate %s: %w", orInline(l.certFile), err))
	}
	l.cert, l.stamp = &cert, stamp
	return l.cert, nil
}

func (l *certLoader) keep(err error) (*tls.Certificate, error) {
	if l.cert != nil {
		return l.cert, nil
	}
	return nil, err
}

// nodeName is the node the client certificate belongs to (its common name
// is system:node:NAME), or "".
func (l *certLoader) nodeName() string {
	if l == nil {
		return ""
	}
	c, err := l.get()
	if err != nil || c.Leaf == nil {
		return ""
	}
	name, ok := strings.CutPrefix(c.Leaf.Subject.CommonName, nodeUserPrefix)
	if !ok {
		return ""
	}
	return name
}

// fileStamp identifies a file's version: its inode, size and modification
// time ("" when it cannot be read or there is no file).
func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	ino := uint64(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d/%d/%s", ino, fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
}

func orInline(file string) string {
	if file == "" {
		return "(client-certificate-data)"
	}
	return file
}

// sameKubeconfig reports whether a and b describe the same connection, so a
// kubeconfig read again that did not change keeps the open connection.
func sameKubeconfig(a, b *Kubeconfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Path == b.Path && a.Server == b.Server && a.TLSServerName == b.TLSServerName &&
		a.Insecure == b.Insecure && bytes.Equal(a.CA, b.CA) && a.CertFile == b.CertFile && a.KeyFile == b.KeyFile &&
		bytes.Equal(a.CertData, b.CertData) && bytes.Equal(a.KeyData, b.KeyData) &&
		a.Token == b.Token && a.TokenFile == b.TokenFile
}
