package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// toolsPrefix starts the name of the directory a test process builds the
// lab's tools into, in the system's temporary directory; its PID follows.
const toolsPrefix = "vipd-lab-tools-"

// shared holds the tools every lab of this test process runs: built once
// (BuildTools into ProcessToolsDir), not once per lab. A go build, even
// with every package cached, links three or five binaries: 3 to 6 s on two
// busy CPUs, for each of the dozens of labs of a make test.
var shared struct {
	mu    sync.Mutex
	tools *Tools
}

// SharedTools returns the tools of this test process, built on the first
// call (BuildTools into ProcessToolsDir); a failed build fails t and is
// tried again on the next call.
func SharedTools(t testing.TB) Tools {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.tools == nil {
		dir, err := ProcessToolsDir()
		if err != nil {
			t.Fatalf("netlab: %v", err)
		}
		tools := BuildTools(t, dir)
		shared.tools = &tools
	}
	return *shared.tools
}

// ProcessToolsDir creates (if need be) and returns this process's tools
// directory, toolsPrefix and the PID in the system's temporary directory.
// It first removes the directories of processes that have ended, so a test
// process leaves at most its own behind.
func ProcessToolsDir() (string, error) {
	tmp := os.TempDir()
	old, _ := filepath.Glob(filepath.Join(tmp, toolsPrefix+"*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), toolsPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
	dir := filepath.Join(tmp, fmt.Sprintf("%s%d", toolsPrefix, os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("lab tools directory: %w", err)
	}
	return dir, nil
}
