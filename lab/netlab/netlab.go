// Package netlab builds network-namespace labs for vipd end-to-end tests
// and benchmarks: a switch namespace holding a bridge, N node namespaces and
// a client namespace, each linked to the bridge by a veth pair, with helpers
// to run vipd, vipctl, a tiny HTTP server and a VIP prober inside them.
//
// Everything needs root and is meant for tests gated by SkipUnlessEnabled
// (VIPD_NETNS_TESTS=1). A Lab only creates namespaces and processes of its
// own, named with a unique prefix, and removes them (processes by PID) in
// t.Cleanup. Nothing is added to the root namespace except the namespace
// names under /run/netns. Addresses are from 192.0.2.0/24 and
// 2001:db8::/64; there are no default routes. Every wait is bounded.
package netlab

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// Lab addressing. Node i (1-based) is 192.0.2.(10+i) and 2001:db8::(10+i)
// with MAC 02:00:00:00:00:(10+i) in hex digits; the client is .100.
var (
	// VIP4 is the IPv4 VIP the default vipd configuration manages.
	VIP4 = netip.MustParseAddr("192.0.2.10")
	// VIP6 is the IPv6 VIP, managed when Options.IPv6 is set.
	VIP6 = netip.MustParseAddr("2001:db8::10")
)

// HTTPPort is where StartHTTP serves inside a node namespace.
const HTTPPort = 6443

// Iface is the name of every host's lab interface inside its namespace
// (Host.Iface()), unless Options.BondVLAN is set.
const Iface = "eth0"

// With Options.BondVLAN, every host's addresses are on BondVLANIface, VLAN
// BondVLANID of the active-backup bond BondIface, whose slaves are
// BondSlaves.
const (
	BondIface     = "bond0"
	BondVLANID    = 100
	BondVLANIface = "bond0.100"
)

// BondSlaves are the veths enslaved to BondIface, each linked to the bridge
// by a port of its own (Host.Ports, in this order); the first is active
// after creation.
var BondSlaves = []string{"eth0", "eth1"}

// Bridge is the name of the bridge inside the switch namespace.
const Bridge = "br0"

// SkipUnlessEnabled skips t unless it runs as root with VIPD_NETNS_TESTS=1
// and ip(8) is installed (netnstest.SkipUnlessEnabled).
func SkipUnlessEnabled(t testing.TB) {
	t.Helper()
	netnstest.SkipUnlessEnabled(t)
}

// Options shape a lab.
type Options struct {
	// Nodes is the number of node namespaces. [3]
	Nodes int
	// IPv6 also gives every host an address in 2001:db8::/64 (no DAD).
	IPv6 bool
	// Client creates the client namespace. [true when nil]
	Client *bool
	// BondVLAN wires every host (nodes and client) the way control-plane
	// hosts often are: an 802.1Q interface (BondVLANIface) over a bond in
	// active-backup mode (BondIface, miimon 100) of two veths, each to
	// its own bridge port, instead of one veth. The bridge carries the
	// tagged frames as they are. [false: one veth, Iface]
	BondVLAN bool
	// Settle bounds convergence after the lab's vipds start and after
	// every event a lab waits out (Lab.Settle), before scaling by
	// Slowdown. [DefaultSettle]
	Settle time.Duration
}

// Host is one namespace attached to the lab bridge.
type Host struct {
	// Name is the short name: "n1", "n2", ... or "client". vipd runs with
	// node_name = Name.
	Name string
	// NS is the network namespace name.
	NS string
	// Port is the bridge-side veth of this host inside the switch namespace
	// (with Options.BondVLAN, the first slave's; see Ports).
	Port string
	// Ports are the bridge-side veths of this host: Port alone, or one per
	// bond slave (BondSlaves) with Options.BondVLAN.
	Ports []string
	// iface is what Iface returns ("" for Iface).
	iface string
	// IP and IP6 are the host's addresses on Iface() (IP6 invalid without
	// Options.IPv6).
	IP, IP6 netip.Addr
	// MAC is the hardware address of the host's Iface().
	MAC net.HardwareAddr
	// Dir is the host's own directory: configuration, state, logs.
	Dir string
}

