package vm

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelMeta is the Debian package whose dependency names the kernel the
// VM boots: Debian's generic amd64 kernel (its modules include bonding,
// 8021q, 9p; the cloud kernel has no 9p).
const KernelMeta = "linux-image-amd64"

// Kernel is a Debian kernel package in the cache: its bzImage and the .deb
// its modules come from.
type Kernel struct {
	// Package and Version name the .deb (linux-image-6.1.0-56-amd64,
	// 6.1.192-2); the cache entry is keyed by both.
	Package, Version string
	// Dir is the cache entry.
	Dir string
	// Image is the kernel (vmlinuz, a bzImage).
	Image string
	// Deb is the package file.
	Deb string
}

// CacheDir is where kernels and initramfs images are kept:
// $VIPD_VM_CACHE, else ~/.cache/vipd-lab/vm (XDG_CACHE_HOME honoured).
func CacheDir() (string, error) {
	if d := os.Getenv("VIPD_VM_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("vm cache: %w", err)
	}
	return filepath.Join(d, "vipd-lab", "vm"), nil
}

// lockCache takes an exclusive lock on dir/lock (creating dir) so that two
// test runs never fill one cache entry at once; the returned func unlocks.
func lockCache(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("vm cache: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// FetchKernel returns the kernel to boot, from the cache or downloaded into
// it: the package KernelMeta depends on (or $VIPD_VM_KERNEL_PACKAGE), in
// the version apt would install, fetched with `apt-get download` and never
// installed. When apt knows no such package (no package lists), the newest
// cached kernel is used. logf reports what it does.
func FetchKernel(ctx context.Context, cacheDir string, logf func(string, ...any)) (*Kernel, error) {
	unlock, err := lockCache(cacheDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	pkg, version, aptErr := kernelCandidate(ctx)
	if aptErr != nil {
		k, err := newestCachedKernel(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("%w; and no cached kernel: %v", aptErr, err)
		}
		logf("vm: %v; using the cached %s %s", aptErr, k.Package, k.Version)
		return k, nil
	}
	k := kernelIn(filepath.Join(cacheDir, pkg+"_"+version), pkg, version)
	if _, err := os.Stat(filepath.Join(k.Dir, "complete")); err == nil {
		return k, nil
	}
	logf("vm: downloading %s %s into %s", pkg, version, k.Dir)
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", pkg+"="+version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apt-get download %s=%s: %v\n%s", pkg, version, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s: want one .deb in %s, found %v", pkg, tmp, debs)
	}
	tk := kernelIn(tmp, pkg, version)
	if err := os.Rename(debs[0], tk.Deb); err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	if err := writeKernelFiles(ctx, tk); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	os.RemoveAll(k.Dir) // an incomplete entry
	if err := os.Rename(tmp, k.Dir); err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	return k, nil
}

func kernelIn(dir, pkg, version string) *Kernel {
	return &Kernel{Package: pkg, Version: version, Dir: dir, Image: filepath.Join(dir, "vmlinuz"),
		Deb: filepath.Join(dir, "kernel.deb")}
}

// kernelCandidate asks apt (its local package lists, no network) which
// kernel package KernelMeta depends on and the version it would get.
func kernelCandidate(ctx context.Context) (pkg, version string, err error) {
	pkg = os.Getenv("VIPD_VM_KERNEL_PACKAGE")
	if pkg == "" {
		out, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelMeta).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("apt-cache depends %s: %v: %s", KernelMeta, err, strings.TrimSpace(string(out)))
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(v, "linux-image-") {
				pkg = v
				break
			}
		}
		if pkg == "" {
			return "", "", fmt.Errorf("apt-cache depends %s names no linux-image package:\n%s", KernelMeta, out)
		}
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "policy", pkg).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache policy %s: %v: %s", pkg, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate: "); ok && v != "(none)" {
			return pkg, v, nil
		}
	}
	return "", "", fmt.Errorf("apt has no candidate for %s (apt-get update?)", pkg)
}

