package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// vmLabs are the lab packages that need kernel features a host may lack,
// with the modules their VM loads and the probe that tells whether this
// host's kernel has what they need (then make netns-test runs them here
// and no VM is needed).
var vmLabs = []struct {
	pkg     string
	modules []string
	hostHas func() error
}{
	// tcp_diag: vipd lists and closes the VIPs' client connections
	// through sock_diag (package conns).
	{"github.com/vipd/vipd/lab/bondvlan", []string{"bonding", "8021q", "veth", "bridge", "tcp_diag"}, netlab.BondVLANSupport},
}

// tcgSlowdown is netlab.Slowdown in a VM whose CPU QEMU emulates.
const tcgSlowdown = 4

// TestLabsInVM runs each of vmLabs' tests inside a VM booted with
// Debian's kernel when this host's kernel cannot run them (lab/vm's doc
// says how). The lab's tests must all pass there: a test the VM skips
// fails this one, since it means the VM lacks what the lab needs.
//
// VIPD_VM_RUN passes -run to the lab's tests; VIPD_VM_FORCE=1 uses the VM
// even when this kernel could run the lab.
func TestLabsInVM(t *testing.T) {
	for _, lab := range vmLabs {
		t.Run(path.Base(lab.pkg), func(t *testing.T) {
			netlab.SkipUnlessEnabled(t)
			err := lab.hostHas()
			if err == nil && os.Getenv("VIPD_VM_FORCE") != "1" {
				t.Skipf("this kernel runs %s itself (make netns-test does); no VM needed (VIPD_VM_FORCE=1 uses one anyway)", lab.pkg)
			}
			if err != nil && !errors.Is(err, netlab.ErrKernelLacks) {
				t.Fatal(err)
			}
			if err != nil {
				t.Logf("%v: running %s in a VM", err, lab.pkg)
			}
			runInVM(t, lab.pkg, lab.modules)
		})
	}
}

// skipUnlessVM skips t unless this host can boot the VM: amd64, QEMU,
// busybox-static and apt's tools.
func skipUnlessVM(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("lab VM: only on amd64 (Debian's amd64 kernel, %s), not %s", QEMU, runtime.GOARCH)
	}
	for tool, pkg := range map[string]string{QEMU: "qemu-system-x86", "apt-get": "apt", "apt-cache": "apt", "dpkg-deb": "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("lab VM: %s not found (apt-get install %s; .ci/run does)", tool, pkg)
		}
	}
	if err := CheckBusybox(Busybox); err != nil {
		t.Skipf("lab VM: %v", err)
	}
}

func runInVM(t *testing.T, pkg string, modules []string) {
	skipUnlessVM(t)
	accel, why, err := ChooseAccel()
	if err != nil {
		t.Fatal(err)
	}
	timeout := 20 * time.Minute
	if d, ok := t.Deadline(); ok && time.Until(d)-30*time.Second < timeout {
		timeout = time.Until(d) - 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	t0 := time.Now()
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	k, err := FetchKernel(ctx, cache, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	initrd, err := Initramfs(ctx, k, Busybox, modules)
	if err != nil {
		t.Fatal(err)
	}
	tKernel := time.Since(t0)

	// The share: the lab's test binary and the binaries it runs.
	share, err := os.MkdirTemp("", "vipd-vm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("VIPD_KEEP_LAB") == "1" {
			t.Logf("lab VM: files kept in %s", share)
			return
		}
		os.RemoveAll(share)
	})
	t1 := time.Now()
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", filepath.Join(share, "lab.test"), pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", pkg, err, out)
	}
	tools := netlab.BuildTools(t, share)
	bin := filepath.Join(share, "bin")
	for _, p := range []string{tools.Vipd, tools.Vipctl} {
		if filepath.Dir(p) != bin {
			if out, err := exec.Command("cp", p, bin+"/").CombinedOutput(); err != nil {
				t.Fatalf("cp %s: %v: %s", p, err, out)
			}
		}
	}
	tBuild := time.Since(t1)

	run := ""
	if r := os.Getenv("VIPD_VM_RUN"); r != "" {
		run = " -test.run '" + strings.ReplaceAll(r, "'", "") + "'"
	}
	// The lab's own timeout fires before ours so that it reports which test
	// hung.
	inner := timeout - 3*time.Minute
	// An emulated CPU runs everything several times slower: the lab
	// scales the bounds that measure the machine (netlab.Slowdown). A CI
	// run saw a withdraw's client gap of 1.08 s there, and an httpd not
	// answering 5 s after its start, where this host's labs see no gap and
	// a few milliseconds.
	slowdown := 1
	if accel == TCG {
		slowdown = tcgSlowdown
	}
	job := fmt.Sprintf(`export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
export VIPD_NETNS_TESTS=1 VIPD_BIN=/vm/bin VIPD_LAB_TOOLS=/vm/bin VIPD_LAB_SLOWDOWN=%d
cd /tmp
exec /vm/lab.test -test.v -test.count=1 -test.timeout=%s%s
`, slowdown, inner.Round(time.Second), run)
	t.Logf("lab VM: %s, %s %s (kernel and initramfs ready in %v), lab built in %v; booting",
		why, k.Package, k.Version, tKernel.Round(time.Millisecond), tBuild.Round(time.Millisecond))
	res, err := Run(ctx, Config{
		Kernel: k.Image, Initramfs: initrd, Accel: accel, Share: share, Job: job,
		Console: func(line string) { t.Log("vm| " + line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab VM: booted in %v, ran %v in all; %s exited %d", res.Boot.Round(time.Millisecond),
		res.Total.Round(time.Millisecond), path.Base(pkg), res.Exit)
	pass, skip, fail := topLevelResults(res.Output)
	switch {
	case res.Exit != 0 || len(fail) > 0:
		t.Errorf("%s failed in the VM (exit %d): %s", pkg, res.Exit, strings.Join(fail, ", "))
		// Again at the end, where a CI log cut in the middle still shows it.
		for _, name := range fail {
			t.Errorf("what %s said last in the VM:\n%s", name, tail(res.Output, name, 10))
		}
	case len(pass) == 0:
		t.Errorf("%s passed no test in the VM", pkg)
	case len(skip) > 0:
		t.Errorf("%s skipped %s in the VM, which should provide all it needs", pkg, strings.Join(skip, ", "))
	default:
		t.Logf("%s in the VM: passed %s", pkg, strings.Join(pass, ", "))
	}
}

var resultLine = regexp.MustCompile(`^--- (PASS|SKIP|FAIL): (\S+) `)

// topLevelResults reads go test -v output: the top-level tests that
// passed, were skipped and failed.
func topLevelResults(out string) (pass, skip, fail []string) {
	for _, line := range strings.Split(out, "\n") {
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			pass = append(pass, m[2])
		case "SKIP":
			skip = append(skip, m[2])
		case "FAIL":
			fail = append(fail, m[2])
		}
	}
	return pass, skip, fail
}

// testLine is a line a test printed itself (t.Log, t.Error), not a log it
// dumped: "    name_test.go:NN: ...".
var testLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)

// tail returns the last n lines the top-level test name printed itself
// (testLine) before its result line, and that line.
func tail(out, name string, n int) string {
	var block []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "=== RUN   "+name:
			in, block = true, nil
		case in && strings.HasPrefix(line, "--- FAIL: "+name+" "):
			in = false
			if len(block) > n {
				block = block[len(block)-n:]
			}
			block = append(block, line)
		case in && testLine.MatchString(line):
			block = append(block, line)
		}
	}
	return strings.Join(block, "\n")
}
