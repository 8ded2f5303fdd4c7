package l2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// In-memory fakes of the kernel seams, so unit tests need no privileges.

var testMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x00, 0x01}

const testIndex = 7

// fakeAddrs is an addrManager holding one interface's addresses in memory,
// with their attributes, changed the way the kernel changes them.
type fakeAddrs struct {
	mu      sync.Mutex
	ifi     *net.Interface // nil: the interface does not exist
	addrs   []ifAddr
	adds    []addCall
	dels    []netip.Prefix
	addErr  error
	delErr  error
	listErr error
	closed  bool
	// lifetimes are the lifetimes set on present addresses (0: forever).
	lifetimes map[netip.Prefix]time.Duration
	// locals are the linger routes present.
	locals map[netip.Addr]bool
}

func (f *fakeAddrs) addLocal(ifi *net.Interface, vip netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locals == nil {
		f.locals = map[netip.Addr]bool{}
	}
	f.locals[vip] = true
	return nil
}

func (f *fakeAddrs) delLocal(ifi *net.Interface, vip netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.locals, vip)
	return nil
}

// hasLocal reports whether vip's linger route is present.
func (f *fakeAddrs) hasLocal(vip netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.locals[vip]
}

// setLifetime records the lifetime of a present address and sets it
// the kernel's way: the attributes at (an existing IPv4 address keeps its
// scope), permanent only when the lifetime is forever.
func (f *fakeAddrs) setLifetime(ifi *net.Interface, p netip.Prefix, at addrAttrs, life time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.addrs, func(a ifAddr) bool { return a.prefix == p })
	if i < 0 {
		return errors.New("no such address")
	}
	if p.Addr().Is4() {
		at.scope = f.addrs[i].attrs.scope
	}
	at.permanent = life == 0
	f.addrs[i].attrs = at
	if f.lifetimes == nil {
		f.lifetimes = map[netip.Prefix]time.Duration{}
	}
	f.lifetimes[p] = life
	return nil
}

type addCall struct {
	prefix netip.Prefix
	attrs  addrAttrs
}

// plainAttrs are the attributes of an address added with `ip addr add` and
// nothing else: scope global, valid and preferred forever.
var plainAttrs = addrAttrs{permanent: true}

// newFakeAddrs returns a fake interface "test0" with present addresses:
// "192.0.2.1/24" is a plain address (plainAttrs); "192.0.2.10/32 vip" one
// with the attributes vipd gives its VIPs (vipAttrs).
func newFakeAddrs(present ...string) *fakeAddrs {
	f := &fakeAddrs{ifi: &net.Interface{Index: testIndex, MTU: 1500, Name: "test0", HardwareAddr: testMAC}}
	for _, s := range present {
		ps, vip := strings.CutSuffix(s, " vip")
		p := netip.MustParsePrefix(ps)
		at := plainAttrs
		if vip {
			at = vipAttrs(p.Addr())
		}
		f.addrs = append(f.addrs, ifAddr{p, at})
	}
	return f
}

func (f *fakeAddrs) link(name string) (*net.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ifi == nil || f.ifi.Name != name {
		return nil, errNoLink
	}
	ifi := *f.ifi
	return &ifi, nil
}

func (f *fakeAddrs) list(ifi *net.Interface) ([]ifAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return slices.Clone(f.addrs), nil
}

// add mimics the kernel's replace: a new address is appended; an existing
// IPv6 one gets the new attributes; an existing IPv4 one keeps its scope.
func (f *fakeAddrs) add(ifi *net.Interface, p netip.Prefix, at addrAttrs) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addErr != nil {
		return f.addErr
	}
	f.adds = append(f.adds, addCall{p, at})
	i := slices.IndexFunc(f.addrs, func(a ifAddr) bool { return a.prefix == p })
	switch {
	case i < 0:
		f.addrs = append(f.addrs, ifAddr{p, at})
	case p.Addr().Is4():
		at.scope = f.addrs[i].attrs.scope
		f.addrs[i].attrs = at
	default:
		f.addrs[i].attrs = at
	}
	return nil
}

