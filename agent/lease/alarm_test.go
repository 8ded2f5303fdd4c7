package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// alarms returns one alarm of each kind the runner may get.
func alarms(t *testing.T) map[string]Alarm {
	t.Helper()
	k, err := newKernelAlarm()
	if err != nil {
		t.Fatalf("timerfd: %v", err)
	}
	return map[string]Alarm{"kernel": k, "go": newGoAlarm()}
}

// TestAlarmFiresAndCloses: an alarm set to fire does; one moved to an
// hour and closed ends its wait with false, as run needs to stop.
func TestAlarmFiresAndCloses(t *testing.T) {
	for name, a := range alarms(t) {
		t.Run(name, func(t *testing.T) {
			a.Set(time.Hour)
			a.Set(0) // moved earlier: at once
			if !a.Wait() {
				t.Fatal("wait ended without the alarm firing")
			}
			a.Set(time.Hour)
			done := make(chan bool)
			go func() { done <- a.Wait() }()
			a.Close()
			if <-done {
				t.Error("wait reported a fire after close")
			}
			if a.Wait() {
				t.Error("a wait after close reported a fire")
			}
		})
	}
}

// TestKernelAlarmMovesInPlace: moving the alarm later moves the kernel's
// timer; nothing is left armed at the earlier time (a time.Timer moved
// later leaves the runtime's heap entry there, and the process wakes for
// nothing at that time). Stopping disarms it.
func TestKernelAlarmMovesInPlace(t *testing.T) {
	k, err := newKernelAlarm()
	if err != nil {
		t.Fatalf("timerfd: %v", err)
	}
	defer k.Close()
	k.Set(5 * time.Millisecond)
	k.Set(time.Hour)
	if d, err := k.remaining(); err != nil || d < 59*time.Minute {
		t.Fatalf("moved to an hour, the kernel has it at %v (%v)", d, err)
	}
	k.Stop()
	if d, err := k.remaining(); err != nil || d != 0 {
		t.Fatalf("stopped, the kernel has it at %v (%v)", d, err)
	}
}

// TestKernelAlarmRearmedBeforeRead: an alarm that fired and was moved
// before anyone read it does not end the next wait (the kernel resets the
// expiration count when it is set): a heartbeat that moves the deadline
// after it passed, but before run took it, wins.
func TestKernelAlarmRearmedBeforeRead(t *testing.T) {
	k, err := newKernelAlarm()
	if err != nil {
		t.Fatalf("timerfd: %v", err)
	}
	defer k.Close()
	k.Set(time.Microsecond)
	expired := false
	for i := 0; i < 1000 && !expired; i++ { // a one-shot timer disarms when it fires
		d, err := k.remaining()
		if err != nil {
			t.Fatal(err)
		}
		expired = d == 0
		time.Sleep(time.Millisecond)
	}
	if !expired {
		t.Fatal("a 1 µs alarm had not fired after a second")
	}
	k.Set(time.Hour)
	var rerr error
	if err := k.rc.Control(func(fd uintptr) {
		var b [8]byte
		_, rerr = unix.Read(int(fd), b[:])
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rerr, unix.EAGAIN) {
		t.Errorf("read after the move: %v, want EAGAIN (nothing to take)", rerr)
	}
}

// remaining is how long until it fires (zero: disarmed), from the kernel.
func (k *kernelAlarm) remaining() (time.Duration, error) {
	var spec unix.ItimerSpec
	var gerr error
	if err := k.rc.Control(func(fd uintptr) { gerr = unix.TimerfdGettime(int(fd), &spec) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, fmt.Errorf("timerfd_gettime: %w", gerr)
	}
	return time.Duration(spec.Value.Nano()), nil
}
