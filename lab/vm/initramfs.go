package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// initScript is the guest's /init (busybox sh).
//
//go:embed init.sh
var initScript []byte

// BaseModules are loaded in every VM: the virtio PCI transport and 9p,
// which the guest mounts the host's directories with.
var BaseModules = []string{"virtio_pci", "9pnet_virtio", "9p"}

// Busybox is where Debian's busybox-static installs busybox.
const Busybox = "/bin/busybox"

// CheckBusybox returns an error unless path is a statically linked
// executable (the initramfs has no libc): Debian's busybox-static, not
// busybox.
func CheckBusybox(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("busybox: %w (apt-get install busybox-static)", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the VM needs busybox-static (apt-get install busybox-static)", path)
		}
	}
	return nil
}

// Initramfs returns an initramfs for k holding busybox (from busyboxPath),
// init.sh as /init and the modules in modules plus BaseModules with all
// their dependencies, listed in load order in /etc/modules.order. It is
// cached in k.Dir, keyed by what went into it.
func Initramfs(ctx context.Context, k *Kernel, busyboxPath string, modules []string) (string, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("busybox: %w", err)
	}
	index, err := k.ModuleIndex()
	if err != nil {
		return "", err
	}
	order, err := loadOrder(index, append(append([]string(nil), BaseModules...), modules...))
	if err != nil {
		return "", fmt.Errorf("kernel %s %s: %w", k.Package, k.Version, err)
	}
	h := sha256.New()
	h.Write(bb)
	h.Write(initScript)
	var paths []string
	for _, m := range order {
		paths = append(paths, m.Path)
		fmt.Fprintln(h, m.Path)
	}
	out := filepath.Join(k.Dir, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:16]+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	unlock, err := lockCache(filepath.Dir(k.Dir))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	data, err := k.ReadModules(ctx, paths)
	if err != nil {
		return "", err
	}
	files := []cpioFile{
		{Name: "bin", Dir: true, Mode: 0o755},
		{Name: "bin/busybox", Mode: 0o755, Data: bb},
		{Name: "dev", Dir: true, Mode: 0o755},
		{Name: "etc", Dir: true, Mode: 0o755},
		{Name: "etc/modules.order", Mode: 0o644, Data: []byte("/" + strings.Join(paths, "\n/") + "\n")},
		{Name: "init", Mode: 0o755, Data: initScript},
		{Name: "proc", Dir: true, Mode: 0o755},
		{Name: "sys", Dir: true, Mode: 0o755},
	}
	dirs := map[string]bool{"etc": true}
	for _, p := range paths {
		for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			files = append(files, cpioFile{Name: d, Dir: true, Mode: 0o755})
		}
		files = append(files, cpioFile{Name: p, Mode: 0o644, Data: data[p]})
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, files); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("vm cache: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("vm cache: %w", err)
	}
	return out, nil
}
