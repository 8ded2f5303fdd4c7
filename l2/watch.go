package l2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

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
// WatchConflicts opens its own listening socket, blocks until ctx is done or
// the Announcer is closed, and then returns nil. It returns an error if the
// socket cannot be opened or read. fn should return quickly: packets are not
// read while it runs. It is an error to call WatchConflicts in Quiet mode.
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

	// End on either the caller's ctx or Close.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnClose := context.AfterFunc(a.ctx, cancel)
	defer stopOnClose()

	if vip.Is4() {
		c, err := a.dial.dialARP(ifi, true)
		if err != nil {
			return fmt.Errorf("watch conflicts %s: open ARP socket on %s: %w", vip, ifi.Name, err)
		}
		return watchLoop(ctx, vip, c, func() (net.HardwareAddr, error) {
			p, err := c.read()
			if err != nil {
				return nil, err
			}
			return arpConflict(p, vip, ifi.HardwareAddr), nil
		}, fn)
	}

	c, err := a.dial.dialNDP(ifi, true)
	if err != nil {
		return fmt.Errorf("watch conflicts %s: open NDP socket on %s: %w", vip, ifi.Name, err)
	}
	return watchLoop(ctx, vip, c, func() (net.HardwareAddr, error) {
		m, cm, _, err := c.ReadFrom()
		if err != nil {
			return nil, err
		}
		return ndpConflict(m, cm, ifi.Index, vip, ifi.HardwareAddr), nil
	}, fn)
}

// watchLoop calls next until ctx ends, passing every conflict it finds to fn.
// It closes c when ctx ends, which unblocks next, and before returning.
func watchLoop(ctx context.Context, vip netip.Addr, c interface{ Close() error }, next func() (net.HardwareAddr, error), fn func(net.HardwareAddr)) error {
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
			return fmt.Errorf("watch conflicts %s: read: %w", vip, err)
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
