package agent

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// admittingTransport is memberlist's network transport with a filter in
// front: packets and stream connections from addresses outside the
// admitted networks are dropped before memberlist reads them. memberlist's
// own CIDRsAllowed only refuses alive messages and joins; pings, suspicions
// and death notices from any host would still be read, and a stranger could
// declare a real member dead. The allowed networks follow a reload.
type admittingTransport struct {
	*memberlist.NetTransport
	allowed *atomic.Pointer[[]netip.Prefix] // nil or empty: any address
	dropped func()

	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{} // Shutdown began: drop instead of forwarding
	stopped chan struct{} // the inner transport has shut down
	wg      sync.WaitGroup
	once    sync.Once
}

func newAdmittingTransport(nt *memberlist.NetTransport, allowed *atomic.Pointer[[]netip.Prefix], dropped func()) *admittingTransport {
	t := &admittingTransport{
		NetTransport: nt, allowed: allowed, dropped: dropped,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
		done: make(chan struct{}), stopped: make(chan struct{}),
	}
	// The forwarders read the inner transport until it has shut down (its
	// listeners block on sending otherwise), dropping what arrives once
	// Shutdown began.
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.stopped:
				return
			case p := <-nt.PacketCh():
				if !t.admits(p.From) {
					t.dropped()
					continue
				}
				select {
				case t.packets <- p:
				case <-t.done:
				}
			}
		}
	}()
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.stopped:
				return
			case c := <-nt.StreamCh():
				if !t.admits(c.RemoteAddr()) {
					t.dropped()
					c.Close()
					continue
				}
				select {
				case t.streams <- c:
				case <-t.done:
					c.Close()
				}
			}
		}
	}()
	return t
}

// admits reports whether a sender's address is in the admitted networks.
func (t *admittingTransport) admits(from net.Addr) bool {
	nets := t.allowed.Load()
	if nets == nil || len(*nets) == 0 {
		return true
	}
	var ip net.IP
	switch a := from.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		return false
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	addr = addr.Unmap()
	return slices.ContainsFunc(*nets, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// PacketCh implements memberlist.Transport.
func (t *admittingTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// StreamCh implements memberlist.Transport.
func (t *admittingTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport.
func (t *admittingTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.done)
		err = t.NetTransport.Shutdown()
		close(t.stopped)
		t.wg.Wait()
	})
	return err
}
