package nodewatch

import (
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// TestLoadKubeconfigKubeadm: kubeadm's kubelet.conf after the kubelet's
// bootstrap: inline CA, the rotating client certificate file for both
// certificate and key, the VIP as server.
func TestLoadKubeconfigKubeadm(t *testing.T) {
	pki := newPKI(t, "cp-1")
	k, err := LoadKubeconfig(kubeletConf(t, pki, "https://192.0.2.10:6443"))
	if err != nil {
		t.Fatal(err)
	}
	if k.Server != "https://192.0.2.10:6443" || string(k.CA) != string(pki.CAPEM) || k.CertFile != pki.ClientPEM || k.KeyFile != pki.ClientPEM {
		t.Errorf("kubeconfig %+v", k)
	}
	certs := newCertLoader(k)
	if _, err := k.tlsConfig(certs); err != nil {
		t.Fatal(err)
	}
	if got := certs.nodeName(); got != "cp-1" {
		t.Errorf("node name from the certificate %q; want cp-1", got)
	}
}

// TestLoadKubeconfigRKE2: RKE2's agent kubelet.kubeconfig: CA, certificate
// and key as files, the supervisor's local address as server.
func TestLoadKubeconfigRKE2(t *testing.T) {
	pki := newPKI(t, "server-1")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "server-ca.crt"), string(pki.CAPEM))
	cert, key, err := pki.Issue(nodewatchtest.NodeUser("server-1"), []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "client-kubelet.crt"), string(cert))
	writeFile(t, filepath.Join(dir, "client-kubelet.key"), string(key))
	path := filepath.Join(dir, "kubelet.kubeconfig")
	writeFile(t, path, strings.ReplaceAll(`apiVersion: v1
clusters:
- cluster:
    server: https://127.0.0.1:6443
    certificate-authority: DIR/server-ca.crt
  name: local
contexts:
- context:
    cluster: local
    namespace: default
    user: user
  name: Default
current-context: Default
kind: Config
preferences: {}
users:
- name: user
  user:
    client-certificate: DIR/client-kubelet.crt
    client-key: DIR/client-kubelet.key
`, "DIR", dir))
	k, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Server != "https://127.0.0.1:6443" || string(k.CA) != string(pki.CAPEM) || k.KeyFile != filepath.Join(dir, "client-kubelet.key") {
		t.Errorf("kubeconfig %+v", k)
	}
	if got := newCertLoader(k).nodeName(); got != "server-1" {
		t.Errorf("node name %q; want server-1", got)
	}
}

func TestLoadKubeconfigForms(t *testing.T) {
	pki := newPKI(t, "cp-1")
	ca := base64.StdEncoding.EncodeToString(pki.CAPEM)
	certPEM, keyPEM, err := pki.Issue(nodewatchtest.NodeUser("cp-1"), nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, doc, err string
		check          func(t *testing.T, k *Kubeconfig)
	}{
		{name: "relative paths are relative to the file", doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443", certificate-authority: ca.crt, tls-server-name: kubernetes}}]
users: [{name: u, user: {client-certificate: pki/c.pem, client-key: pki/c.pem}}]`,
			check: func(t *testing.T, k *Kubeconfig) {
				if !strings.HasSuffix(k.CertFile, "/pki/c.pem") || !filepath.IsAbs(k.CertFile) || k.TLSServerName != "kubernetes" {
					t.Errorf("%+v", k)
				}
			}},
		{name: "inline certificate, the only context without current-context", doc: `
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://[2001:db8::10]:6443", certificate-authority-data: ` + ca + `}}]
users: [{name: u, user: {client-certificate-data: ` + base64.StdEncoding.EncodeToString(certPEM) + `, client-key-data: ` + base64.StdEncoding.EncodeToString(keyPEM) + `}}]`,
			check: func(t *testing.T, k *Kubeconfig) {
				if newCertLoader(k).nodeName() != "cp-1" {
					t.Errorf("inline certificate not read: %+v", k)
				}
			}},
		{name: "token file", doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]
users: [{name: u, user: {tokenFile: token}}]`,
			check: func(t *testing.T, k *Kubeconfig) {
				if !strings.HasSuffix(k.TokenFile, "/token") {
					t.Errorf("%+v", k)
				}
			}},
		{name: "exec plugin", err: `exec credential plugins are not supported`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]
users: [{name: u, user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}}]`},
		{name: "auth provider", err: `auth-provider plugins are not supported`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]
users: [{name: u, user: {auth-provider: {name: oidc}}}]`},
		{name: "basic auth", err: `basic authentication is not supported`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]
