package k8slab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProductDoesNotSeeTheLab keeps the lab's Kubernetes out of the
// product: vipd's go.mod requires nothing of Kubernetes or etcd's server,
// and no package of vipd or vipctl depends on them or on the lab module.
func TestProductDoesNotSeeTheLab(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	forbidden := []string{"k8s.io/", "go.etcd.io/", "vipd.lab/", "github.com/vipd/vipd/lab/"}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forbidden[:2] {
		if strings.Contains(string(gomod), f) {
			t.Errorf("go.mod mentions %s", f)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/vipd/vipd/cmd/vipd", "github.com/vipd/vipd/cmd/vipctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 50 {
		t.Fatalf("go list -deps listed only %d packages: %s", len(pkgs), out)
	}
	for _, p := range pkgs {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("vipd or vipctl depends on %s", p)
			}
		}
	}
}
