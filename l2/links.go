package l2

import (
	"context"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
)

// WatchLinks calls changed, from the calling goroutine, with an interface's
// name each time the kernel reports a change to it in the calling thread's
// network namespace: flags (up/down), carrier, creation or removal. It is a
// wake-up, not a state report: read the state itself afterwards.
//
// WatchLinks blocks until ctx is done, then returns nil, or until the
// subscription fails (the kernel dropped it, say after a receive buffer
// overrun), then returns the error; a caller that still needs events calls
// it again. changed should return quickly.
func WatchLinks(ctx context.Context, changed func(name string)) error {
	var (
		mu      sync.Mutex
		lastErr error
	)
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			mu.Lock()
			lastErr = err
			mu.Unlock()
		},
	})
	if err != nil {
		return fmt.Errorf("subscribe to link changes: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			// The subscription's reader ends (closing ch) once done is
			// closed; drain ch so it never blocks on a send.
			close(done)
			for range ch {
			}
			return nil
		case u, ok := <-ch:
			if !ok {
				close(done)
				mu.Lock()
				defer mu.Unlock()
				return fmt.Errorf("link change subscription ended: %w", lastErr)
			}
			if u.Link != nil && u.Link.Attrs() != nil {
				changed(u.Link.Attrs().Name)
			}
		}
	}
}