users: [{name: u, user: {username: admin, password: secret}}]`},
		{name: "plain http", err: `want https://HOST[:PORT]`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "http://cp.example:8080"}}]`},
		{name: "proxy", err: `proxy-url is not supported`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443", proxy-url: "http://proxy:3128"}}]`},
		{name: "missing context", err: `context "d" not found`, doc: `
current-context: d
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]`},
		{name: "no context at all", err: `no current-context`, doc: `
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]`},
		{name: "missing cluster", err: `cluster "k" not found`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]`},
		{name: "missing user", err: `user "u" not found`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]`},
		{name: "certificate without key", err: `needs both a certificate and a key`, doc: `
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://cp.example:6443"}}]
users: [{name: u, user: {client-certificate: c.pem}}]`},
		{name: "not YAML", err: `yaml`, doc: "clusters: [\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "ca.crt"), string(pki.CAPEM))
			path := filepath.Join(dir, "config")
			writeFile(t, path, c.doc)
			k, err := LoadKubeconfig(path)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %v; want one naming %s and saying %q", err, path, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, k)
		})
	}
}

// TestCertLoaderKeepsLastGood: a certificate file caught half-written
// during a rotation does not lose the certificate already loaded.
func TestCertLoaderKeepsLastGood(t *testing.T) {
	pki := newPKI(t, "cp-1")
	l := &certLoader{certFile: pki.ClientPEM, keyFile: pki.ClientPEM}
	first, err := l.get()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pki.ClientPEM, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := l.get()
	if err != nil || again != first {
		t.Errorf("half-written file: %v, same certificate %v; want the last good one", err, again == first)
	}
	serial, err := pki.WriteClient(pki.ClientPEM, nodewatchtest.NodeUser("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	third, err := l.get()
	if err != nil || third.Leaf.SerialNumber.String() != serial {
		t.Errorf("rotated file not loaded: %v", err)
	}
}

// TestValidate: the fields a configuration file sets are checked here, once,
// and each problem names its field.
func TestValidate(t *testing.T) {
	if errs := (Config{Kubeconfigs: DefaultKubeconfigs(), NodeName: "cp-1.example", Server: "https://127.0.0.1:6443", TLSServerName: "kubernetes"}).Validate(); errs != nil {
		t.Errorf("a good configuration: %v", errs)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Kubeconfigs: []string{"kubelet.conf"}}, "kubeconfig"},
		{Config{NodeName: "CP_1"}, "node_name"},
		{Config{NodeName: "-cp"}, "node_name"},
		{Config{Server: "http://127.0.0.1:6443"}, "server"},
		{Config{Server: "https://192.0.2.1:6443/k8s"}, "server"},
		{Config{TLSServerName: "kube rnetes"}, "tls_server_name"},
	} {
		errs := tc.cfg.Validate()
		var fe *FieldError
		if len(errs) != 1 || !errors.As(errs[0], &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want one problem with %s", tc.cfg, errs, tc.field)
		}
	}
}

// TestFindKubeconfig: the first path that exists, as the watcher reads it.
func TestFindKubeconfig(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if got := FindKubeconfig([]string{a, b}); got != "" {
		t.Errorf("none exists: %q", got)
	}
	writeFile(t, b, "x")
	if got := FindKubeconfig([]string{a, b}); got != b {
		t.Errorf("got %q, want %q", got, b)
	}
}

// TestAccessHint: a kubeconfig, client certificate or token the process
// may not read fails with the AccessHint added (vipd names its drop-in);
// other errors, and no hint, stay as they are.
func TestAccessHint(t *testing.T) {
	const hint = "user vipd cannot read it: link the drop-in"
	w := New(Config{AccessHint: hint})
	denied := &fs.PathError{Op: "open", Path: "/etc/kubernetes/kubelet.conf", Err: syscall.EACCES}
	if got := w.hint(fmt.Errorf("kubeconfig: %w", denied)).Error(); got != "kubeconfig: open /etc/kubernetes/kubelet.conf: permission denied ("+hint+")" {
		t.Errorf("permission denied: %q", got)
	}
	if got := w.hint(fmt.Errorf("x: %w", syscall.ENOENT)).Error(); strings.Contains(got, hint) {
		t.Errorf("not a permission error, still hinted: %q", got)
	}
	if got := New(Config{}).hint(denied).Error(); got != denied.Error() {
		t.Errorf("no hint configured: %q", got)
	}

	// The real files, for a process that cannot read them (as root it can).
	if os.Geteuid() == 0 {
		t.Skip("root reads any file: the rest needs a user without CAP_DAC_OVERRIDE (make systemd-test shows it under the packaged unit)")
	}
	pki := newPKI(t, "cp-1")
	conf := kubeletConf(t, pki, "https://192.0.2.10:6443")
	for _, f := range []string{conf, pki.ClientPEM} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := os.Chmod(f, 0); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(f, 0o600)
			w := New(Config{Kubeconfigs: []string{conf}, AccessHint: hint})
			err := w.connect()
			if err == nil || !errors.Is(err, fs.ErrPermission) || !strings.HasSuffix(err.Error(), "("+hint+")") || !strings.Contains(err.Error(), f) {
				t.Errorf("connect with %s unreadable: %v", f, err)
			}
		})
	}
}
