package l2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/internal/ifname"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultGARPCount is the number of advertisements sent per Announce.
	DefaultGARPCount = 5
	// DefaultGARPInterval is the spacing between advertisements of a burst.
	DefaultGARPInterval = 200 * time.Millisecond
	// MinRefreshInterval is the shortest Config.RefreshInterval other
	// than 0 (off): a refresh is a correction for the neighbours that
	// missed the burst, not a second burst.
	MinRefreshInterval = time.Second
)

// Config configures an Announcer. The zero value of every field except
// Interface selects the default given next to it.
type Config struct {
	// Interface is the name of the interface that carries the VIP, for
	// example "eth0", "bond0" or, in Quiet mode, "lo". Required.
	Interface string

	// Quiet makes the Announcer only add and remove addresses and send no
	// gratuitous ARP or neighbor advertisement. BGP mode uses it to bind the
	// VIP on "lo". WatchConflicts is unavailable in Quiet mode.
	Quiet bool

	// GARPCount is the number of advertisements sent per Announce: for IPv4
	// each one is a gratuitous ARP request plus a gratuitous ARP reply, for
	// IPv6 one unsolicited neighbor advertisement. Default DefaultGARPCount
	// (5). Must not be negative.
	GARPCount int

	// GARPInterval is the spacing between the advertisements of one burst.
	// Default DefaultGARPInterval (200ms). Must not be negative.
	GARPInterval time.Duration

	// RefreshInterval is the period of the refresh: while a VIP is
	// announced (until Withdraw, Quiesce, Silence or Close), one more
	// advertisement of it follows the burst every RefreshInterval, so that
	// a neighbour whose entry for the VIP points elsewhere (it missed the
	// burst, or took a stale holder's word) points at this interface again
	// within one period. A refresh is sent only while the VIP's host prefix
	// is on the interface. Default 0: no refresh (vipd turns it on with
	// l2.refresh_interval). 0 or at least MinRefreshInterval (1s).
	RefreshInterval time.Duration

	// Logger receives state changes at info level and burst failures at warn
	// level. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports what is wrong with c, or nil: an interface name the
// kernel would refuse (empty, longer than 15 bytes, ".", "..", or holding
// '/', ':' or white space), a negative GARPCount or GARPInterval, a
// RefreshInterval ValidRefreshInterval refuses. New
// refuses what Validate refuses.
func (c Config) Validate() error {
	if err := ifname.Check(c.Interface); err != nil {
		return err
	}
	if c.GARPCount < 0 {
		return fmt.Errorf("GARPCount must not be negative, got %d", c.GARPCount)
	}
	if c.GARPInterval < 0 {
		return fmt.Errorf("GARPInterval must not be negative, got %s", c.GARPInterval)
	}
	if err := ValidRefreshInterval(c.RefreshInterval); err != nil {
		return fmt.Errorf("RefreshInterval: %w", err)
	}
	return nil
}

// ValidRefreshInterval reports what is wrong with d as a
// Config.RefreshInterval, or nil: it must be 0 (off) or at least
// MinRefreshInterval.
func ValidRefreshInterval(d time.Duration) error {
	if d != 0 && d < MinRefreshInterval {
		return fmt.Errorf("must be 0 (off) or at least %s, got %s", MinRefreshInterval, d)
	}
	return nil
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("l2: %w", err)
	}
	if c.GARPCount == 0 {
		c.GARPCount = DefaultGARPCount
	}
	if c.GARPInterval == 0 {
		c.GARPInterval = DefaultGARPInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// An Announcer adds VIPs to one interface, advertises them on the link and
// removes them again. It is safe for concurrent use. Close releases it.
type Announcer struct {
	cfg   Config
	log   *slog.Logger
	addrs addrManager
	dial  dialer
	after func(time.Duration) <-chan time.Time

	// ctx ends when Close is called; bursts and WatchConflicts derive from it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts burst goroutines and running WatchConflicts calls.
	wg sync.WaitGroup

	// mu serialises address changes and guards the fields below.
	mu     sync.Mutex
	closed bool
	bursts map[netip.Addr]*burst
	// Advertisement sockets, opened on first use for the interface index
	// they were opened on.
	arp      arpConn
	arpIndex int
	ndp      ndpConn
	ndpIndex int
	// filter installs the daisy-chaining rules (nil: no nftables, and
	// filterErr says why); forwards and quiesced are the VIPs this
	// Announcer installed rules for, removed by Close.
	filter    filter
	filterErr error
	forwards  map[netip.Addr]bool
	quiesced  map[netip.Addr]bool
	lingering map[netip.Addr]bool // Linger's routes and rules
}

// burst is one running advertisement goroutine.
type burst struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New validates cfg and returns an Announcer for cfg.Interface. It opens a
// netlink socket and an nftables (netfilter netlink) socket in the calling
// thread's network namespace; the interface does not have to exist yet.
// Advertisement sockets are opened on first use. A kernel without nftables
// does not fail New: Forward and Quiesce then return ErrForwardUnsupported.
func New(cfg Config) (*Announcer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("l2: open netlink: %w", err)
	}
	a := newAnnouncer(cfg, &netlinkAddrs{h: h}, kernelDialer{}, time.After)
	if f, err := newNftFilter(); err != nil {
		a.filterErr = err
	} else {
		a.filter = f
	}
	return a, nil
}

// newAnnouncer builds an Announcer on the given kernel seams. cfg must have
// passed withDefaults.
func newAnnouncer(cfg Config, addrs addrManager, d dialer, after func(time.Duration) <-chan time.Time) *Announcer {
	ctx, cancel := context.WithCancel(context.Background())
	return &Announcer{
		cfg:       cfg,
		log:       cfg.Logger.With("interface", cfg.Interface),
		addrs:     addrs,
		dial:      d,
		after:     after,
		ctx:       ctx,
		cancel:    cancel,
		bursts:    make(map[netip.Addr]*burst),
		forwards:  make(map[netip.Addr]bool),
		quiesced:  make(map[netip.Addr]bool),
		lingering: make(map[netip.Addr]bool),
	}
}

// Announce ensures addr's host prefix is configured on the interface, as an
// address the kernel never takes as the source of the host's own
// connections: a /32 with scope host for IPv4, a /128 with IFA_F_NODAD,
// preferred lifetime 0 (deprecated) and valid lifetime forever for IPv6.
// Unless Quiet, it then sends a burst of Config.GARPCount advertisements
// spaced by Config.GARPInterval, and one more every Config.RefreshInterval
// after it (if set) until Withdraw, Quiesce, Silence or Close.
//
// Only the exact host prefix counts: an address with addr's IP and another
// prefix length, such as the host's own 192.0.2.11/24 when addr is
// 192.0.2.11, is left alone and the /32 is added beside it. The kernel holds
// an IPv6 address only once per interface, so an IPv6 addr already configured
// with another prefix length cannot be announced: Announce returns an error
// and changes nothing.
//
// Announce is idempotent: a host prefix already present with those
// attributes is not added again (one present with others gets them: an
// IPv4 one is removed and added back, since the kernel keeps the scope of
// an existing IPv4 address), and a burst already running for addr is
// replaced by a new one. The first
// advertisement is sent before Announce returns; the others are sent by a
// goroutine owned by the Announcer, which a later Withdraw, Quiesce or
// Silence of addr, or Close, stops. ctx bounds only the work done before
// Announce returns: the burst and refresh outlive it.
//
// If the first advertisement fails, Announce retries it once on a fresh
// socket. If the address was added but the advertisement still could not be
// sent, Announce returns an error and leaves the address in place.
func (a *Announcer) Announce(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("announce %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("announce %s: %w", vip, err)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("announce %s: %w", vip, net.ErrClosed)
	}
	a.stopBurstLocked(vip)
	// A quiesced VIP announced again: the handoff was called off.
	if err := a.endQuiesceLocked(vip); err != nil {
		return fmt.Errorf("announce %s: %w", vip, err)
	}

	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		return fmt.Errorf("announce %s: %w", vip, err)
	}
	did, err := a.ensureLocked(ifi, vip)
	if err != nil {
		return fmt.Errorf("announce %s: %w", vip, err)
	}
	// A lingering VIP announced again (this host holds it once more): its
	// connections are its own again, the address is back.
	if a.filter != nil {
		if err := a.stopLingerLocked(vip); err != nil {
			return fmt.Errorf("announce %s: %w", vip, err)
		}
	}
	switch did {
	case "added":
		a.log.Info("vip address added", "vip", vip, "prefix", hostPrefix(vip))
	case "restored":
		a.log.Info("vip address found with other attributes (a plain address the host could take as its source); set them again", "vip", vip, "prefix", hostPrefix(vip))
	}
	if a.cfg.Quiet {
		return nil
	}

	send, err := a.senderLocked(ifi, vip)
	if err != nil {
		return fmt.Errorf("announce %s: %w", vip, err)
	}
	if err := send(); err != nil {
		// A cached packet socket can hold a stale error ("network is
		// down" after the link flapped): try once more on a fresh one.
		a.dropConnLocked(vip)
		a.log.Debug("advertisement failed; retrying on a fresh socket", "vip", vip, "err", err)
		if send, err = a.senderLocked(ifi, vip); err != nil {
			return fmt.Errorf("announce %s: %w", vip, err)
		}
		if err := send(); err != nil {
			a.dropConnLocked(vip)
			return fmt.Errorf("announce %s: send advertisement: %w", vip, err)
		}
	}
	if a.cfg.GARPCount > 1 || a.cfg.RefreshInterval > 0 {
		bctx, cancel := context.WithCancel(a.ctx)
		b := &burst{cancel: cancel, done: make(chan struct{})}
		a.bursts[vip] = b
		a.wg.Add(1)
		go a.runBurst(bctx, b, vip)
	}
	a.log.Debug("vip advertised", "vip", vip, "advertisements", a.cfg.GARPCount)
	return nil
}