// attrs returns the attributes of p on the interface, and whether it is
// there.
func (f *fakeAddrs) attrs(p netip.Prefix) (addrAttrs, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.addrs {
		if a.prefix == p {
			return a.attrs, true
		}
	}
	return addrAttrs{}, false
}

// setAttrs changes the attributes of p, as something other than vipd
// re-adding it would.
func (f *fakeAddrs) setAttrs(p netip.Prefix, at addrAttrs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.addrs {
		if f.addrs[i].prefix == p {
			f.addrs[i].attrs = at
		}
	}
}

func (f *fakeAddrs) del(ifi *net.Interface, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.delErr != nil {
		return f.delErr
	}
	f.dels = append(f.dels, p)
	f.addrs = slices.DeleteFunc(f.addrs, func(a ifAddr) bool { return a.prefix == p })
	return nil
}

func (f *fakeAddrs) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// snapshot returns the prefixes configured, in order, and every add and
// delete so far.
func (f *fakeAddrs) snapshot() (addrs []netip.Prefix, adds []addCall, dels []netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.addrs {
		addrs = append(addrs, a.prefix)
	}
	return addrs, slices.Clone(f.adds), slices.Clone(f.dels)
}

// sentARP and sentNA record what the fake sockets were asked to send.
type sentARP struct {
	p   *arp.Packet
	dst net.HardwareAddr
}

type sentNA struct {
	m   ndp.Message
	cm  *ipv6.ControlMessage
	dst netip.Addr
}

// received is one packet (or read error) for a fake listening socket.
type received struct {
	arp *arp.Packet
	ndp ndp.Message
	cm  *ipv6.ControlMessage
	err error
}

// fakeDialer hands out fake sockets that record writes and read from in.
type fakeDialer struct {
	mu       sync.Mutex
	arpSent  []sentARP
	naSent   []sentNA
	dials    int
	conns    []*fakeConn
	dialErr  error
	writeErr error
	// brokenDials: the first brokenDials sockets fail every write with
	// staleErr, as a packet socket does after its link went down.
	brokenDials int
	staleErr    error

	// in feeds listening sockets; a test's send returns once a reader
	// took the packet.
	in chan received

	// Removal watches: closing removed reports the interface removed to
	// every watch; watchErr fails new subscriptions; onWatch, if set, runs
	// when a subscription starts; watches counts the running ones.
	removed  chan struct{}
	watchErr error
	onWatch  func()
	watches  int
}

func newFakeDialer() *fakeDialer {
	return &fakeDialer{in: make(chan received), removed: make(chan struct{})}
}

func (d *fakeDialer) watchRemoval(index int) (func(context.Context) error, error) {
	d.mu.Lock()
	if d.watchErr != nil {
		d.mu.Unlock()
		return nil, d.watchErr
	}
	d.watches++
	hook := d.onWatch
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	return func(ctx context.Context) error {
		defer func() {
			d.mu.Lock()
			d.watches--
			d.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			return nil
		case <-d.removed:
			return fmt.Errorf("%w: index %d", errLinkRemoved, index)
		}
	}, nil
}

// runningWatches returns how many removal watches have not ended.
func (d *fakeDialer) runningWatches() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.watches
}

func (d *fakeDialer) newConn() (*fakeConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	if d.dialErr != nil {
		return nil, d.dialErr
	}
	c := &fakeConn{d: d, closed: make(chan struct{}), broken: d.dials <= d.brokenDials}
	d.conns = append(d.conns, c)
	return c, nil
}

func (d *fakeDialer) dialARP(*net.Interface, bool) (arpConn, error) { return d.newConn() }
func (d *fakeDialer) dialNDP(*net.Interface, bool) (ndpConn, error) { return d.newConn() }

func (d *fakeDialer) sent() ([]sentARP, []sentNA) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.arpSent), slices.Clone(d.naSent)
}

