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
// built from ./cmd when it is unset. With $VIPD_LAB_TOOLS set, the helpers
// are taken from that directory instead of built (lab/vm does this: its
// guest has no Go toolchain cache); with both set, nothing is built. It
// needs the go command otherwise; failures stop the test.
func BuildTools(t testing.TB, dir string) Tools {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	pkgs := []string{"github.com/vipd/vipd/lab/netlab/cmd/probe", "github.com/vipd/vipd/lab/netlab/cmd/httpd",
		"github.com/vipd/vipd/lab/netlab/cmd/burn"}
	if lt := os.Getenv("VIPD_LAB_TOOLS"); lt != "" {
		bin, pkgs = lt, nil
		for _, name := range []string{"probe", "httpd", "burn"} {
			if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
				t.Fatalf("netlab: VIPD_LAB_TOOLS=%s: %v", lt, err)
			}
		}
	}
	tools := Tools{Probe: filepath.Join(bin, "probe"), HTTPD: filepath.Join(bin, "httpd"), Burn: filepath.Join(bin, "burn")}
	if vb := os.Getenv("VIPD_BIN"); vb != "" {
		tools.Vipd, tools.Vipctl = filepath.Join(vb, "vipd"), filepath.Join(vb, "vipctl")
		for _, p := range []string{tools.Vipd, tools.Vipctl} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("netlab: VIPD_BIN=%s: %v (run make build)", vb, err)
			}
		}
	} else {
		bin = filepath.Join(dir, "bin")
		pkgs = append(pkgs, "github.com/vipd/vipd/cmd/vipd", "github.com/vipd/vipd/cmd/vipctl")
		tools.Vipd, tools.Vipctl = filepath.Join(bin, "vipd"), filepath.Join(bin, "vipctl")
	}
	if len(pkgs) == 0 {
		return tools
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
