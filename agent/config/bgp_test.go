package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/bgp"
)

// TestHoldTimeOnly: a peer with only hold_time = "10s" is accepted, and
// the speaker takes its configuration: the keepalive is left to the
// speaker's default (hold_time / 3 in whole seconds, as FRR and GoBGP
// do), not 3.333s, which the speaker refuses.
func TestHoldTimeOnly(t *testing.T) {
	c, err := rules.Parse("hold.toml", []byte("[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nhold_time = \"10s\"\n"+
		"[[vip]]\nname = \"a\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n"))
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	sc := toSpeaker(c.Speaker())
	if errs := sc.Validate(); len(errs) > 0 {
		t.Fatalf("accepted, and the speaker refuses it: %v", errs)
	}
	if p := sc.Peers[0]; p.HoldTime != 10*time.Second || p.Keepalive != 0 {
		t.Errorf("peer hold time %s keepalive %s, want 10s and 0 (the speaker's default)", p.HoldTime, p.Keepalive)
	}
}

// TestSpeaker: the [bgp] keys reach the speaker's configuration; keys left
// out reach it as zero, for the speaker's own defaults; only bgp VIPs are
// exportable.
func TestSpeaker(t *testing.T) {
	c, err := rules.Parse("test.toml", []byte(`
node_name = "n1"
state_dir = "/tmp/vipd-test-unused"
[cluster]
bind_address = "192.0.2.11"
[[vip]]
name = "api"
address = "192.0.2.10"
interface = "eth0"
[[vip]]
name = "routed"
address = "203.0.113.10"
mode = "bgp"
[[vip]]
name = "routed6"
address = "2001:db8:100::10"
mode = "bgp"
[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
bfd = true
bfd_min_interval = "100ms"
bfd_multiplier = 4
max_prefixes = 20000
[[bgp.peer]]
address = "2001:db8::1"
asn = 64512
`))
	if err != nil {
		t.Fatal(err)
	}
	bc := toSpeaker(c.Speaker())
	if len(bc.Peers) != 2 {
		t.Fatalf("peers %+v", bc.Peers)
	}
	want := bgp.BFD{Enabled: true, MinInterval: 100 * time.Millisecond, Multiplier: 4}
	if p := bc.Peers[0]; p.BFD != want || p.MaxPrefixes != 20000 {
		t.Errorf("first peer %+v, want bfd %+v and max_prefixes 20000", p, want)
	}
	if p := bc.Peers[1]; p.BFD != (bgp.BFD{}) || p.MaxPrefixes != 0 || p.HoldTime != 0 || p.Keepalive != 0 {
		t.Errorf("second peer %+v, want zero timers and limits (the speaker's defaults)", p)
	}
	if bc.ASN != 64513 || bc.RouterID != netip.MustParseAddr("192.0.2.11") || bc.ListenPort != bgp.DefaultListenPort {
		t.Errorf("asn %d router id %s listen port %d, want 64513, the bind address, %d", bc.ASN, bc.RouterID, bc.ListenPort, bgp.DefaultListenPort)
	}
	if len(bc.VIPs) != 2 || bc.VIPs[0] != netip.MustParseAddr("203.0.113.10") || bc.VIPs[1] != netip.MustParseAddr("2001:db8:100::10") {
		t.Errorf("vips %v, want the two bgp VIPs only", bc.VIPs)
	}
	if errs := bc.Validate(); len(errs) != 0 {
		t.Errorf("speaker config invalid: %v", errs)
	}
}

// TestSpeakerGracefulRestart: graceful_restart_time and
// long_lived_stale_time reach the speaker; "0s" and leaving them out are
// off; restart_grace "0s" turns restarts in place off.
func TestSpeakerGracefulRestart(t *testing.T) {
	base := "[cluster]\nbind_address = \"192.0.2.11\"\n%s\n[bgp]\nasn = 64513\n%s\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n" +
		"[[vip]]\nname = \"a\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n"
	for _, tt := range []struct {
		name, cluster, bgpKeys string
		want                   bgp.GracefulRestart
		grace                  time.Duration
	}{
		{"defaults: off, grace 3s", "", "", bgp.GracefulRestart{}, DefaultRestartGrace},
		{"on", "restart_grace = \"5s\"", "graceful_restart_time = \"7s\"\nlong_lived_stale_time = \"1h\"", bgp.GracefulRestart{RestartTime: 7 * time.Second, LongLivedStaleTime: time.Hour}, 5 * time.Second},
		{"zero is off", "restart_grace = \"0s\"", "graceful_restart_time = \"0s\"\nlong_lived_stale_time = \"0\"", bgp.GracefulRestart{}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := rules.Parse("gr.toml", []byte(fmt.Sprintf(base, tt.cluster, tt.bgpKeys)))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := toSpeaker(c.Speaker()).GracefulRestart; got != tt.want {
				t.Errorf("speaker graceful restart %+v, want %+v", got, tt.want)
			}
			if got := c.Cluster.RestartGraceDuration(); got != tt.grace {
				t.Errorf("restart_grace %s, want %s", got, tt.grace)
			}
		})
	}
}

// TestSpeakerLimits: the limits the conversion of a [[bgp.peer]] checks
// and the listen_port default are the speaker's own (this package cannot
// import it, so they are written twice and must stay equal).
func TestSpeakerLimits(t *testing.T) {
	if maxPrefixesLimit != bgp.MaxPrefixesLimit {
		t.Errorf("maxPrefixesLimit %d, the speaker's MaxPrefixesLimit %d", maxPrefixesLimit, bgp.MaxPrefixesLimit)
	}
	if maxTTLSecurityHops != bgp.MaxTTLSecurityHops {
		t.Errorf("maxTTLSecurityHops %d, the speaker's MaxTTLSecurityHops %d", maxTTLSecurityHops, bgp.MaxTTLSecurityHops)
	}
	if DefaultBGPListenPort != bgp.DefaultListenPort {
		t.Errorf("DefaultBGPListenPort %d, the speaker's DefaultListenPort %d", DefaultBGPListenPort, bgp.DefaultListenPort)
	}
}

// TestParseWithoutBackendRules: Parse alone checks what is the
// configuration's own (a value that does not parse), and leaves the
// backends' rules (a hold time the speaker refuses, a refresh the
// announcers refuse) to BackendRules; with them both are refused at
// their keys.
func TestParseWithoutBackendRules(t *testing.T) {
	file := "[cluster]\nbind_address = \"192.0.2.11\"\n[l2]\nrefresh_interval = \"500ms\"\n[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nhold_time = \"1s\"\n" +
		"[[vip]]\nname = \"a\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n"
	c, err := Parse("own.toml", []byte(file))
	if err != nil {
		t.Fatalf("Parse refused what only the backends refuse: %v", err)
	}
	if got := c.Speaker().Peers[0].HoldTime; got != time.Second {
		t.Errorf("hold time %s, want the 1s written", got)
	}
	_, err = rules.Parse("own.toml", []byte(file))
	for _, want := range []string{"own.toml:4:1: refresh_interval must be 0 (off) or at least 1s, got 500ms", "own.toml:10:1: bgp: peer 192.0.2.1: hold_time 1s: must be at least 3s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("with the backends' rules: %v, want %q", err, want)
		}
	}
	if _, err := Parse("own.toml", []byte(strings.Replace(file, `"1s"`, `"soon"`, 1))); err == nil || !strings.Contains(err.Error(), `own.toml:10:1: invalid duration "soon"`) {
		t.Errorf("Parse = %v, want the configuration's own problem", err)
	}
}