// ensureLocked adds vip's host prefix to ifi, with the attributes of
// vipAttrs, unless it is already there with them. It reports what it did:
// "added", "restored" (the address was there with other attributes, say
// re-added by a network manager as a plain global address: it is given
// vipd's again) or "" (nothing).
func (a *Announcer) ensureLocked(ifi *net.Interface, vip netip.Addr) (string, error) {
	present, err := a.addrs.list(ifi)
	if err != nil {
		return "", fmt.Errorf("list addresses on %s: %w", ifi.Name, err)
	}
	host, want := hostPrefix(vip), vipAttrs(vip)
	for _, p := range present {
		if p.prefix != host {
			continue
		}
		if p.attrs.asVIPAdds(vip) {
			return "", nil
		}
		// The kernel keeps the scope of an IPv4 address that is added
		// again: remove it first. (An IPv6 one gets its flags and
		// lifetimes replaced in place.)
		if vip.Is4() {
			if err := a.addrs.del(ifi, host); err != nil {
				return "", fmt.Errorf("delete %s from %s to add it back with scope host: %w", host, ifi.Name, err)
			}
		}
		if err := a.addrs.add(ifi, host, want); err != nil {
			return "", fmt.Errorf("restore the attributes of %s on %s: %w", host, ifi.Name, err)
		}
		return "restored", nil
	}
	if vip.Is6() {
		for _, p := range present {
			if p.prefix.Addr() == vip {
				return "", fmt.Errorf("%w: %s is configured on %s as %s, and the kernel holds an IPv6 address once per interface", errOtherPrefix, vip, ifi.Name, p.prefix)
			}
		}
	}
	if err := a.addrs.add(ifi, host, want); err != nil {
		return "", fmt.Errorf("add %s to %s: %w", host, ifi.Name, err)
	}
	return "added", nil
}

