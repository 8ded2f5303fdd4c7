package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// QEMU is the emulator the VM runs in (Debian: qemu-system-x86).
const QEMU = "qemu-system-x86_64"

// Accel is how QEMU runs the guest's CPUs.
type Accel string

const (
	// KVM runs them on the host's CPUs through /dev/kvm.
	KVM Accel = "kvm"
	// TCG translates their code (QEMU's emulator, one host thread per
	// guest CPU): several times slower, but needs nothing from the host.
	TCG Accel = "tcg"
)

// KVM ioctls (linux/kvm.h).
const (
	kvmGetAPIVersion = 0xAE00 // _IO(KVMIO, 0x00)
	kvmCreateVM      = 0xAE01 // _IO(KVMIO, 0x01)
	kvmAPIVersion    = 12
)

// CheckKVM returns nil when /dev/kvm can run a stock kernel: it opens,
// speaks KVM API 12, creates a VM, and is backed by the CPU's
// virtualization (kvm_intel or kvm_amd). A KVM of another kind fails with
// the reason: PVM (kvm_pvm, what a PVM guest such as a Firecracker sandbox
// offers its processes) runs only kernels built as PVM guests; it emulates
// any other kernel instruction by instruction, so slowly that Debian's
// kernel does not reach init in minutes before its emulator fails.
func CheckKVM() error {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("/dev/kvm: KVM_GET_API_VERSION: %w", err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("/dev/kvm: API version %d, want %d", v, kvmAPIVersion)
	}
	vmfd, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		return fmt.Errorf("/dev/kvm: KVM_CREATE_VM: %w", err)
	}
	unix.Close(vmfd)
	hw := false
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			hw = true
		}
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil && !hw {
		return errors.New("/dev/kvm is PVM (kvm_pvm, no kvm_intel or kvm_amd): it runs only PVM guest kernels, and emulates Debian's kernel too slowly to boot")
	}
	return nil
}

// ChooseAccel picks how to run the VM: $VIPD_VM_ACCEL (kvm or tcg) when
// set, else KVM when CheckKVM passes, else TCG. why says what was chosen
// and why, for the test log.
func ChooseAccel() (a Accel, why string, err error) {
	switch v := os.Getenv("VIPD_VM_ACCEL"); v {
	case "kvm":
		if err := CheckKVM(); err != nil {
			return "", "", fmt.Errorf("VIPD_VM_ACCEL=kvm: %w", err)
		}
		return KVM, "VIPD_VM_ACCEL=kvm", nil
	case "tcg":
		return TCG, "VIPD_VM_ACCEL=tcg", nil
	case "":
	default:
		return "", "", fmt.Errorf("VIPD_VM_ACCEL=%q: want kvm or tcg", v)
	}
	if err := CheckKVM(); err != nil {
		return TCG, "TCG (no usable KVM: " + err.Error() + ")", nil
	}
	return KVM, "KVM", nil
}

// Config describes one VM run.
type Config struct {
	// Kernel and Initramfs are what the VM boots (FetchKernel, Initramfs).
	Kernel, Initramfs string
	// Accel is KVM or TCG.
	Accel Accel
	// CPUs and MemoryMiB size the VM. [2, 1024]
	CPUs, MemoryMiB int
	// Share is a host directory the guest mounts read-write at /vm. Run
	// writes the job to Share/vm/job; the guest leaves its output in
	// Share/vm/output and its exit status in Share/vm/exit.
	Share string
	// HostDirs are host directories the guest sees read-only at the same
	// paths (9p), with symlinks to them mirrored as symlinks.
	// [HostRootDirs()]
	HostDirs []string
	// Job is the shell script the guest runs as root with /bin/sh from
	// the host's /usr, in a root that is a fresh tmpfs apart from HostDirs,
	// /vm, /proc, /sys and /dev.
	Job string
	// Console gets every line of the guest's serial console (its kernel
	// messages, init's and the job's output). [discarded]
	Console func(line string)
	// BootTimeout bounds the time from QEMU's start until the guest's init
	// starts the job. [2m]
	BootTimeout time.Duration
}

// Result is how a run ended.
type Result struct {
	// Exit is the job's exit status.
	Exit int
	// Output is what the job wrote (stdout and stderr).
	Output string
	// Boot is the time from QEMU's start until the job started; Total
	// until QEMU exited.
	Boot, Total time.Duration
}

