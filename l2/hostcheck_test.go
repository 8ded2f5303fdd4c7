package l2

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// fakeHost is a hostReader over maps: the sysctls of a host whose defaults
// are the kernel's (arp_ignore 0, rp_filter 0, IPv6 on) unless a test
// sets them.
type fakeHost struct {
	sysctls  map[string]string
	addrs    map[string][]netip.Prefix // by interface name
	defaults []string
	noIPv6   bool
	routeErr error
}

func newFakeHost(set map[string]string, addrs map[string][]string, defaults ...string) *fakeHost {
	f := &fakeHost{sysctls: map[string]string{}, addrs: map[string][]netip.Prefix{}, defaults: defaults}
	for name, ps := range addrs {
		f.addrs[name] = prefixes(ps)
		for _, dev := range []string{"all", name} {
			f.sysctls[confPath("ipv4", dev, "arp_ignore")] = "0"
			f.sysctls[confPath("ipv4", dev, "rp_filter")] = "0"
			f.sysctls[confPath("ipv6", dev, "disable_ipv6")] = "0"
		}
	}
	for k, v := range set {
		f.sysctls[k] = v
	}
	return f
}

func (f *fakeHost) sysctl(path string) (string, error) {
	if f.noIPv6 && strings.HasPrefix(path, "net/ipv6/") {
		return "", fmt.Errorf("open /proc/sys/%s: %w", path, fs.ErrNotExist)
	}
	v, ok := f.sysctls[path]
	if !ok {
		return "", fmt.Errorf("open /proc/sys/%s: %w", path, fs.ErrNotExist)
	}
	return v, nil
}

func (f *fakeHost) prefixes(iface string) ([]netip.Prefix, error) {
	ps, ok := f.addrs[iface]
	if !ok {
		return nil, fmt.Errorf("%w: %s", errNoLink, iface)
	}
	return ps, nil
}

func (f *fakeHost) defaultRoutes() ([]string, error) { return f.defaults, f.routeErr }