// newestCachedKernel returns the most recently fetched complete entry.
func newestCachedKernel(cacheDir string) (*Kernel, error) {
	marks, _ := filepath.Glob(filepath.Join(cacheDir, "linux-image-*_*", "complete"))
	if len(marks) == 0 {
		return nil, errors.New("none in " + cacheDir)
	}
	sort.Slice(marks, func(i, j int) bool {
		a, _ := os.Stat(marks[i])
		b, _ := os.Stat(marks[j])
		return a.ModTime().After(b.ModTime())
	})
	dir := filepath.Dir(marks[0])
	pkg, version, _ := strings.Cut(filepath.Base(dir), "_")
	return kernelIn(dir, pkg, version), nil
}

// debFiles streams the data archive of deb (dpkg-deb --fsys-tarfile) and
// calls f for every regular file, its name without the leading "./".
func debFiles(ctx context.Context, deb string, f func(name string, r io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	tr := tar.NewReader(bufio.NewReaderSize(out, 1<<20))
	var walkErr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			walkErr = fmt.Errorf("read %s: %w", deb, err)
			break
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := f(strings.TrimPrefix(h.Name, "./"), tr); err != nil {
			walkErr = err
			break
		}
	}
	if walkErr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return walkErr
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v: %s", deb, err, stderr.String())
	}
	return nil
}

// isModule reports whether name (a path in the kernel package) is a
// module: lib/modules/RELEASE/.../*.ko.
func isModule(name string) bool {
	return strings.HasSuffix(name, ".ko") && strings.Contains("/"+name, "/lib/modules/")
}

// writeKernelFiles extracts k's vmlinuz and writes the index of its modules
// (modules.tsv: name, path, dependencies) in one pass over the package.
func writeKernelFiles(ctx context.Context, k *Kernel) error {
	var index []ModuleInfo
	haveImage := false
	err := debFiles(ctx, k.Deb, func(name string, r io.Reader) error {
		switch {
		case strings.HasPrefix(name, "boot/vmlinuz-"):
			f, err := os.Create(k.Image)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			haveImage = true
			return f.Close()
		case isModule(name):
			data, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			m, err := parseModinfo(name, data)
			if err != nil {
				return err
			}
			index = append(index, m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !haveImage {
		return fmt.Errorf("%s has no boot/vmlinuz-*", k.Deb)
	}
	if len(index) == 0 {
		return fmt.Errorf("%s has no kernel modules", k.Deb)
	}
	var b strings.Builder
	for _, m := range index {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", m.Name, m.Path, strings.Join(m.Depends, ","))
	}
	return os.WriteFile(filepath.Join(k.Dir, "modules.tsv"), []byte(b.String()), 0o644)
}

// ModuleIndex reads the module index written when k was fetched.
func (k *Kernel) ModuleIndex() (map[string]ModuleInfo, error) {
	b, err := os.ReadFile(filepath.Join(k.Dir, "modules.tsv"))
	if err != nil {
		return nil, fmt.Errorf("vm cache: %w", err)
	}
	return parseModuleIndex(string(b))
}

func parseModuleIndex(s string) (map[string]ModuleInfo, error) {
	index := map[string]ModuleInfo{}
	for i, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("modules.tsv:%d: want 3 fields, got %q", i+1, line)
		}
		m := ModuleInfo{Name: f[0], Path: f[1]}
		if f[2] != "" {
			m.Depends = strings.Split(f[2], ",")
		}
		index[m.Name] = m
	}
	return index, nil
}

// ReadModules returns the contents of the modules at paths (as in
// ModuleInfo.Path) from k's package.
func (k *Kernel) ReadModules(ctx context.Context, paths []string) (map[string][]byte, error) {
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	got := map[string][]byte{}
	err := debFiles(ctx, k.Deb, func(name string, r io.Reader) error {
		if !want[name] {
			return nil
		}
		data, err := io.ReadAll(r)
		got[name] = data
		return err
	})
	if err != nil {
		return nil, err
	}
	for p := range want {
		if got[p] == nil {
			return nil, fmt.Errorf("%s: no %s", k.Deb, p)
		}
	}
	return got, nil
}
