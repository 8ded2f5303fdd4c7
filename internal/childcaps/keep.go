package childcaps

import (
	"os/exec"
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
	var ambient []uint
	for c := uint(0); c < uint(len(names)); c++ {
		if !keepable(c, keep) {
			ambient = append(ambient, c)
		}
	}
	return startLowered(cmd, func(data [2]unix.CapUserData) [2]unix.CapUserData {
		return keptOnly(data, keep)
	}, ambient)
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
