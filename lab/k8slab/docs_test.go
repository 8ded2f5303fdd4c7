package k8slab

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestLabHealthCheckIsTheDocumentedOne reads the kubeadm [vip.health]
// example of the README and of docs/bootstrap.md and checks that the lab's
// check (DocumentedVIP) is that one: the same url and tls_server_name, a
// ca_file that is the cluster CA (kubeadm's ca.crt), no other key.
func TestLabHealthCheckIsTheDocumentedOne(t *testing.T) {
	cp := &ControlPlane{PKI: &PKI{CACert: "/lab/pki/ca.crt"}}
	lab := cp.DocumentedVIP("apiserver", ServiceIP)
	block := regexp.MustCompile("(?s)```toml\n(.*?)```")
	for _, doc := range []string{"README.md", "docs/bootstrap.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		m := block.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no toml block", doc)
		}
		var cfg struct {
			VIP []struct {
				Health map[string]any `toml:"health"`
			} `toml:"vip"`
		}
		if _, err := toml.Decode(string(m[1]), &cfg); err != nil {
			t.Fatalf("%s: first toml block: %v", doc, err)
		}
		if len(cfg.VIP) != 1 || cfg.VIP[0].Health == nil {
			t.Fatalf("%s: first toml block has no [vip.health]: %s", doc, m[1])
		}
		h := cfg.VIP[0].Health
		if h["url"] != lab.HealthURL || h["tls_server_name"] != lab.HealthTLSServerName || len(h) != 3 {
			t.Errorf("%s recommends %v; the lab checks url %q, tls_server_name %q, ca_file %q", doc, h, lab.HealthURL, lab.HealthTLSServerName, lab.HealthCAFile)
		}
		if ca, _ := h["ca_file"].(string); filepath.Base(ca) != filepath.Base(lab.HealthCAFile) {
			t.Errorf("%s: ca_file %q, the lab's is the cluster CA %s", doc, ca, lab.HealthCAFile)
		}
	}
}
