package netlab

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Tools are the binaries a lab runs.
type Tools struct {
	// Vipd and Vipctl come from $VIPD_BIN when set, else they are built.
	Vipd, Vipctl string
	// Probe, HTTPD and Burn are built from lab/netlab/cmd.
	Probe, HTTPD, Burn string
}

// BuildTools builds the lab's helper binaries into dir/bin and locates vipd
// and vipctl: in $VIPD_BIN (make netns-test sets it to the repo's bin/), or
// built from ./cmd when it is unset. It needs the go command; failures stop
// the test.
func BuildTools(t testing.TB, dir string) Tools {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	pkgs := []string{"github.com/vipd/vipd/lab/netlab/cmd/probe", "github.com/vipd/vipd/lab/netlab/cmd/httpd",
		"github.com/vipd/vipd/lab/netlab/cmd/burn"}
	tools := Tools{Probe: filepath.Join(bin, "probe"), HTTPD: filepath.Join(bin, "httpd"), Burn: filepath.Join(bin, "burn")}
	if vb := os.Getenv("VIPD_BIN"); vb != "" {
		tools.Vipd, tools.Vipctl = filepath.Join(vb, "vipd"), filepath.Join(vb, "vipctl")
		for _, p := range []string{tools.Vipd, tools.Vipctl} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("netlab: VIPD_BIN=%s: %v (run make build)", vb, err)
			}
		}
	} else {
		pkgs = append(pkgs, "github.com/vipd/vipd/cmd/vipd", "github.com/vipd/vipd/cmd/vipctl")
		tools.Vipd, tools.Vipctl = filepath.Join(bin, "vipd"), filepath.Join(bin, "vipctl")
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatalf("netlab: %v", err)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", bin + "/"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("netlab: build lab tools: %v\n%s", err, out)
	}
	return tools
}