// runBurst sends the advertisements after the first one: the rest of the
// burst, spaced by GARPInterval, then one every RefreshInterval (none when
// it is 0), until ctx ends.
func (a *Announcer) runBurst(ctx context.Context, b *burst, vip netip.Addr) {
	defer a.wg.Done()
	defer close(b.done)
	failing := false
	for i := 1; ; i++ {
		wait := a.cfg.GARPInterval
		if i >= a.cfg.GARPCount {
			if a.cfg.RefreshInterval == 0 {
				return
			}
			wait = a.cfg.RefreshInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-a.after(wait):
		}
		sent, err := a.readvertise(ctx, vip)
		switch {
		case !sent && err == nil:
			if ctx.Err() != nil {
				return
			}
		case err != nil && !failing:
			failing = true
			a.log.Warn("vip advertisement failed", "vip", vip, "attempt", i+1, "err", err)
		case err != nil:
			a.log.Debug("vip advertisement failed", "vip", vip, "attempt", i+1, "err", err)
		case failing:
			failing = false
			a.log.Info("vip advertisement sent again", "vip", vip, "attempt", i+1)
		}
	}
}

// readvertise sends one more advertisement of vip, the way Announce sent
// the first (retried once on a fresh socket), unless ctx has ended or vip's
// host prefix is not on the interface: it reports whether it sent one. It
// holds a.mu, under which Withdraw, Quiesce, Silence, Announce and Close
// cancel ctx: once one of them returned, nothing more is sent. It reads the
// interface again each time, so a refresh follows a new index or MAC.
func (a *Announcer) readvertise(ctx context.Context, vip netip.Addr) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ctx.Err() != nil || a.closed {
		return false, nil
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		return false, err
	}
	present, err := a.addrs.list(ifi)
	if err != nil {
		return false, fmt.Errorf("list addresses on %s: %w", ifi.Name, err)
	}
	if !slices.ContainsFunc(present, func(p ifAddr) bool { return p.prefix == hostPrefix(vip) }) {
		a.log.Debug("vip address not on the interface: not advertised", "vip", vip, "prefix", hostPrefix(vip))
		return false, nil
	}
	send, err := a.senderLocked(ifi, vip)
	if err == nil {
		if err = send(); err != nil {
			a.dropConnLocked(vip)
			if send, err = a.senderLocked(ifi, vip); err == nil {
				err = send()
			}
		}
	}
	if err != nil {
		a.dropConnLocked(vip)
		return false, err
	}
	return true, nil
}

