package nodewatch

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// TestShapesKubeconfig: each distribution's kubelet kubeconfig, as the
// distribution writes it and where (nodewatchtest/shapes: kubeadm's
// /etc/kubernetes/kubelet.conf, RKE2's and k3s's kubelet.kubeconfig,
// Talos's kubeconfig-kubelet), is among the files looked for by default,
// is found there, loads, and names its node through the client
// certificate (system:node:NAME).
func TestShapesKubeconfig(t *testing.T) {
	for _, s := range nodewatchtest.Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			if !slices.Contains(DefaultKubeconfigs(), s.KubeconfigPath) {
				t.Errorf("%s is not among the kubeconfigs looked for by default: %v", s.KubeconfigPath, DefaultKubeconfigs())
			}
			root := t.TempDir()
			pki := newPKI(t, s.NodeName)
			path, err := s.Install(root, pki, "")
			if err != nil {
				t.Fatal(err)
			}
			var under []string
			for _, p := range DefaultKubeconfigs() {
				under = append(under, root+p)
			}
			if got := FindKubeconfig(under); got != path {
				t.Errorf("found %q, want %q", got, path)
			}
			k, err := LoadKubeconfig(path)
			if err != nil {
				t.Fatal(err)
			}
			if k.Server == "" || len(k.CA) == 0 || k.CertFile == "" || k.KeyFile == "" || !filepath.IsAbs(k.CertFile) {
				t.Errorf("kubeconfig %+v", k)
			}
			certs := newCertLoader(k)
			if _, err := k.tlsConfig(certs); err != nil {
				t.Fatal(err)
			}
			if got := certs.nodeName(); got != s.NodeName {
				t.Errorf("node name from the client certificate %q, want %q", got, s.NodeName)
			}
		})
	}
}

// shapeNode is a distribution's control-plane Node as the watcher reads it
// from the apiserver's JSON.
func shapeNode(t *testing.T, s nodewatchtest.Shape) *Node {
	t.Helper()
	var n Node
	if err := json.Unmarshal(s.NodeJSON(), &n); err != nil {
		t.Fatal(err)
	}
	if n.Metadata.Name != s.NodeName {
		t.Fatalf("%s: Node %q", s.Name, n.Metadata.Name)
	}
	return &n
}
