package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestSpeakerHopsAndAttrs: local_address, ebgp_multihop,
// ttl_security_hops, med and local_pref of a [[bgp.peer]], and med and
// local_pref of a bgp [[vip]], reach the speaker's configuration; keys left
// out reach it as zero (off, none).
func TestSpeakerHopsAndAttrs(t *testing.T) {
	c, err := rules.Parse("attrs.toml", []byte(`
[cluster]
bind_address = "192.0.2.11"
[bgp]
asn = 64513
[[bgp.peer]]
address = "203.0.113.1"
asn = 64512
local_address = "198.51.100.11"
ebgp_multihop = 2
med = 0
[[bgp.peer]]
address = "192.0.2.2"
asn = 64513
ttl_security_hops = 1
med = 20
local_pref = 200
[[bgp.peer]]
address = "192.0.2.3"
asn = 64512
[[vip]]
name = "api"
address = "203.0.113.10"
mode = "bgp"
med = 5
local_pref = 300
[[vip]]
name = "other"
address = "203.0.113.11"
mode = "bgp"
`))
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	sc := toSpeaker(c.Speaker())
	if errs := sc.Validate(); len(errs) > 0 {
		t.Fatalf("accepted, and the speaker refuses it: %v", errs)
	}
	val := func(p *uint32) int64 {
		if p == nil {
			return -1
		}
		return int64(*p)
	}
	p0, p1, p2 := sc.Peers[0], sc.Peers[1], sc.Peers[2]
	if p0.LocalAddress != netip.MustParseAddr("198.51.100.11") || p0.EBGPMultihop != 2 || p0.TTLSecurityHops != 0 ||
		val(p0.Attrs.MED) != 0 || val(p0.Attrs.LocalPref) != -1 {
		t.Errorf("first peer %+v (med %d local_pref %d), want local address, multihop 2, med 0", p0, val(p0.Attrs.MED), val(p0.Attrs.LocalPref))
	}
	if p1.TTLSecurityHops != 1 || p1.EBGPMultihop != 0 || val(p1.Attrs.MED) != 20 || val(p1.Attrs.LocalPref) != 200 {
		t.Errorf("second peer %+v, want ttl security 1, med 20, local_pref 200", p1)
	}
	if p2.LocalAddress.IsValid() || p2.EBGPMultihop != 0 || p2.TTLSecurityHops != 0 || !p2.Attrs.IsZero() {
		t.Errorf("third peer %+v, want everything off", p2)
	}
	if len(sc.VIPAttrs) != 1 {
		t.Fatalf("vip attrs %v, want the first VIP's only", sc.VIPAttrs)
	}
	if a := sc.VIPAttrs[netip.MustParseAddr("203.0.113.10")]; val(a.MED) != 5 || val(a.LocalPref) != 300 {
		t.Errorf("first VIP's attrs med %d local_pref %d, want 5 and 300", val(a.MED), val(a.LocalPref))
	}
}