// stopBurstLocked stops the burst and refresh of vip, if any. Its goroutine
// sends only under a.mu, after checking its context, so it sends nothing
// once this returns; it ends by itself (Close waits for it).
func (a *Announcer) stopBurstLocked(vip netip.Addr) {
	b, ok := a.bursts[vip]
	if !ok {
		return
	}
	b.cancel()
	delete(a.bursts, vip)
}

// Silence stops the advertisements of addr (a running burst and the
// refresh) and keeps its address: the host still answers ARP and neighbor
// solicitations for it, but no longer tells the link unasked. A holder
// handing the VIP off make-before-break calls it, so that a refresh cannot
// point the clients back at it after its successor announced the VIP.
// Announce starts them again; Withdraw removes the address. Silencing a
// VIP that is not advertised is not an error.
func (a *Announcer) Silence(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("silence %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("silence %s: %w", vip, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("silence %s: %w", vip, net.ErrClosed)
	}
	if _, ok := a.bursts[vip]; ok {
		a.stopBurstLocked(vip)
		a.log.Info("vip advertisements stopped; address kept", "vip", vip)
	}
	return nil
}

// Withdraw stops any burst and refresh for addr and removes addr's host
// prefix (/32 or /128) from the interface. Any other address with addr's
// IP, such as the host's own 192.0.2.11/24, stays. Withdraw is idempotent: an absent address,
// or a missing interface, is not an error.
func (a *Announcer) Withdraw(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("withdraw %s: %w", vip, err)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("withdraw %s: %w", vip, net.ErrClosed)
	}
	a.stopBurstLocked(vip)
	removed, err := removeHostPrefix(a.addrs, a.cfg.Interface, vip)
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", vip, err)
	}
	if removed {
		a.log.Info("vip address removed", "vip", vip, "prefix", hostPrefix(vip))
	}
	if a.filter != nil {
		if err := a.stopLingerLocked(vip); err != nil {
			return fmt.Errorf("withdraw %s: %w", vip, err)
		}
	}
	if err := a.endQuiesceLocked(vip); err != nil {
		return fmt.Errorf("withdraw %s: %w", vip, err)
	}
	return nil
}

// SetLifetime gives addr's host prefix, which must be on the interface, a
// kernel lifetime of life, rounded down to whole seconds (at least one;
// 0: forever again): when it runs out, the kernel removes the address by
// itself (with up to a second of slack), whatever happens to this process.
// vipd leaves a VIP this way for the process that succeeds it in a restart
// in place; the successor makes it forever again. The lifetime is the valid
// one: the other attributes stay as Announce set them (an IPv6 VIP stays
// deprecated). While it runs, Verify of an IPv6 VIP reports false (it is
// not permanent), and Announce would make it forever again.
func (a *Announcer) SetLifetime(ctx context.Context, addr netip.Addr, life time.Duration) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("set lifetime of %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("set lifetime of %s: %w", vip, err)
	}
	if life < 0 {
		return fmt.Errorf("set lifetime of %s: negative lifetime %s", vip, life)
	}
	if life > 0 && life < time.Second {
		life = time.Second
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("set lifetime of %s: %w", vip, net.ErrClosed)
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		return fmt.Errorf("set lifetime of %s: %w", vip, err)
	}
	present, err := hasHostPrefix(a.addrs, a.cfg.Interface, vip)
	if err != nil {
		return fmt.Errorf("set lifetime of %s: %w", vip, err)
	}
	if !present {
		return fmt.Errorf("set lifetime of %s: %s is not on %s", vip, hostPrefix(vip), a.cfg.Interface)
	}
	if err := a.addrs.setLifetime(ifi, hostPrefix(vip), vipAttrs(vip), life.Truncate(time.Second)); err != nil {
		return fmt.Errorf("set lifetime of %s on %s: %w", vip, a.cfg.Interface, err)
	}
	if life > 0 {
		a.log.Info("vip address lifetime set: the kernel removes it unless it is made forever again", "vip", vip, "lifetime", life.Truncate(time.Second))
	}
	return nil
}