// HostRootDirs are the host directories a job needs to run the host's
// programs: /usr and /etc, and /bin, /sbin and the /lib directories where
// they are directories (on a merged-/usr system they are symlinks into
// /usr, mirrored as such).
func HostRootDirs() []string {
	dirs := []string{"/usr", "/etc"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if _, err := os.Lstat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// mountsFile is the share's vm/mounts for dirs: "ro TAG PATH" for each
// directory (tags h0, h1, ...: QEMU's -virtfs mount_tag), "link TARGET
// PATH" for each symlink.
func mountsFile(dirs []string) (text string, tags map[string]string, err error) {
	var b strings.Builder
	tags = map[string]string{}
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil {
			return "", nil, fmt.Errorf("host dir: %w", err)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return "", nil, fmt.Errorf("host dir: %w", err)
			}
			fmt.Fprintf(&b, "link %s %s\n", target, d)
		case fi.IsDir():
			tag := "h" + strconv.Itoa(len(tags))
			tags[tag] = d
			fmt.Fprintf(&b, "ro %s %s\n", tag, d)
		default:
			return "", nil, fmt.Errorf("host dir %s: not a directory", d)
		}
	}
	return b.String(), tags, nil
}

// Args returns QEMU's command line for c (after its defaults are filled in)
// with the 9p tags of the host directories.
func (c *Config) args(tags map[string]string) []string {
	a := []string{"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "pc", "-smp", strconv.Itoa(c.CPUs), "-m", strconv.Itoa(c.MemoryMiB),
		"-kernel", c.Kernel, "-initrd", c.Initramfs,
		"-append", "console=ttyS0 panic=-1 quiet",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-virtfs", "local,path=" + c.Share + ",mount_tag=vipdvm,security_model=none,multidevs=remap"}
	if c.Accel == KVM {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		a = append(a, "-accel", "tcg,thread=multi", "-cpu", "max")
	}
	for i := 0; i < len(tags); i++ {
		tag := "h" + strconv.Itoa(i)
		a = append(a, "-virtfs", "local,path="+tags[tag]+",mount_tag="+tag+",security_model=none,readonly=on,multidevs=remap")
	}
	return a
}

// bootedLine is what init prints when it starts the job.
const bootedLine = "vm-init: running the job"

// Run boots the VM, runs c.Job in it and returns when QEMU has exited. It
// kills QEMU (by its PID) when ctx ends or the guest does not start the job
// within c.BootTimeout. An error means the job did not run to its end (no
// exit status); a job that failed is Result.Exit != 0.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.CPUs == 0 {
		c.CPUs = 2
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = 1024
	}
	if c.HostDirs == nil {
		c.HostDirs = HostRootDirs()
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 2 * time.Minute
	}
	if c.Console == nil {
		c.Console = func(string) {}
	}
	ctl := filepath.Join(c.Share, "vm")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		return Result{}, fmt.Errorf("vm: %w", err)
	}
	for _, f := range []string{"exit", "output"} {
		os.Remove(filepath.Join(ctl, f))
	}
	mounts, tags, err := mountsFile(c.HostDirs)
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(ctl, "mounts"), []byte(mounts), 0o644); err != nil {
		return Result{}, fmt.Errorf("vm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ctl, "job"), []byte(c.Job), 0o755); err != nil {
		return Result{}, fmt.Errorf("vm: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, QEMU, c.args(tags)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, fmt.Errorf("vm: %w", err)
	}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("vm: start %s: %w", QEMU, err)
	}
	var booted atomic.Int64 // ns after start; 0 until the job starts
	var bootTimedOut atomic.Bool
	bootTimer := time.AfterFunc(c.BootTimeout, func() {
		if booted.Load() == 0 {
			bootTimedOut.Store(true)
			cancel()
		}
	})
	defer bootTimer.Stop()

	var tail []string // the console's last lines, for errors
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if booted.Load() == 0 && strings.HasPrefix(line, bootedLine) {
				booted.Store(int64(time.Since(start)))
			}
			c.Console(line)
			if tail = append(tail, line); len(tail) > 20 {
				tail = tail[1:]
			}
		}
	}()
	wg.Wait()
	waitErr := cmd.Wait()
	res := Result{Boot: time.Duration(booted.Load()), Total: time.Since(start)}
	out, _ := os.ReadFile(filepath.Join(ctl, "output"))
	res.Output = string(out)
	exitText, exitErr := os.ReadFile(filepath.Join(ctl, "exit"))
	why := func(what string) error {
		return fmt.Errorf("vm: %s (%s %v)\nconsole, last lines:\n%s\nqemu stderr:\n%s", what, QEMU, waitErr,
			strings.Join(tail, "\n"), strings.TrimSpace(stderr.String()))
	}
	switch {
	case bootTimedOut.Load():
		return res, why(fmt.Sprintf("the guest did not start the job within %v (accel %s): killed", c.BootTimeout, c.Accel))
	case exitErr != nil && ctx.Err() != nil:
		return res, why(fmt.Sprintf("killed after %v: %v", res.Total.Round(time.Second), context.Cause(ctx)))
	case exitErr != nil:
		return res, why("the guest powered off without the job's exit status")
	}
	res.Exit, err = strconv.Atoi(strings.TrimSpace(string(exitText)))
	if err != nil {
		return res, why(fmt.Sprintf("bad exit status %q", exitText))
	}
	return res, nil
}