// Lab is a running namespace lab. Create it with New; it is torn down in
// t.Cleanup.
type Lab struct {
	// Prefix starts every namespace name of this lab.
	Prefix string
	// Switch is the namespace holding Bridge.
	Switch string
	// Nodes are the node namespaces, n1..nN.
	Nodes []*Host
	// Client is the client namespace (nil when not created).
	Client *Host
	// Dir holds the lab's files; removed at teardown unless the test failed
	// and VIPD_KEEP_LAB=1.
	Dir string
	// Tools are the binaries the lab runs.
	Tools Tools
	// IPv6 records Options.IPv6.
	IPv6 bool
	// BondVLAN records Options.BondVLAN.
	BondVLAN bool
	// Settle bounds convergence after start and after every event:
	// Options.Settle scaled by Slowdown.
	Settle time.Duration
	// StopTimeout bounds a SIGTERM shutdown of vipd (handoff_timeout is
	// 10 s by default): DefaultStopTimeout scaled by Slowdown.
	StopTimeout time.Duration

	t testing.TB

	mu    sync.Mutex
	nss   []string         // created namespaces, in creation order
	procs []*Proc          // every process started, for cleanup
	vipds map[string]*Vipd // current vipd per node name
	https map[string]*Proc // current HTTP server per node name
}

// New creates a lab for t: the switch namespace with the bridge, the node
// and client namespaces, their veths and addresses. Failures stop the test;
// everything created is removed in t.Cleanup, in reverse order.
func New(t testing.TB, o Options) *Lab {
	t.Helper()
	SkipUnlessEnabled(t)
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes > 80 {
		t.Fatalf("netlab: at most 80 nodes, got %d", o.Nodes)
	}
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	prefix := fmt.Sprintf("vt-%d-%04x", os.Getpid(), h.Sum32()&0xffff)
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	l := &Lab{Prefix: prefix, Switch: prefix + "-sw", Dir: dir, IPv6: o.IPv6, BondVLAN: o.BondVLAN, t: t,
		Settle: Scaled(o.Settle), StopTimeout: Scaled(DefaultStopTimeout),
		vipds: map[string]*Vipd{}, https: map[string]*Proc{}}
	t.Cleanup(l.teardown)
	l.Tools = SharedTools(t)

	l.mustAddNS(l.Switch)
	netnstest.Bridge(t, l.Switch, Bridge)
	for i := 1; i <= o.Nodes; i++ {
		l.Nodes = append(l.Nodes, l.addHost(fmt.Sprintf("n%d", i), 10+i))
	}
	if o.Client == nil || *o.Client {
		l.Client = l.addHost("client", 100)
	}
	return l
}