func TestCheckHost(t *testing.T) {
	node := map[string][]string{"eth0": {"192.0.2.11/24", "2001:db8::11/64", "fe80::1/64"}}
	vlan := map[string][]string{"bond0.100": {"192.0.2.11/24"}, "eth0": {"198.51.100.11/24"}}
	outside4 := netip.MustParseAddr("203.0.113.10")
	type want struct{ sysctl, value, says string }
	for _, tt := range []struct {
		name  string
		host  *fakeHost
		iface string
		vip   netip.Addr
		want  []want
	}{
		{name: "defaults, vip inside the node's prefix", host: newFakeHost(nil, node, "eth0"), iface: "eth0", vip: vip4},
		{name: "ipv6 defaults", host: newFakeHost(nil, node, "eth0"), iface: "eth0", vip: vip6},
		{name: "arp_ignore 1 and 2 answer a vip inside a prefix", iface: "eth0", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/eth0/arp_ignore": "2"}, node)},
		{name: "arp_ignore 8 on all answers nothing", iface: "eth0", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/arp_ignore": "8"}, node),
			want: []want{{"net.ipv4.conf.all.arp_ignore", "1", "answers no ARP request"}}},
		{name: "arp_ignore 3 on the interface skips scope host", iface: "eth0", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/eth0/arp_ignore": "3"}, node),
			want: []want{{"net.ipv4.conf.eth0.arp_ignore", "1", "scope host"}}},
		{name: "arp_ignore 3 on both names both", iface: "eth0", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/arp_ignore": "3", "net/ipv4/conf/eth0/arp_ignore": "3"}, node),
			want: []want{{"net.ipv4.conf.all.arp_ignore", "1", "scope host"}, {"net.ipv4.conf.eth0.arp_ignore", "1", "scope host"}}},
		{name: "vip outside every prefix", iface: "eth0", vip: outside4, host: newFakeHost(nil, node, "eth0"),
			want: []want{{"", "", "203.0.113.10 is outside every prefix on eth0 (192.0.2.11/24)"}}},
		{name: "vip outside every prefix with arp_ignore 2", iface: "eth0", vip: outside4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/eth0/arp_ignore": "2"}, node, "eth0"),
			want: []want{{"", "", "outside every prefix"}, {"net.ipv4.conf.eth0.arp_ignore", "1", "outside them all"}}},
		{name: "interface without an address", iface: "eth1", vip: vip4,
			host: newFakeHost(nil, map[string][]string{"eth1": nil, "eth0": {"192.0.2.11/24"}}),
			want: []want{{"", "", "outside every prefix on eth1 (none)"}}},
		{name: "ipv6 vip outside every prefix, link-local not counted", iface: "eth0", vip: netip.MustParseAddr("2001:db8:3::10"),
			host: newFakeHost(nil, node),
			want: []want{{"", "", "2001:db8:3::10 is outside every prefix on eth0 (2001:db8::11/64)"}}},
		{name: "the vip's own host prefix is not a subnet", iface: "eth0", vip: outside4,
			host: newFakeHost(nil, map[string][]string{"eth0": {"192.0.2.11/24", "203.0.113.10/32"}}),
			want: []want{{"", "", "outside every prefix"}}},
		{name: "strict rp_filter, default route by another interface", iface: "bond0.100", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/rp_filter": "1"}, vlan, "eth0"),
			want: []want{{"net/ipv4/conf/bond0.100/rp_filter", "2", "default route leaves by eth0"}}},
		{name: "strict rp_filter, default route by the vip's interface", iface: "eth0", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/eth0/rp_filter": "1"}, node, "eth0")},
		{name: "strict rp_filter, ecmp default with a hop on the vip's interface", iface: "bond0.100", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/rp_filter": "1"}, vlan, "eth0", "bond0.100")},
		{name: "strict rp_filter without a default route", iface: "bond0.100", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/rp_filter": "1"}, vlan)},
		{name: "loose rp_filter on the interface wins over strict all", iface: "bond0.100", vip: vip4,
			host: newFakeHost(map[string]string{"net/ipv4/conf/all/rp_filter": "1", "net/ipv4/conf/bond0.100/rp_filter": "2"}, vlan, "eth0")},
		{name: "disable_ipv6 on the interface", iface: "eth0", vip: vip6,
			host: newFakeHost(map[string]string{"net/ipv6/conf/eth0/disable_ipv6": "1"}, node),
			want: []want{{"net.ipv6.conf.eth0.disable_ipv6", "0", "cannot be added"}}},
		{name: "ipv6 off in the kernel", iface: "eth0", vip: vip6,
			host: func() *fakeHost { f := newFakeHost(nil, node); f.noIPv6 = true; return f }(),
			want: []want{{"", "", "IPv6 is off in this kernel"}}},
		{name: "ipv4 vip on a host with ipv6 off", iface: "eth0", vip: vip4,
			host: func() *fakeHost { f := newFakeHost(nil, node); f.noIPv6 = true; return f }()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := checkHost(tt.host, tt.iface, tt.vip)
			if err != nil {
				t.Fatalf("checkHost: %v", err)
			}
			if len(ws) != len(tt.want) {
				t.Fatalf("%d warnings, want %d:\n%s", len(ws), len(tt.want), strings.Join(warningLines(ws), "\n"))
			}
			for i, w := range tt.want {
				got := ws[i]
				if got.Sysctl != w.sysctl || got.Value != w.value || !strings.Contains(got.Problem, w.says) {
					t.Errorf("warning %d = %+v, want sysctl %q value %q saying %q", i, got, w.sysctl, w.value, w.says)
				}
				if w.sysctl != "" && !strings.Contains(got.String(), "sysctl -w "+w.sysctl+"="+w.value) {
					t.Errorf("warning %d does not say how to set it: %s", i, got)
				}
			}
		})
	}
}

func warningLines(ws []HostWarning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out
}

func TestCheckHostErrors(t *testing.T) {
	node := map[string][]string{"eth0": {"192.0.2.11/24"}}
	if _, err := checkHost(newFakeHost(nil, node), "eth1", vip4); !errors.Is(err, errNoLink) {
		t.Errorf("missing interface: %v, want errNoLink", err)
	}
	bad := newFakeHost(map[string]string{"net/ipv4/conf/eth0/arp_ignore": "x"}, node)
	if _, err := checkHost(bad, "eth0", vip4); err == nil || !strings.Contains(err.Error(), "arp_ignore") {
		t.Errorf("unreadable arp_ignore: %v, want an error naming it", err)
	}
	routes := newFakeHost(map[string]string{"net/ipv4/conf/all/rp_filter": "1"}, node)
	routes.routeErr = errBoom
	if _, err := checkHost(routes, "eth0", vip4); !errors.Is(err, errBoom) {
		t.Errorf("route list failure: %v, want errBoom", err)
	}
	if _, err := CheckHost("eth0", netip.Addr{}); err == nil {
		t.Error("CheckHost accepted an invalid address")
	}
}

func TestSysctlName(t *testing.T) {
	got := []string{sysctlName("ipv4", "eth0", "rp_filter"), sysctlName("ipv4", "bond0.100", "arp_ignore"), sysctlName("ipv6", "all", "disable_ipv6")}
	want := []string{"net.ipv4.conf.eth0.rp_filter", "net/ipv4/conf/bond0.100/arp_ignore", "net.ipv6.conf.all.disable_ipv6"}
	if !slices.Equal(got, want) {
		t.Fatalf("sysctlName = %q, want %q", got, want)
	}
}
