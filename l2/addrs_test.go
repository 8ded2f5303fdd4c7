package l2

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestAddrChange(t *testing.T) {
	names := map[int]string{3: "eth0"}
	name := func(index int) string { return names[index] }
	ipnet := func(ip string, ones, bits int) net.IPNet {
		return net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(ones, bits)}
	}
	v4 := func(ip string, ones int) net.IPNet {
		n := ipnet(ip, ones, 32)
		n.IP = n.IP.To4()
		return n
	}
	for _, tt := range []struct {
		name   string
		u      netlink.AddrUpdate
		want   AddrChange
		wantOK bool
	}{
		{
			name:   "ipv4 host address added",
			u:      netlink.AddrUpdate{LinkAddress: v4("192.0.2.10", 32), LinkIndex: 3, NewAddr: true},
			want:   AddrChange{Index: 3, Interface: "eth0", Prefix: netip.MustParsePrefix("192.0.2.10/32"), Added: true},
			wantOK: true,
		},
		{
			name:   "ipv4 address in 16-byte form removed",
			u:      netlink.AddrUpdate{LinkAddress: ipnet("192.0.2.11", 96+24, 128), LinkIndex: 3},
			want:   AddrChange{Index: 3, Interface: "eth0", Prefix: netip.MustParsePrefix("192.0.2.11/24")},
			wantOK: true,
		},
		{
			name:   "ipv6 host address removed from a deleted interface",
			u:      netlink.AddrUpdate{LinkAddress: ipnet("2001:db8::10", 128, 128), LinkIndex: 9},
			want:   AddrChange{Index: 9, Prefix: netip.MustParsePrefix("2001:db8::10/128")},
			wantOK: true,
		},
		{
			name: "no address",
			u:    netlink.AddrUpdate{LinkIndex: 3, NewAddr: true},
		},
		{
			name: "no mask",
			u:    netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP("192.0.2.10").To4()}, LinkIndex: 3},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := addrChange(tt.u, name)
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("addrChange = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// BenchmarkHasAddress measures one HasAddress call on loopback.
func BenchmarkHasAddress(b *testing.B) {
	loopback := netip.MustParseAddr("127.0.0.1")
	for b.Loop() {
		if _, err := HasAddress("lo", loopback); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAttrsOf(t *testing.T) {
	for _, tt := range []struct {
		name         string
		scope, flags int
		want         addrAttrs
	}{
		{"plain ipv4", unix.RT_SCOPE_UNIVERSE, unix.IFA_F_PERMANENT, plainAttrs},
		{"ipv4 vip", unix.RT_SCOPE_HOST, unix.IFA_F_PERMANENT, v4Attrs},
		{"ipv6 vip", unix.RT_SCOPE_UNIVERSE, unix.IFA_F_NODAD | unix.IFA_F_DEPRECATED | unix.IFA_F_PERMANENT, v6Attrs},
		{"ipv6 deprecated, expiring", unix.RT_SCOPE_UNIVERSE, unix.IFA_F_DEPRECATED, addrAttrs{deprecated: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := attrsOf(tt.scope, tt.flags); got != tt.want {
				t.Fatalf("attrsOf(%d, %#x) = %+v, want %+v", tt.scope, tt.flags, got, tt.want)
			}
		})
	}
	for _, vip := range []netip.Addr{vip4, vip6} {
		if !vipAttrs(vip).asVIPAdds(vip) {
			t.Errorf("vipAttrs(%s) = %+v does not pass its own check", vip, vipAttrs(vip))
		}
	}
}