func (l *Lab) addHost(name string, octet int) *Host {
	h := &Host{
		Name: name,
		NS:   l.Prefix + "-" + name,
		Port: "p-" + name,
		IP:   netip.AddrFrom4([4]byte{192, 0, 2, byte(octet)}),
		MAC:  net.HardwareAddr{0x02, 0, 0, 0, 0, byte(octet)},
		Dir:  filepath.Join(l.Dir, name),
	}
	h.Ports = []string{h.Port}
	if l.BondVLAN {
		h.iface = BondVLANIface
		h.Ports = nil
		for i := range BondSlaves {
			h.Ports = append(h.Ports, fmt.Sprintf("p-%s%c", name, 'a'+i))
		}
		h.Port = h.Ports[0]
	}
	for _, p := range h.Ports {
		if len(p) > 15 {
			l.t.Fatalf("netlab: port name %q too long", p)
		}
	}
	if l.IPv6 {
		h.IP6 = netip.MustParseAddr(fmt.Sprintf("2001:db8::%d", octet))
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	l.mustAddNS(h.NS)
	// Keep statically added IPv6 addresses (the VIP) across link down/up,
	// like IPv4 does, so link tests see what vipd does and not the kernel.
	l.must("ip", "netns", "exec", h.NS, "sysctl", "-q", "-w", "net.ipv6.conf.all.keep_addr_on_down=1", "net.ipv6.conf.default.keep_addr_on_down=1")
	if err := l.attach(h); err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	return h
}

// attach creates h's veth pair (Iface in h's namespace, h.Port on the
// bridge) with h's MAC and addresses, and sets both ends up. With
// Options.BondVLAN it creates a veth pair per bond slave instead, the bond
// (h's MAC) and the VLAN interface on it, which gets the addresses.
func (l *Lab) attach(h *Host) error {
	var steps [][]string
	if l.BondVLAN {
		steps = append(steps, []string{"-n", h.NS, "link", "add", BondIface, "type", "bond", "mode", "active-backup", "miimon", "100"})
		for i, slave := range BondSlaves {
			steps = append(steps,
				[]string{"-n", l.Switch, "link", "add", h.Ports[i], "type", "veth", "peer", "name", slave, "netns", h.NS},
				[]string{"-n", l.Switch, "link", "set", h.Ports[i], "master", Bridge, "up"},
				[]string{"-n", h.NS, "link", "set", slave, "master", BondIface})
		}
		steps = append(steps,
			[]string{"-n", h.NS, "link", "set", BondIface, "address", h.MAC.String()},
			[]string{"-n", h.NS, "link", "add", "link", BondIface, "name", BondVLANIface, "type", "vlan", "id", fmt.Sprint(BondVLANID)})
	} else {
		steps = append(steps,
			[]string{"-n", l.Switch, "link", "add", h.Port, "type", "veth", "peer", "name", Iface, "netns", h.NS},
			[]string{"-n", l.Switch, "link", "set", h.Port, "master", Bridge, "up"},
			[]string{"-n", h.NS, "link", "set", Iface, "address", h.MAC.String()})
	}
	steps = append(steps, []string{"-n", h.NS, "addr", "add", h.IP.String() + "/24", "dev", h.Iface()})
	if h.IP6.IsValid() {
		steps = append(steps, []string{"-n", h.NS, "addr", "add", h.IP6.String() + "/64", "dev", h.Iface(), "nodad"})
	}
	if l.BondVLAN {
		for _, slave := range BondSlaves {
			steps = append(steps, []string{"-n", h.NS, "link", "set", slave, "up"})
		}
		steps = append(steps, []string{"-n", h.NS, "link", "set", BondIface, "up"})
	}
	steps = append(steps, []string{"-n", h.NS, "link", "set", h.Iface(), "up"})
	for _, s := range steps {
		if _, err := Run("ip", s...); err != nil {
			return err
		}
	}
	return nil
}

// Iface returns the interface that holds h's addresses and that vipd
// manages the VIP on: Iface, or BondVLANIface with Options.BondVLAN.
func (h *Host) Iface() string {
	if h.iface == "" {
		return Iface
	}
	return h.iface
}

// DeleteLink deletes h's interface (and with it its bridge port, the other
// end of the veth pair): the interface vipd was configured with is gone.
// Not with Options.BondVLAN.
func (l *Lab) DeleteLink(h *Host) error {
	if l.BondVLAN {
		return fmt.Errorf("netlab: DeleteLink on a BondVLAN lab")
	}
	_, err := Run("ip", "-n", h.NS, "link", "del", Iface)
	return err
}

// RecreateLink creates h's interface again after DeleteLink, as a network
// manager would: same name and MAC, h's own addresses, attached to the
// bridge and up. The VIP is not added; that is vipd's job. The new
// interface has a new index.
func (l *Lab) RecreateLink(h *Host) error {
	return l.attach(h)
}

// SetPort sets h's bridge port i (an index into h.Ports) down or up from
// the switch side, as a pulled cable or a failed switch port: h's end of
// that veth loses or regains its carrier.
func (l *Lab) SetPort(h *Host, i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	_, err := Run("ip", "-n", l.Switch, "link", "set", h.Ports[i], state)
	return err
}

// ActiveSlave returns the active slave of h's bond (Options.BondVLAN).
func (l *Lab) ActiveSlave(h *Host) (string, error) {
	out, err := l.Exec(h, "cat", "/proc/net/bonding/"+BondIface)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Currently Active Slave: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no active slave in /proc/net/bonding/%s of %s:\n%s", BondIface, h.Name, out)
}

func (l *Lab) mustAddNS(ns string) {
	l.must("ip", "netns", "add", ns)
	l.mu.Lock()
	l.nss = append(l.nss, ns)
	l.mu.Unlock()
	l.must("ip", "-n", ns, "link", "set", "lo", "up")
}

// teardown kills every process the lab started (by PID), deletes its
// namespaces and, unless the test failed with VIPD_KEEP_LAB=1, its files.
func (l *Lab) teardown() {
	if l.t.Failed() {
		l.DumpLogs()
	}
	l.mu.Lock()
	procs, nss := l.procs, l.nss
	l.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	for i := len(nss) - 1; i >= 0; i-- {
		if out, err := Run("ip", "netns", "del", nss[i]); err != nil {
			l.t.Errorf("netlab teardown: %v %s", err, out)
		}
	}
	if l.t.Failed() && os.Getenv("VIPD_KEEP_LAB") == "1" {
		l.t.Logf("netlab: files kept in %s", l.Dir)
		return
	}
	os.RemoveAll(l.Dir)
}

// DumpLogs writes every vipd log of the lab to the test log.
func (l *Lab) DumpLogs() {
	for _, n := range l.Nodes {
		b, err := os.ReadFile(filepath.Join(n.Dir, "vipd.log"))
		if err != nil {
			continue
		}
		l.t.Logf("==== vipd log of %s (%s) ====\n%s", n.Name, n.NS, b)
	}
}

// Node returns the node called name, failing the test if there is none.
func (l *Lab) Node(name string) *Host {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n
		}
	}
	l.t.Fatalf("netlab: no node %q", name)
	return nil
}

// Run runs a command and returns its combined output; the error carries
// the command line and output. It is netnstest.Run, under the name the lab
// packages that start vipd know.
func Run(name string, args ...string) (string, error) { return netnstest.Run(name, args...) }

func (l *Lab) must(name string, args ...string) string {
	l.t.Helper()
	out, err := Run(name, args...)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	return out
}

