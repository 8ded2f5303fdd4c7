package l2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// WatchConflicts listens on the interface for other hosts claiming addr and
// calls fn, from the calling goroutine, with the hardware address of each
// claim. For an IPv4 addr a claim is any ARP packet (reply, gratuitous
// announcement or request) whose sender IP is addr and whose sender hardware
// address is not the interface's. For an IPv6 addr it is a neighbor
// advertisement for addr, received on the interface, whose Target Link-Layer
// Address option is not the interface's. The Announcer's own advertisements
// are never reported.
//
// WatchConflicts opens its own listening socket and a link subscription,
// blocks until ctx is done or the Announcer is closed, and then returns nil.
// It returns an error if the socket cannot be opened or read, and once the
// interface it listens on is removed (deleted, or moved to another
// namespace): a socket bound to a removed interface hears nothing from the
// interface recreated under the same name, so a caller that still needs
// reports calls WatchConflicts again, which listens on the interface that
// then carries the name. For IPv4 the kernel also fails the read when the
// interface goes down. fn should return quickly: packets are not read while
// it runs. It is an error to call WatchConflicts in Quiet mode.
func (a *Announcer) WatchConflicts(ctx context.Context, addr netip.Addr, fn func(mac net.HardwareAddr)) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("watch conflicts %s: %w", addr, err)
	}
	if fn == nil {
		return fmt.Errorf("watch conflicts %s: nil callback", vip)
	}
	if a.cfg.Quiet {
		return fmt.Errorf("watch conflicts %s: not available in Quiet mode", vip)
	}

	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return fmt.Errorf("watch conflicts %s: %w", vip, net.ErrClosed)
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		a.mu.Unlock()
		return fmt.Errorf("watch conflicts %s: %w", vip, err)
	}
	a.wg.Add(1)
	a.mu.Unlock()
	defer a.wg.Done()

	var (
		c    interface{ Close() error }
		next func() (net.HardwareAddr, error)
	)
	if vip.Is4() {
		ac, err := a.dial.dialARP(ifi, true)
		if err != nil {
			return fmt.Errorf("watch conflicts %s: open ARP socket on %s: %w", vip, ifi.Name, err)
		}
		c, next = ac, func() (net.HardwareAddr, error) {
			p, err := ac.read()
			if err != nil {
				return nil, err
			}
			return arpConflict(p, vip, ifi.HardwareAddr), nil
		}
	} else {
		nc, err := a.dial.dialNDP(ifi, true)
		if err != nil {
			return fmt.Errorf("watch conflicts %s: open NDP socket on %s: %w", vip, ifi.Name, err)
		}
		c, next = nc, func() (net.HardwareAddr, error) {
			m, cm, _, err := nc.ReadFrom()
			if err != nil {
				return nil, err
			}
			return ndpConflict(m, cm, ifi.Index, vip, ifi.HardwareAddr), nil
		}
	}
	wait, err := a.dial.watchRemoval(ifi.Index)
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("watch conflicts %s: watch %s: %w", vip, ifi.Name, err)
	}

	// End on the caller's ctx, Close, or the removal of the interface;
	// stopped carries the reason for the last.
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(a.ctx, cancel)
	defer stopOnClose()
	stopped := make(chan error, 2)
	var removal sync.WaitGroup
	removal.Go(func() {
		if err := wait(ctx); err != nil {
			stopped <- err
			cancel()
		}
	})
	defer removal.Wait()
	defer cancel()
	// The interface may have gone between the lookup and the subscription.
	a.mu.Lock()
	cur, err := a.addrs.link(a.cfg.Interface)
	a.mu.Unlock()
	switch {
	case errors.Is(err, errNoLink) || err == nil && cur.Index != ifi.Index:
		stopped <- fmt.Errorf("%w: %s (index %d)", errLinkRemoved, ifi.Name, ifi.Index)
		cancel()
	case err != nil:
		stopped <- err
		cancel()
	}

	if err := watchLoop(ctx, c, next, fn); err != nil {
		return fmt.Errorf("watch conflicts %s: read: %w", vip, err)
	}
	select {
	case err := <-stopped:
		return fmt.Errorf("watch conflicts %s: %w", vip, err)
	default:
		return nil
	}
}

// watchLoop calls next until ctx ends, passing every conflict it finds to fn,
// and returns nil then, or next's error before. It closes c when ctx ends,
// which unblocks next, and before returning.
func watchLoop(ctx context.Context, c interface{ Close() error }, next func() (net.HardwareAddr, error), fn func(net.HardwareAddr)) error {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer func() {
		if stop() {
			_ = c.Close()
		}
	}()
	for {
		mac, err := next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if mac != nil {
			fn(mac)
		}
	}
}

// arpConflict returns the hardware address claiming vip in p, or nil if p
// does not claim vip or claims it for own.
func arpConflict(p *arp.Packet, vip netip.Addr, own net.HardwareAddr) net.HardwareAddr {
	if p == nil || p.SenderIP != vip || bytes.Equal(p.SenderHardwareAddr, own) {
		return nil
	}
	if p.Operation != arp.OperationRequest && p.Operation != arp.OperationReply {
		return nil
	}
	return append(net.HardwareAddr(nil), p.SenderHardwareAddr...)
}

// ndpConflict returns the hardware address claiming vip in m, or nil if m is
// not a neighbor advertisement for vip received on ifindex that names another
// host's link-layer address.
func ndpConflict(m ndp.Message, cm *ipv6.ControlMessage, ifindex int, vip netip.Addr, own net.HardwareAddr) net.HardwareAddr {
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || na.TargetAddress.WithZone("") != vip {
		return nil
	}
	if cm == nil || cm.IfIndex != ifindex {
		return nil
	}
	for _, o := range na.Options {
		lla, ok := o.(*ndp.LinkLayerAddress)
		if !ok || lla.Direction != ndp.Target {
			continue
		}
		if bytes.Equal(lla.Addr, own) {
			return nil
		}
		return append(net.HardwareAddr(nil), lla.Addr...)
	}
	// Without a target link-layer address the claimant is unknown.
	return nil
}

// errNoLink reports that the configured interface does not exist.
var errNoLink = errors.New("interface not found")
