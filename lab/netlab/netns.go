package netlab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNamespace runs f on an OS thread switched into h's network namespace,
// so sockets f creates (net.Dial, net.ListenPacket) live there and keep
// living there after f returns. The thread is never switched back: it is
// thrown away when f returns, so no other goroutine runs in h's namespace
// by accident. f must not start goroutines that create sockets (they run
// on other threads, in the test's own namespace).
func (l *Lab) InNamespace(h *Host, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: a goroutine that exits while locked takes its
		// thread with it.
		runtime.LockOSThread()
		target, err := netns.GetFromName(h.NS)
		if err != nil {
			errc <- fmt.Errorf("open namespace %s: %w", h.NS, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter namespace %s: %w", h.NS, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