// Exec runs argv inside h's namespace and returns its combined output.
func (l *Lab) Exec(h *Host, argv ...string) (string, error) {
	return Run("ip", append([]string{"netns", "exec", h.NS}, argv...)...)
}

// LinkDown sets h's interface down inside its namespace.
func (l *Lab) LinkDown(h *Host) {
	l.t.Helper()
	l.must("ip", "-n", h.NS, "link", "set", h.Iface(), "down")
}

// LinkUp sets h's interface up inside its namespace.
func (l *Lab) LinkUp(h *Host) { l.t.Helper(); l.must("ip", "-n", h.NS, "link", "set", h.Iface(), "up") }

// Cut detaches h's port from the bridge: h keeps its link up but reaches
// nobody (a switch-side failure).
func (l *Lab) Cut(h *Host) {
	l.t.Helper()
	l.must("ip", "-n", l.Switch, "link", "set", h.Port, "nomaster")
}

// Uncut attaches h's port to the bridge again.
func (l *Lab) Uncut(h *Host) {
	l.t.Helper()
	l.must("ip", "-n", l.Switch, "link", "set", h.Port, "master", Bridge, "up")
}

// Addrs returns the addresses on h's interface.
func (l *Lab) Addrs(h *Host) ([]netip.Prefix, error) {
	out, err := Run("ip", "-n", h.NS, "-o", "addr", "show", "dev", h.Iface())
	if err != nil {
		return nil, err
	}
	return parseAddrs(out)
}

// parseAddrs reads `ip -o addr` lines.
func parseAddrs(out string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" || f[i] == "inet6" {
				p, err := netip.ParsePrefix(f[i+1])
				if err != nil {
					return nil, fmt.Errorf("parse %q: %w", line, err)
				}
				ps = append(ps, p)
				break
			}
		}
	}
	return ps, nil
}

// HasAddr reports whether addr is on h's interface.
func (l *Lab) HasAddr(h *Host, addr netip.Addr) (bool, error) {
	ps, err := l.Addrs(h)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.Addr() == addr {
			return true, nil
		}
	}
	return false, nil
}

// AddrHolders returns the names of the nodes that have addr on their
// interface.
func (l *Lab) AddrHolders(addr netip.Addr) ([]string, error) {
	var names []string
	for _, n := range l.Nodes {
		ok, err := l.HasAddr(n, addr)
		if err != nil {
			return nil, err
		}
		if ok {
			names = append(names, n.Name)
		}
	}
	return names, nil
}

// Neigh returns the MAC address and state of h's neighbor entry for addr
// ("" when there is none or it has no lladdr, e.g. FAILED).
func (l *Lab) Neigh(h *Host, addr netip.Addr) (mac, state string, err error) {
	out, err := Run("ip", "-n", h.NS, "neigh", "show", addr.String(), "dev", h.Iface())
	if err != nil {
		return "", "", err
	}
	return parseNeigh(out)
}

func parseNeigh(out string) (mac, state string, err error) {
	line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(out), "\n", 2)[0])
	if line == "" {
		return "", "", nil
	}
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			mac = f[i+1]
		}
	}
	return mac, f[len(f)-1], nil
}

// WaitNeigh waits up to timeout until from's neighbor entry for addr has
// owner's MAC (after a VIP moved: the client follows the gratuitous ARP or
// NA); the error says what it saw last.
func (l *Lab) WaitNeigh(from *Host, addr netip.Addr, owner *Host, timeout time.Duration) error {
	ok, detail := Eventually(timeout, 50*time.Millisecond, func() (bool, string) {
		mac, state, err := l.Neigh(from, addr)
		if err != nil {
			return false, err.Error()
		}
		who := "no node"
		if n := l.NodeByMAC(mac); n != nil {
			who = n.Name
		}
		return strings.EqualFold(mac, owner.MAC.String()), fmt.Sprintf("lladdr %q (%s) state %s", mac, who, state)
	})
	if !ok {
		return fmt.Errorf("%s's neighbor entry for %s on %s: want %s's MAC %s, saw %s", from.Name, addr, from.Iface(), owner.Name, owner.MAC, detail)
	}
	return nil
}

// NodeByMAC returns the node with that MAC address, or nil.
func (l *Lab) NodeByMAC(mac string) *Host {
	for _, n := range l.Nodes {
		if strings.EqualFold(n.MAC.String(), mac) {
			return n
		}
	}
	return nil
}

// Eventually calls check every interval until it returns true or timeout
// passes; it returns whether check succeeded and the last detail it gave,
// for the failure message (netnstest.Poll).
func Eventually(timeout, interval time.Duration, check func() (bool, string)) (bool, string) {
	return netnstest.Poll(timeout, interval, check)
}
