package backendconfig

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/bgp"
)

// zeroFields lists the fields of v (a struct, followed through slices,
// maps and pointers) that are zero, by path.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[netip.Addr]() {
			if !v.Interface().(netip.Addr).IsValid() {
				return []string{path}
			}
			return nil
		}
		var out []string
		for i := range v.NumField() {
			out = append(out, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Kind() == reflect.Map {
			return zeroFields(v.MapIndex(v.MapKeys()[0]), path+"[k]")
		}
		return zeroFields(v.Index(0), path+"[0]")
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}

// TestSpeakerEveryField: a BGPSpeaker that sets every field reaches the
// speaker with every field of bgp.Config set (but the logger and the
// listen addresses, which the file has no key for), value for value: a
// field added on either side and not copied fails here.
func TestSpeakerEveryField(t *testing.T) {
	u := func(n uint32) *uint32 { return &n }
	vip := netip.MustParseAddr("203.0.113.10")
	s := config.BGPSpeaker{
		ASN: 64513, RouterID: netip.MustParseAddr("192.0.2.11"), ListenPort: 179,
		Peers: []config.BGPPeer{{
			Address: netip.MustParseAddr("192.0.2.1"), ASN: 64513, Password: "pw",
			HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, Communities: []string{"64512:1"}, MaxPrefixes: 7,
			BFD: true, BFDMinInterval: 100 * time.Millisecond, BFDMultiplier: 4,
			LocalAddress: netip.MustParseAddr("192.0.2.11"), EBGPMultihop: 2, TTLSecurityHops: 1,
			Attrs: config.BGPAttrs{MED: u(1), LocalPref: u(2)},
		}},
		VIPs:                []netip.Addr{vip},
		VIPAttrs:            map[netip.Addr]config.BGPAttrs{vip: {MED: u(3), LocalPref: u(4)}},
		GracefulRestartTime: 5 * time.Second, LongLivedStaleTime: time.Hour,
	}
	if z := zeroFields(reflect.ValueOf(s), "BGPSpeaker"); len(z) > 0 {
		t.Fatalf("the test leaves fields of BGPSpeaker zero: %v", z)
	}
	c := Speaker(s)
	var missing []string
	for _, f := range zeroFields(reflect.ValueOf(c), "bgp.Config") {
		if f != "bgp.Config.Logger" && f != "bgp.Config.ListenAddresses" {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Errorf("fields of the speaker's configuration that BGPSpeaker does not reach: %v", missing)
	}
	p := c.Peers[0]
	want := bgp.Peer{Address: s.Peers[0].Address, ASN: 64513, Password: "pw", HoldTime: 9 * time.Second, Keepalive: 3 * time.Second,
		Communities: []string{"64512:1"}, MaxPrefixes: 7, BFD: bgp.BFD{Enabled: true, MinInterval: 100 * time.Millisecond, Multiplier: 4},
		LocalAddress: s.Peers[0].LocalAddress, EBGPMultihop: 2, TTLSecurityHops: 1, Attrs: bgp.Attrs{MED: u(1), LocalPref: u(2)}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("peer %+v, want %+v", p, want)
	}
	if c.ASN != 64513 || c.RouterID != s.RouterID || c.ListenPort != 179 || c.VIPs[0] != vip ||
		!c.VIPAttrs[vip].Equal(bgp.Attrs{MED: u(3), LocalPref: u(4)}) ||
		c.GracefulRestart != (bgp.GracefulRestart{RestartTime: 5 * time.Second, LongLivedStaleTime: time.Hour}) {
		t.Errorf("speaker %+v", c)
	}
	// The copy shares nothing the caller could change under the speaker.
	s.Peers[0].Communities[0], s.VIPs[0] = "1:1", netip.MustParseAddr("203.0.113.99")
	if c.Peers[0].Communities[0] != "64512:1" || c.VIPs[0] != vip {
		t.Error("Speaker shares its slices with its argument")
	}
}

// TestRules: the rules are the backends' own, and a speaker's problem
// keeps the field and the index the bgp package names it by.
func TestRules(t *testing.T) {
	r := Rules()
	if err := r.L2RefreshInterval(500 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "at least 1s") {
		t.Errorf("refresh 500ms: %v, want the l2 package's refusal", err)
	}
	if err := r.L2RefreshInterval(3 * time.Second); err != nil {
		t.Errorf("refresh 3s: %v", err)
	}
	s := config.BGPSpeaker{ASN: 64513, RouterID: netip.MustParseAddr("192.0.2.11"), ListenPort: -1,
		Peers: []config.BGPPeer{{Address: netip.MustParseAddr("192.0.2.1"), ASN: 64512}, {Address: netip.MustParseAddr("192.0.2.2"), ASN: 64512, HoldTime: time.Second}}}
	got := r.BGP(s)
	if len(got) != 1 || got[0].Field != "peer.hold_time" || got[0].Index != 1 {
		t.Fatalf("problems %+v, want one: peer.hold_time of peer 1", got)
	}
	var fe *bgp.FieldError
	if !errors.As(got[0].Err, &fe) || got[0].Err.Error() != "peer 192.0.2.2: hold_time 1s: must be at least 3s" {
		t.Errorf("error %v, want the speaker's own", got[0].Err)
	}
	if got := r.BGP(config.BGPSpeaker{ListenPort: -1}); len(got) != 2 || got[0].Field != "asn" || got[0].Index != -1 {
		t.Errorf("an empty section: %+v, want asn and router_id of the section", got)
	}
}
