package nodewatchtest

import (
	"crypto/x509"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// shapes holds each distribution's control-plane Node and kubelet
// kubeconfig, as the distribution writes them; every file names, in a
// comment, the source file of the project that writes what it holds.
//
//go:embed shapes
var shapes embed.FS

// Shape is one distribution's control-plane node as it is on a healthy
// cluster: its Node object and its kubelet's kubeconfig.
type Shape struct {
	// Name is the distribution: kubeadm, rke2, k3s, talos.
	Name string
	// NodeName is the fixture Node's name.
	NodeName string
	// KubeconfigPath is where the distribution writes the kubelet's
	// kubeconfig on the host.
	KubeconfigPath string
	// Kubeconfig is that file's text. "CA_DATA" in it stands for the
	// cluster CA's PEM, base64; the files it names are at their real paths.
	Kubeconfig string

	node []byte // the Node as JSON
}

// Shapes returns every distribution's shape, kubeadm's first.
func Shapes() []Shape {
	list := []struct{ name, node, nodeFile, kubeconfig, path string }{
		{"kubeadm", "cp-1", "kubeadm.yaml", "kubeadm-kubelet.conf", "/etc/kubernetes/kubelet.conf"},
		{"rke2", "server-1", "rke2.yaml", "rke2-kubelet.kubeconfig", "/var/lib/rancher/rke2/agent/kubelet.kubeconfig"},
		{"k3s", "server-1", "k3s.yaml", "k3s-kubelet.kubeconfig", "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"},
		{"talos", "talos-cp-1", "talos.yaml", "talos-kubeconfig-kubelet", "/etc/kubernetes/kubeconfig-kubelet"},
	}
	var out []Shape
	for _, l := range list {
		node, err := nodeJSON("shapes/" + l.nodeFile)
		if err != nil {
			panic(err) // embedded at build time: a broken file fails every test at once
		}
		kc, err := shapes.ReadFile("shapes/" + l.kubeconfig)
		if err != nil {
			panic(err)
		}
		out = append(out, Shape{Name: l.name, NodeName: l.node, KubeconfigPath: l.path, Kubeconfig: string(kc), node: node})
	}
	return out
}

// ShapeNamed returns the shape of the distribution name.
func ShapeNamed(name string) Shape {
	for _, s := range Shapes() {
		if s.Name == name {
			return s
		}
	}
	panic("nodewatchtest: no shape " + name)
}

// nodeJSON reads a Node fixture (YAML, as kubectl shows it) as the JSON the
// apiserver sends.
func nodeJSON(path string) ([]byte, error) {
	b, err := shapes.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return json.Marshal(obj)
}

// NodeJSON is the Node as the apiserver sends it.
func (s Shape) NodeJSON() []byte { return append([]byte(nil), s.node...) }

// Node returns a fresh copy of the Node as JSON objects (map[string]any).
func (s Shape) Node() map[string]any {
	var obj map[string]any
	if err := json.Unmarshal(s.node, &obj); err != nil {
		panic(err)
	}
	return obj
}

// Labels are the Node's labels, as the distribution sets them (a fresh
// copy).
func (s Shape) Labels() map[string]any { return Field(s.Node(), "metadata", "labels") }

// Annotations are the Node's annotations, as the distribution sets them
// (a fresh copy).
func (s Shape) Annotations() map[string]any { return Field(s.Node(), "metadata", "annotations") }

// Taints are the Node's taints, as the distribution sets them (a fresh
// copy; none: nil).
func (s Shape) Taints() []any {
	t, _ := Field(s.Node(), "spec")["taints"].([]any)
	return t
}

// KubeconfigFor is the kubeconfig's text with the cluster CA filled in and
// every absolute file it names moved under root (root+"/var/lib/...").
func (s Shape) KubeconfigFor(root string, caPEM []byte) string {
	text := strings.ReplaceAll(s.Kubeconfig, "CA_DATA", base64.StdEncoding.EncodeToString(caPEM))
	for _, dir := range []string{"/var/lib/", "/etc/kubernetes/"} {
		text = strings.ReplaceAll(text, ": "+dir, ": "+root+dir)
	}
	return text
}

// Files returns the files the kubeconfig names: the CA file (none when the
// CA is inline), and the client certificate and key (the same file when
// the kubelet keeps both in one).
func (s Shape) Files() (ca, cert, key string) {
	for _, line := range strings.Split(s.Kubeconfig, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch k {
		case "certificate-authority":
			ca = v
		case "client-certificate":
			cert = v
		case "client-key":
			key = v
		}
	}
	return ca, cert, key
}

// Shape makes the Node look as the distribution makes it: its labels,
// annotations and taints are set (kubeadm's mark-control-plane phase
// labelling and tainting a Node its kubelet registered a moment before).
func (s *Server) Shape(sh Shape) {
	s.Set(func(n map[string]any) {
		for k, v := range sh.Labels() {
			Field(n, "metadata", "labels")[k] = v
		}
		for k, v := range sh.Annotations() {
			Field(n, "metadata", "annotations")[k] = v
		}
		if t := sh.Taints(); t != nil {
			Field(n, "spec")["taints"] = t
		}
	})
}

// Install writes the kubelet's kubeconfig under root as the distribution
// does (at root+KubeconfigPath), with the files it names: the CA from pki,
// and a client certificate of pki for system:node:NodeName (certificate
// and key in one file where the distribution keeps them so). server, when
// set, replaces the kubeconfig's server URL. It returns the kubeconfig's
// path.
func (s Shape) Install(root string, pki *PKI, server string) (string, error) {
	text := s.KubeconfigFor(root, pki.CAPEM)
	if server != "" {
		lines := strings.Split(text, "\n")
		for i, l := range lines {
			if k, _, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && k == "server" {
				lines[i] = l[:strings.Index(l, "server:")] + "server: " + server
			}
		}
		text = strings.Join(lines, "\n")
	}
	ca, cert, key := s.Files()
	c, k, err := pki.Issue(NodeUser(s.NodeName), []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{root + s.KubeconfigPath: []byte(text)}
	if ca != "" {
		files[root+ca] = pki.CAPEM
	}
	if cert == key {
		files[root+cert] = append(c, k...)
	} else {
		files[root+cert], files[root+key] = c, k
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", err
		}
	}
	return root + s.KubeconfigPath, nil
}
