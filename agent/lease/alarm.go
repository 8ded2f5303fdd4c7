package lease

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Alarm is a one-shot timer that its owner moves, earlier or later, as
// often as it likes, and that wakes the process only when it fires. One
// goroutine waits on it; any may move it.
//
// The lease runner needs one: a node that listens moves its "the holder
// fell silent" deadline on every heartbeat, and a holder arms a retry
// deadline with every round that the answer then makes moot. time.Timer
// does not do this cheaply. The Go runtime keeps timers in a heap that it
// fixes lazily: a timer moved later stays in the heap at its old time, and
// the process wakes at that old time (its poller thread, then sysmon) only
// to find nothing due. That was one wasted wake-up per heartbeat, a third
// of an idle holder's, and on a virtual machine each costs a few hundred
// microseconds of CPU however little it does.
//
// kernelAlarm is a timerfd: timerfd_settime moves the kernel's timer in
// place, and the runtime's poller waits for it like for a socket.
// goAlarm, a time.Timer, is the fallback where timerfd is not available.
type Alarm interface {
	// Set makes it fire after d (at once for d <= 0), replacing any
	// setting before.
	Set(d time.Duration)
	// Stop disarms it.
	Stop()
	// Wait blocks until it fires (true) or is closed (false).
	Wait() bool
	// Close ends a wait in progress and every wait after it.
	Close()
}

// NewAlarm returns an Alarm on a timerfd (CLOCK_MONOTONIC), or on a
// time.Timer when the kernel refuses a timerfd.
func NewAlarm() Alarm {
	if k, err := newKernelAlarm(); err == nil {
		return k
	}
	return newGoAlarm()
}

// kernelAlarm is an Alarm on a timerfd (CLOCK_MONOTONIC).
type kernelAlarm struct {
	f *os.File
	// rc reaches the fd for timerfd_settime; its Control fails once f is
	// closed, so a set racing close never touches a reused fd.
	rc syscall.RawConn
}

func newKernelAlarm() (*kernelAlarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	// Non-blocking: os.NewFile registers it with the runtime's poller, so
	// a read parks the goroutine, not a thread.
	f := os.NewFile(uintptr(fd), "alarm")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	return &kernelAlarm{f: f, rc: rc}, nil
}

// settime arms the timerfd for d from now (zero: disarmed); nothing once
// closed. It runs on every heartbeat: the RawConn is made once.
func (k *kernelAlarm) settime(d time.Duration) {
	_ = k.rc.Control(func(fd uintptr) {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
		_ = unix.TimerfdSettime(int(fd), 0, &spec, nil)
	})
}

func (k *kernelAlarm) Set(d time.Duration) {
	// A zero it_value would disarm it: at once is a nanosecond.
	k.settime(max(d, time.Nanosecond))
}

func (k *kernelAlarm) Stop() { k.settime(0) }

// Wait reads the expiration count. Re-arming resets the count, so a timer
// that fired and was moved before the read does not end the wait: the
// read finds nothing and the runtime waits again.
func (k *kernelAlarm) Wait() bool {
	var b [8]byte
	_, err := k.f.Read(b[:])
	return err == nil
}

func (k *kernelAlarm) Close() { _ = k.f.Close() }

// goAlarm is an Alarm on a time.Timer.
type goAlarm struct {
	t      *time.Timer
	done   chan struct{}
	closer sync.Once
}

func newGoAlarm() *goAlarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &goAlarm{t: t, done: make(chan struct{})}
}

func (g *goAlarm) Set(d time.Duration) { g.t.Reset(max(d, 0)) }
func (g *goAlarm) Stop()               { g.t.Stop() }
func (g *goAlarm) Close()              { g.closer.Do(func() { g.t.Stop(); close(g.done) }) }

func (g *goAlarm) Wait() bool {
	select {
	case <-g.t.C:
		return true
	case <-g.done:
		return false
	}
}
