// Package vm runs lab tests inside a QEMU VM booted with Debian's kernel,
// for the labs that need kernel features the host's kernel lacks:
// lab/bondvlan needs bonding and 802.1Q VLANs, which a sandbox or CI
// kernel may be built without (no modules either). TestLabsInVM runs each
// such lab there when this kernel cannot, and skips (saying so) when it
// can, since make netns-test then runs the lab on the host.
//
// How a run goes (each step bounded; the VM is killed by PID on timeout):
//
//  1. FetchKernel: the package linux-image-amd64 depends on, in the
//     version apt would install, fetched with `apt-get download` into
//     ~/.cache/vipd-lab/vm/PACKAGE_VERSION (never installed), with its
//     vmlinuz and an index of its modules (name, path, dependencies from
//     each module's .modinfo). Offline, the newest cached kernel is used.
//  2. Initramfs: busybox (busybox-static), init.sh as /init and the
//     modules the lab names plus virtio_pci and 9p, with their
//     dependencies in load order; cached next to the kernel, keyed by its
//     contents.
//  3. The host builds the lab's test binary (go test -c) and the binaries
//     it runs (vipd, vipctl from $VIPD_BIN, the lab's helpers) into a
//     share directory.
//  4. Run: QEMU boots the kernel with 2 CPUs and 1 GiB, its serial console
//     on a pipe. init loads the modules and runs the job as root in a
//     root of its own: a tmpfs with the host's /usr and /etc (and /bin,
//     /lib... as the host has them) read-only over 9p, the share
//     read-write at /vm, fresh /proc, /sys, /dev, /tmp and /run. The job
//     runs the test binary with VIPD_NETNS_TESTS=1, VIPD_BIN=/vm/bin and
//     VIPD_LAB_TOOLS=/vm/bin; its output goes to the console and to the
//     share, its exit status to the share; then the guest powers off.
//  5. The host fails the test unless the lab exited 0, passed at least one
//     test and skipped none (a skip in the VM means the VM lacks what the
//     lab needs).
//
// Accelerator: KVM where /dev/kvm creates a VM and is backed by the CPU
// (kvm_intel, kvm_amd); otherwise TCG, QEMU's emulator (ChooseAccel,
// VIPD_VM_ACCEL=kvm|tcg to choose). A /dev/kvm served by PVM (kvm_pvm, as
// in a Firecracker sandbox using it) creates VMs but runs only kernels
// built as PVM guests: it emulates Debian's kernel instruction by
// instruction, which does not reach init in minutes and then fails
// ("emulation failure" at a cmpxchg16b). Under TCG the guest runs several
// times slower than the host; the labs' timing bounds still hold there
// (see lab/bondvlan).
//
// The test skips, saying why, when it does not run as root with
// VIPD_NETNS_TESTS=1, on a host that is not amd64, or when QEMU
// (qemu-system-x86), busybox-static or apt's tools are missing; .ci/run
// installs them. Run it alone with `make vm-test` (verbose: the console
// as it comes); VIPD_VM_RUN=regexp selects the lab's tests, VIPD_VM_FORCE=1
// uses the VM even where this kernel could run the lab, VIPD_VM_CACHE moves
// the cache, VIPD_VM_KERNEL_PACKAGE picks another kernel package, and
// VIPD_KEEP_LAB=1 keeps a failed run's share directory.
package vm
