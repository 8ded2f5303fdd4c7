package k8slab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Binaries are the lab's Kubernetes programs, built from the lab/k8s module.
type Binaries struct {
	// Dir holds them all.
	Dir string
	// APIServer is kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver).
	APIServer string
	// Kubectl is upstream kubectl (lab/k8s/cmd/kubectl).
	Kubectl string
	// Etcd is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain, lab/k8s/cmd/etcd).
	Etcd string
	// Clients is the client-go test clients (lab/k8s/cmd/clients).
	Clients string
	// Built is how long the build took (0 when the cache had them).
	Built time.Duration
}

// programs maps each binary's file name to its package in lab/k8s.
var programs = []struct{ file, pkg string }{
	{"kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"},
	{"kubectl", "vipd.lab/k8s/cmd/kubectl"},
	{"etcd", "vipd.lab/k8s/cmd/etcd"},
	{"clients", "vipd.lab/k8s/cmd/clients"},
}

// CacheDir is where built binaries are kept: $VIPD_LAB_CACHE, else
// $XDG_CACHE_HOME/vipd-lab, else ~/.cache/vipd-lab.
func CacheDir() (string, error) {
	if d := os.Getenv("VIPD_LAB_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "vipd-lab"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: set VIPD_LAB_CACHE: %w", err)
	}
	return filepath.Join(home, ".cache", "vipd-lab"), nil
}

// ModuleDir returns lab/k8s of the vipd checkout the go command runs in
// (the main module's directory, from `go env GOMOD`).
func ModuleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the vipd module (go env GOMOD is %q)", gomod)
	}
	dir := filepath.Join(filepath.Dir(gomod), "lab", "k8s")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("lab module: %w", err)
	}
	return dir, nil
}

// CacheKey identifies a build of the lab module: the Go version, its
// go.mod and go.sum, and every Go file of its own (a change to the clients
// tool rebuilds). The version is the one the build will use: asked in the
// module's directory with the build's environment (GOTOOLCHAIN included, as
// the Makefile exports it: lab/k8s builds with vipd's Go, go1.27.3), so a
// toolchain change is a new key and never a stale binary.
func CacheKey(moduleDir string) (string, error) {
	h := sha256.New()
	goenv := exec.Command("go", "env", "GOVERSION")
	goenv.Dir = moduleDir
	gov, err := goenv.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	fmt.Fprintf(h, "go %s\n", strings.TrimSpace(string(gov)))
	var files []string
	err = filepath.WalkDir(moduleDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if !d.IsDir() && (name == "go.mod" || name == "go.sum" || strings.HasSuffix(name, ".go")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(moduleDir, f)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Build returns the lab's binaries from the cache (CacheDir()/k8s-KEY),
// building them first when the cache does not have this key. Concurrent
// builds wait for each other on a lock file. The go command's build cache
// makes a rebuild after a small change quick; a cold build of
// kube-apiserver takes minutes. log, when not nil, receives what it does.
func Build(log io.Writer) (Binaries, error) {
	if log == nil {
		log = io.Discard
	}
	mod, err := ModuleDir()
	if err != nil {
		return Binaries{}, err
	}
	key, err := CacheKey(mod)
	if err != nil {
		return Binaries{}, err
	}
	cache, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Binaries{}, err
	}
	b := binariesIn(filepath.Join(cache, "k8s-"+key))
	lock, err := os.OpenFile(filepath.Join(cache, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if b.complete() {
		now := time.Now()
		os.Chtimes(b.Dir, now, now) // in use: not pruned
		return b, nil
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return Binaries{}, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/"}
	for _, p := range programs {
		args = append(args, p.pkg)
	}
	fmt.Fprintf(log, "k8slab: building %s (cache %s); a cold build takes several minutes\n", mod, b.Dir)
	start := time.Now()
	cmd := exec.Command("go", args...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("build lab/k8s: %w\n%s", err, out)
	}
	os.RemoveAll(b.Dir) // a partial one
	if err := os.Rename(tmp, b.Dir); err != nil {
		return Binaries{}, err
	}
	b.Built = time.Since(start)
	fmt.Fprintf(log, "k8slab: built in %v\n", b.Built.Round(time.Second))
	if !b.complete() {
		return Binaries{}, fmt.Errorf("build lab/k8s: %s is missing binaries", b.Dir)
	}
	prune(cache, b.Dir, log)
	return b, nil
}

// pruneAfter is how long a cached build nobody used is kept.
const pruneAfter = 7 * 24 * time.Hour

// prune removes the cached builds other than keep that were not used for
// pruneAfter (each is a few hundred MB).
func prune(cache, keep string, log io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(cache, "k8s-*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || d == keep || time.Since(fi.ModTime()) < pruneAfter {
			continue
		}
		fmt.Fprintf(log, "k8slab: removing %s, unused since %s\n", d, fi.ModTime().Format(time.DateOnly))
		os.RemoveAll(d)
	}
}

func binariesIn(dir string) Binaries {
	return Binaries{Dir: dir, APIServer: filepath.Join(dir, "kube-apiserver"), Kubectl: filepath.Join(dir, "kubectl"),
		Etcd: filepath.Join(dir, "etcd"), Clients: filepath.Join(dir, "clients")}
}

func (b Binaries) complete() bool {
	for _, p := range []string{b.APIServer, b.Kubectl, b.Etcd, b.Clients} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}