// Verify reports whether addr's host prefix is on the interface as
// Announce left it: present, and with the attributes that keep the kernel
// from taking it as a source address (scope host for IPv4; deprecated and
// never expiring for IPv6). An address something else added back with
// other attributes, say as a plain global one, reads false, and Announce
// sets vipd's again. A caller that trusts the kernel over its memory calls
// Verify periodically and announces again when it reports false.
func (a *Announcer) Verify(_ context.Context, addr netip.Addr) (bool, error) {
	vip, got, ok, err := a.lookup("verify", addr)
	if err != nil {
		return false, err
	}
	return ok && got.attrs.asVIPAdds(vip), nil
}

// Held reports whether addr's host prefix (/32 or /128) is configured on the
// interface, whatever its attributes (Verify checks those too); the same IP
// with another prefix length does not count. A missing interface holds
// nothing and is not an error.
func (a *Announcer) Held(addr netip.Addr) (bool, error) {
	_, _, ok, err := a.lookup("held", addr)
	return ok, err
}

// lookup validates addr and returns it as a VIP with its host prefix as
// configured on the interface, and whether it is there. Errors start with
// op and the address.
func (a *Announcer) lookup(op string, addr netip.Addr) (netip.Addr, ifAddr, bool, error) {
	vip, err := vipAddr(addr)
	if err != nil {
		return netip.Addr{}, ifAddr{}, false, fmt.Errorf("%s %s: %w", op, addr, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return vip, ifAddr{}, false, fmt.Errorf("%s %s: %w", op, vip, net.ErrClosed)
	}
	got, ok, err := findHostPrefix(a.addrs, a.cfg.Interface, vip)
	if err != nil {
		return vip, ifAddr{}, false, fmt.Errorf("%s %s: %w", op, vip, err)
	}
	return vip, got, ok, nil
}

// Close stops all bursts, ends running WatchConflicts calls, waits for the
// Announcer's goroutines to return, removes the nftables rules of its
// Forward and Quiesce calls and closes its sockets. Addresses stay
// configured. Close is idempotent; other methods fail with net.ErrClosed
// afterwards.
func (a *Announcer) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.cancel()
	a.mu.Unlock()

	a.wg.Wait()

	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.bursts)
	var errs []error
	if a.arp != nil {
		errs = append(errs, a.arp.Close())
		a.arp = nil
	}
	if a.ndp != nil {
		errs = append(errs, a.ndp.Close())
		a.ndp = nil
	}
	errs = append(errs, a.closeFilterLocked())
	errs = append(errs, a.addrs.close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close announcer for %s: %w", a.cfg.Interface, err)
	}
	return nil
}

// vipAddr validates addr as a VIP and returns it in canonical form: IPv4
// addresses unmapped and zones removed.
func vipAddr(addr netip.Addr) (netip.Addr, error) {
	if !addr.IsValid() {
		return netip.Addr{}, errors.New("invalid address")
	}
	addr = addr.Unmap().WithZone("")
	switch {
	case addr.IsUnspecified():
		return netip.Addr{}, errors.New("unspecified address cannot be a VIP")
	case addr.IsMulticast():
		return netip.Addr{}, errors.New("multicast address cannot be a VIP")
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return netip.Addr{}, errors.New("broadcast address cannot be a VIP")
	}
	return addr, nil
}

// hostPrefix returns the single-address prefix of addr: /32 or /128.
func hostPrefix(addr netip.Addr) netip.Prefix {
	return netip.PrefixFrom(addr, addr.BitLen())
}
