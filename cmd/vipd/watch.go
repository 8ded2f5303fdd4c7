package main

import (
	"context"
	"sync"

	"github.com/vipd/vipd/l2"
)

// watchInterfaces is the agent's Options.LinkEvents: it reports every link
// change (up, down, carrier, created, deleted) and every address added or
// removed, by interface name, until ctx ends or one of the two netlink
// subscriptions fails. The agent then reads the links and verifies its
// addresses at once: an address removed behind its back (ip addr del,
// NetworkManager, ip addr flush) is put back within a pass.
func watchInterfaces(ctx context.Context, changed func(iface string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil && err != nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	// changed may be called from both goroutines; the agent's callback
	// only does a non-blocking send.
	wg.Go(func() { fail(l2.WatchLinks(ctx, changed)) })
	wg.Go(func() {
		fail(l2.WatchAddrs(ctx, func(c l2.AddrChange) {
			if c.Interface != "" {
				changed(c.Interface)
			}
		}))
	})
	wg.Wait()
	return firstErr
}
