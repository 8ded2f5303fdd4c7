package l2

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// errLinkRemoved reports that the interface an operation was bound to was
// removed (deleted, or moved to another network namespace).
var errLinkRemoved = errors.New("interface removed")

// LinkUp reports whether the interface named iface exists, is
// administratively up (IFF_UP) and has carrier (IFF_LOWER_UP), in the calling
// thread's network namespace. An interface that cannot be read reads as down.
//
// LinkUp asks the kernel over netlink, one request on a fresh socket per
// call, instead of reading /sys/class/net: sysfs shows the network namespace
// of whoever mounted it, not that of the calling thread.
func LinkUp(iface string) bool {
	if iface == "" {
		return false
	}
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return false
	}
	return upWithCarrier(l.Attrs().RawFlags)
}

// upWithCarrier reports whether interface flags say administratively up and
// carrier present.
func upWithCarrier(rawFlags uint32) bool {
	return rawFlags&unix.IFF_UP != 0 && rawFlags&unix.IFF_LOWER_UP != 0
}

// WatchLinks calls changed, from the calling goroutine, with an interface's
// name each time the kernel reports a change to it in the calling thread's
// network namespace: flags (up/down), carrier, creation or removal. It is a
// wake-up, not a state report: read the state itself afterwards (LinkUp).
//
// WatchLinks blocks until ctx is done, then returns nil, or until the
// subscription fails (the kernel dropped it, say after a receive buffer
// overrun), then returns the error; a caller that still needs events calls
// it again. changed should return quickly.
func WatchLinks(ctx context.Context, changed func(name string)) error {
	if changed == nil {
		return errors.New("watch links: nil callback")
	}
	s, err := subscribeLinks()
	if err != nil {
		return err
	}
	return s.run(ctx, "link change", func(u netlink.LinkUpdate) error {
		if u.Link != nil && u.Link.Attrs() != nil {
			changed(u.Link.Attrs().Name)
		}
		return nil
	})
}

// subscribeLinks subscribes to link changes in the calling thread's network
// namespace.
func subscribeLinks() (*subscription[netlink.LinkUpdate], error) {
	s := newSubscription[netlink.LinkUpdate]()
	if err := netlink.LinkSubscribeWithOptions(s.ch, s.done, netlink.LinkSubscribeOptions{ErrorCallback: s.onError}); err != nil {
		s.stop()
		return nil, fmt.Errorf("subscribe to link changes: %w", err)
	}
	return s, nil
}

// linkRemoved reports whether u tells that the interface with index is gone
// from the namespace.
func linkRemoved(u netlink.LinkUpdate, index int) bool {
	return u.Header.Type == unix.RTM_DELLINK && u.Link != nil && u.Link.Attrs() != nil && u.Link.Attrs().Index == index
}

// subscription is a netlink subscription (vishvananda/netlink's
// *SubscribeWithOptions): its reader goroutine sends updates on ch until done
// is closed or the socket fails, reporting errors to onError, and then closes
// ch.
type subscription[T any] struct {
	ch   chan T
	done chan struct{}

	mu      sync.Mutex
	lastErr error // the last error the reader reported
}

func newSubscription[T any]() *subscription[T] {
	return &subscription[T]{ch: make(chan T, 16), done: make(chan struct{})}
}

// onError is the subscription's error callback.
func (s *subscription[T]) onError(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// stop ends the subscription; its reader closes ch soon after.
func (s *subscription[T]) stop() { close(s.done) }

// run passes each update to fn until ctx ends (it returns nil), fn returns an
// error (it returns that error) or the subscription fails (it returns the
// failure, naming what). It ends the subscription and, unless it failed,
// drains ch until the reader closed it, so the reader never blocks on a send
// and has ended when run returns.
func (s *subscription[T]) run(ctx context.Context, what string, fn func(T) error) error {
	for {
		select {
		case <-ctx.Done():
			s.stop()
			for range s.ch {
			}
			return nil
		case u, ok := <-s.ch:
			if !ok {
				s.stop()
				s.mu.Lock()
				err := s.lastErr
				s.mu.Unlock()
				if err == nil {
					err = errors.New("closed")
				}
				return fmt.Errorf("%s subscription ended: %w", what, err)
			}
			if err := fn(u); err != nil {
				s.stop()
				for range s.ch {
				}
				return err
			}
		}
	}
}