func (d *fakeDialer) dialCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// allClosed reports whether every socket handed out has been closed.
func (d *fakeDialer) allClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		select {
		case <-c.closed:
		default:
			return false
		}
	}
	return true
}

// fakeConn implements both arpConn and ndpConn.
type fakeConn struct {
	d         *fakeDialer
	broken    bool
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *fakeConn) writeTo(p *arp.Packet, dst net.HardwareAddr) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.writeErr != nil {
		return c.d.writeErr
	}
	if c.broken {
		return c.d.staleErr
	}
	c.d.arpSent = append(c.d.arpSent, sentARP{p, dst})
	return nil
}

func (c *fakeConn) WriteTo(m ndp.Message, cm *ipv6.ControlMessage, dst netip.Addr) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.writeErr != nil {
		return c.d.writeErr
	}
	if c.broken {
		return c.d.staleErr
	}
	c.d.naSent = append(c.d.naSent, sentNA{m, cm, dst})
	return nil
}

func (c *fakeConn) next() (received, error) {
	select {
	case r := <-c.d.in:
		return r, r.err
	case <-c.closed:
		return received{}, net.ErrClosed
	}
}

func (c *fakeConn) read() (*arp.Packet, error) {
	r, err := c.next()
	return r.arp, err
}

func (c *fakeConn) ReadFrom() (ndp.Message, *ipv6.ControlMessage, netip.Addr, error) {
	r, err := c.next()
	return r.ndp, r.cm, netip.Addr{}, err
}

func (c *fakeConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// fakeClock replaces time.After: every call is reported on waits, and the
// test decides when it fires.
type fakeClock struct {
	waits chan fakeWait
}

type fakeWait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{waits: make(chan fakeWait, 64)} }

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	w := fakeWait{d: d, fire: make(chan time.Time, 1)}
	c.waits <- w
	return w.fire
}

// next returns the next wait the burst goroutine started. The timeout only
// guards against a hung test; no logic depends on it.
func (c *fakeClock) next(t *testing.T) fakeWait {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("burst goroutine never waited for its next advertisement")
		return fakeWait{}
	}
}

// idle fails the test if a wait is pending.
func (c *fakeClock) idle(t *testing.T) {
	t.Helper()
	select {
	case w := <-c.waits:
		t.Fatalf("unexpected wait of %s: a burst is still running", w.d)
	default:
	}
}

type harness struct {
	a     *Announcer
	addrs *fakeAddrs
	dial  *fakeDialer
	clock *fakeClock
}

// newHarness returns an Announcer for interface "test0" on fakes. cfg's
// Interface defaults to "test0"; Close runs at cleanup.
func newHarness(t *testing.T, cfg Config, addrs *fakeAddrs) *harness {
	t.Helper()
	if cfg.Interface == "" {
		cfg.Interface = "test0"
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if addrs == nil {
		addrs = newFakeAddrs()
	}
	h := &harness{addrs: addrs, dial: newFakeDialer(), clock: newFakeClock()}
	h.a = newAnnouncer(cfg, addrs, h.dial, h.clock.after)
	t.Cleanup(func() {
		if err := h.a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// advertisements returns how many advertisements were sent: gratuitous ARP
// requests for IPv4 (each comes with a reply) plus neighbor advertisements.
func (h *harness) advertisements() int {
	arps, nas := h.dial.sent()
	n := len(nas)
	for _, s := range arps {
		if s.p.Operation == arp.OperationRequest {
			n++
		}
	}
	return n
}

var errBoom = errors.New("boom")

// waitBurst waits until the burst for vip has ended by itself. The timeout
// only guards against a hung test.
func (h *harness) waitBurst(t *testing.T, vip netip.Addr) {
	t.Helper()
	h.a.mu.Lock()
	b, ok := h.a.bursts[vip]
	h.a.mu.Unlock()
	if !ok {
		t.Fatalf("no burst for %s", vip)
	}
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("burst for %s did not end", vip)
	}
}
