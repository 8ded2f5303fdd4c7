package l2

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// allNodes is the IPv6 link-local all-nodes multicast group, the destination
// of unsolicited neighbor advertisements (RFC 4861, section 7.2.6).
var allNodes = netip.MustParseAddr("ff02::1")

// senderLocked returns a function that sends one advertisement of vip on ifi,
// opening the advertisement socket for vip's family if needed.
func (a *Announcer) senderLocked(ifi *net.Interface, vip netip.Addr) (func() error, error) {
	if vip.Is4() {
		if a.arp != nil && a.arpIndex != ifi.Index {
			_ = a.arp.Close()
			a.arp = nil
		}
		if a.arp == nil {
			c, err := a.dial.dialARP(ifi, false)
			if err != nil {
				return nil, fmt.Errorf("open ARP socket on %s: %w", ifi.Name, err)
			}
			a.arp, a.arpIndex = c, ifi.Index
		}
		pkts, err := garpPackets(ifi.HardwareAddr, vip)
		if err != nil {
			return nil, err
		}
		c := a.arp
		return func() error {
			for _, p := range pkts {
				if err := c.writeTo(p, ethernet.Broadcast); err != nil {
					return fmt.Errorf("write gratuitous ARP %s: %w", p.Operation, err)
				}
			}
			return nil
		}, nil
	}

	if a.ndp != nil && a.ndpIndex != ifi.Index {
		_ = a.ndp.Close()
		a.ndp = nil
	}
	if a.ndp == nil {
		c, err := a.dial.dialNDP(ifi, false)
		if err != nil {
			return nil, fmt.Errorf("open NDP socket on %s: %w", ifi.Name, err)
		}
		a.ndp, a.ndpIndex = c, ifi.Index
	}
	na, err := unsolicitedNA(ifi.HardwareAddr, vip)
	if err != nil {
		return nil, err
	}
	cm := &ipv6.ControlMessage{HopLimit: ndp.HopLimit, Src: vip.AsSlice(), IfIndex: ifi.Index}
	c := a.ndp
	return func() error {
		if err := c.WriteTo(na, cm, allNodes); err != nil {
			return fmt.Errorf("write neighbor advertisement: %w", err)
		}
		return nil
	}, nil
}

// dropConnLocked closes the advertisement socket for vip's family after a
// write failed, so the next Announce opens a fresh one.
func (a *Announcer) dropConnLocked(vip netip.Addr) {
	if vip.Is4() && a.arp != nil {
		_ = a.arp.Close()
		a.arp = nil
	}
	if vip.Is6() && a.ndp != nil {
		_ = a.ndp.Close()
		a.ndp = nil
	}
}

// garpPackets returns the ARP packets of one gratuitous ARP advertisement of
// vip from mac: an ARP request (an RFC 5227 ARP Announcement) and an ARP
// reply, both with sender and target IP set to vip and meant to be broadcast.
// Hosts and switches differ in which of the two they honour, so both are sent.
func garpPackets(mac net.HardwareAddr, vip netip.Addr) ([]*arp.Packet, error) {
	if !vip.Is4() {
		return nil, fmt.Errorf("gratuitous ARP needs an IPv4 address, got %s", vip)
	}
	req, err := arp.NewPacket(arp.OperationRequest, mac, vip, make(net.HardwareAddr, len(mac)), vip)
	if err != nil {
		return nil, fmt.Errorf("build gratuitous ARP request from %s: %w", mac, err)
	}
	rep, err := arp.NewPacket(arp.OperationReply, mac, vip, ethernet.Broadcast, vip)
	if err != nil {
		return nil, fmt.Errorf("build gratuitous ARP reply from %s: %w", mac, err)
	}
	return []*arp.Packet{req, rep}, nil
}

// unsolicitedNA returns an unsolicited neighbor advertisement of vip at mac
// (RFC 4861, section 7.2.6): Override set so receivers replace a cached
// link-layer address, Solicited clear, and a Target Link-Layer Address option.
func unsolicitedNA(mac net.HardwareAddr, vip netip.Addr) (*ndp.NeighborAdvertisement, error) {
	if !vip.Is6() {
		return nil, fmt.Errorf("neighbor advertisement needs an IPv6 address, got %s", vip)
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("neighbor advertisement needs an Ethernet address, got %q", mac)
	}
	return &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: vip,
		Options: []ndp.Option{
			&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac},
		},
	}, nil
}