// TestBadHopsAndAttrs: what the speaker or the protocol refuses is
// refused at its key, with the file's line.
func TestBadHopsAndAttrs(t *testing.T) {
	head := "[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 64513\n"
	vip := "[[vip]]\nname = \"a\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n"
	tests := []struct {
		name string
		toml string
		want []string // "line:col: substring"
	}{
		{
			name: "local_pref to an ebgp peer",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nlocal_pref = 200\n" + vip,
			want: []string{`8:1: bgp: peer 192.0.2.1: local_pref 200: LOCAL_PREF is only sent to iBGP peers`},
		},
		{
			name: "multihop with ttl security, multihop to an ibgp peer",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nebgp_multihop = 2\nttl_security_hops = 2\n" +
				"[[bgp.peer]]\naddress = \"192.0.2.2\"\nasn = 64513\nebgp_multihop = 3\n" + vip,
			want: []string{`9:1: bgp: peer 192.0.2.1: ttl_security_hops and ebgp_multihop exclude each other`,
				`13:1: bgp: peer 192.0.2.2: ebgp_multihop 3: only for eBGP peers`},
		},
		{
			name: "ranges: a written zero is refused, not taken for off",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nebgp_multihop = 0\nttl_security_hops = 255\n" + vip,
			want: []string{`8:1: ebgp_multihop must be 1-255, got 0`, `9:1: ttl_security_hops must be 1-254, got 255`},
		},
		{
			name: "med and local_pref are 32 bits",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64513\nmed = -1\nlocal_pref = 4294967296\n" + vip,
			want: []string{`8:1: bgp.peer.med: -1 is out of range`, `9:1: bgp.peer.local_pref: 4294967296 is out of range`},
		},
		{
			name: "local_pref 0",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64513\nlocal_pref = 0\n" + vip,
			want: []string{`8:1: bgp: peer 192.0.2.1: local_pref 0: must be at least 1`},
		},
		{
			name: "local address",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nlocal_address = \"lo\"\n" +
				"[[bgp.peer]]\naddress = \"192.0.2.2\"\nasn = 64512\nlocal_address = \"2001:db8::11\"\n" + vip,
			want: []string{`8:1: invalid local_address "lo"`, `12:1: bgp: peer 192.0.2.2: local_address 2001:db8::11: not of the peer address's family`},
		},
		{
			name: "vip local_pref without an ibgp peer, vip med on an l2 vip",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n" + vip + "local_pref = 300\n" +
				"[[vip]]\nname = \"b\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\nmed = 5\n",
			want: []string{`12:1: bgp: vip 203.0.113.10: local_pref 300: no iBGP peer`, `17:1: vip "b": med needs mode "bgp"`},
		},
		{
			name: "bfd with a router two hops away",
			toml: head + "[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nebgp_multihop = 2\nbfd = true\n" + vip,
			want: []string{`9:1: bgp: peer 192.0.2.1: bfd is single-hop BFD`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("bad.toml", []byte(tt.toml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error = %v, want *ConfigError", err)
			}
			text := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(text, "bad.toml:"+w) {
					t.Errorf("missing %q in:\n%s", w, text)
				}
			}
			if n := len(strings.Split(text, "\n")); n != len(tt.want) {
				t.Errorf("%d problems, want %d:\n%s", n, len(tt.want), text)
			}
		})
	}
}

// TestLocalAddressHostCheck: a local_address that is not on this host is
// a warning of `vipd --check` (the session cannot start from it: the
// kernel refuses to bind it), at its key; one on lo is not.
func TestLocalAddressHostCheck(t *testing.T) {
	c, err := rules.Parse("host.toml", []byte(`
[cluster]
bind_address = "192.0.2.11"
peers = ["192.0.2.12"]
[bgp]
asn = 64513
[[bgp.peer]]
address = "203.0.113.1"
asn = 64512
local_address = "203.0.113.11"
ebgp_multihop = 2
[[bgp.peer]]
address = "203.0.113.2"
asn = 64512
local_address = "203.0.113.12"
ebgp_multihop = 2
[[vip]]
name = "a"
address = "203.0.113.10"
mode = "bgp"
`))
	if err != nil {
		t.Fatal(err)
	}
	env := HostEnv{Euid: func() int { return 1000 }, UnitFiles: []string{}, Interfaces: func() ([]HostInterface, error) {
		return []HostInterface{
			{Name: "lo", Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.11/32")}, Addrs: []netip.Addr{netip.MustParseAddr("203.0.113.11")}},
			{Name: "eth0", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}},
		}, nil
	}}
	warns, errs := CheckHost(c, env)
	if len(errs) != 0 {
		t.Errorf("errors %v, want none", errs)
	}
	var got []string
	for _, w := range warns {
		if strings.Contains(w.Msg, "local_address") {
			got = append(got, fmt.Sprintf("%d:%d: %s", w.Line, w.Col, w.Msg))
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "15:1: bgp.peer[1].local_address 203.0.113.12 is not an address of this host") {
		t.Errorf("local_address warnings %q, want one about bgp.peer[1] at 15:1", got)
	}
}
