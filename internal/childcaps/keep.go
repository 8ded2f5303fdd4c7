package childcaps

import (
	"fmt"
	"os/exec"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// names are the capabilities by their names in capabilities(7).
var names = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// ByName returns the capability named name ("CAP_NET_ADMIN").
func ByName(name string) (uint, bool) {
	i := slices.Index(names, name)
	return uint(i), i >= 0
}

// StartKeeping starts cmd (as cmd.Start does) with no capability in its
// inheritable and ambient sets but those of keep that the calling process
// has, and never one of Dropped. A command run as an unprivileged user
// then has only keep (ambient capabilities are what such a process keeps
// across execve); one run as root has root's whatever this does, unless
// cmd.SysProcAttr.Credential makes it another user, whose ambient set
// cmd.SysProcAttr.AmbientCaps then gives (os/exec raises them after the
// switch).
func StartKeeping(cmd *exec.Cmd, keep []uint) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		if err := lowerThreadTo(keep); err != nil {
			errc <- fmt.Errorf("lower the capabilities a command inherits: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// lowerThreadTo lowers every capability but keep (less Dropped) from the
// calling thread's inheritable set, and so from its ambient set.
func lowerThreadTo(keep []uint) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	next := keptOnly(data, keep)
	if next != data {
		if err := unix.Capset(&hdr, &next[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
	}
	for c := uint(0); c < uint(len(names)); c++ {
		if keepable(c, keep) {
			continue
		}
		// The kernel took them out of the ambient set with the
		// inheritable one; said again, in case it did not.
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, uintptr(c), 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("lower ambient capability %s: %w", names[c], err)
		}
	}
	return nil
}

func keepable(c uint, keep []uint) bool {
	return slices.Contains(keep, c) && !slices.Contains(Dropped, c)
}

// keptOnly returns data with only keep (less Dropped) left in the
// inheritable set.
func keptOnly(data [2]unix.CapUserData, keep []uint) [2]unix.CapUserData {
	var mask [2]uint32
	for _, c := range keep {
		if keepable(c, keep) && c < 64 {
			mask[c/32] |= 1 << (c % 32)
		}
	}
	next := data
	next[0].Inheritable &= mask[0]
	next[1].Inheritable &= mask[1]
	return next
}
