// Package childcaps starts the commands vipd runs (health commands, the
// next binary's restart probe) without the capabilities that read any
// file.
//
// The kubelet-credentials drop-in (packaging/systemd) grants vipd
// CAP_DAC_READ_SEARCH as an ambient capability so that it can read the
// kubelet's root-only kubeconfig. Ambient capabilities survive execve: a
// health command would read admin.conf, etcd's keys or /etc/shadow as
// well. Start lowers CAP_DAC_READ_SEARCH and CAP_DAC_OVERRIDE from the
// inheritable set (which lowers them from the ambient set too, the
// kernel keeping ambient within permitted and inheritable) on a thread of
// its own, forks the command from that thread, and lets the thread end
// with its goroutine: vipd's other threads keep what they had, the child
// gets neither.
//
// The bounding set is not changed: that needs CAP_SETPCAP, which the unit
// does not grant, and with the unit's NoNewPrivileges=yes no file
// capability or set-user-ID bit can raise a capability at exec either. A
// vipd run as root (no unit, or an override) starts its commands as root,
// which read root's files without these capabilities anyway.
package childcaps

import (
	"bytes"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dropped are the capabilities a child never inherits.
var Dropped = []uint{unix.CAP_DAC_READ_SEARCH, unix.CAP_DAC_OVERRIDE}

// Start starts cmd (as cmd.Start does) with none of Dropped in its
// inheritable and ambient sets. An error lowering them is returned and
// the command is not started.
func Start(cmd *exec.Cmd) error {
	return startLowered(cmd, withoutDropped, Dropped)
}

// startHere is Start from the calling thread (locked to its goroutine),
// whose sets it lowers.
func startHere(cmd *exec.Cmd) error {
	return startFromHere(cmd, withoutDropped, Dropped)
}

// withoutDropped is data with Dropped out of the inheritable set.
func withoutDropped(data [2]unix.CapUserData) [2]unix.CapUserData {
	next, _ := lowered(data)
	return next
}

// startLowered runs startFromHere on a thread of its own, never unlocked:
// with its lowered sets it ends with its goroutine and is not reused.
func startLowered(cmd *exec.Cmd, inheritable func([2]unix.CapUserData) [2]unix.CapUserData, ambient []uint) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- startFromHere(cmd, inheritable, ambient)
	}()
	return <-errc
}

// startFromHere sets the calling thread's inheritable set to
// inheritable(the thread's), lowers ambient from its ambient set, and
// starts cmd from it. An error lowering them is returned and the command
// is not started.
func startFromHere(cmd *exec.Cmd, inheritable func([2]unix.CapUserData) [2]unix.CapUserData, ambient []uint) error {
	if err := lowerThread(inheritable, ambient); err != nil {
		return fmt.Errorf("lower the capabilities a command inherits: %w", err)
	}
	return cmd.Start()
}

// CombinedOutput runs cmd as cmd.CombinedOutput does, started by Start.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := Start(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return b.Bytes(), err
}

// Output runs cmd as cmd.Output does (stdout returned, stderr dropped
// unless cmd sets it), started by Start.
func Output(cmd *exec.Cmd) ([]byte, error) {
	var b bytes.Buffer
	cmd.Stdout = &b
	if err := Start(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return b.Bytes(), err
}

// lowerThread sets the calling thread's inheritable set to
// inheritable(the current one), which lowers the ambient set with it, and
// lowers each of ambient from the ambient set.
func lowerThread(inheritable func([2]unix.CapUserData) [2]unix.CapUserData, ambient []uint) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if next := inheritable(data); next != data {
		if err := unix.Capset(&hdr, &next[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
	}
	for _, c := range ambient {
		// The kernel already took them out of the ambient set with the
		// inheritable one; said again, in case it did not.
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, uintptr(c), 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("lower ambient capability %s: %w", names[c], err)
		}
	}
	return nil
}

// lowered returns data with Dropped out of the inheritable set, and
// whether that changed anything.
func lowered(data [2]unix.CapUserData) ([2]unix.CapUserData, bool) {
	next := data
	for _, c := range Dropped {
		next[c/32].Inheritable &^= 1 << (c % 32)
	}
	return next, next != data
}
