package bgp

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// fastBFD is the BFD setting of the lab: 100ms x 3, the routers' too.
var fastBFD = BFD{Enabled: true, MinInterval: 100 * time.Millisecond, Multiplier: 3}

const frrBFDConf = `
bfd
 profile fast
  receive-interval 100
  transmit-interval 100
  detect-multiplier 3
 exit
exit
`

const frrBGPWithBFD = `
hostname r
router bgp 65000
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor 192.0.2.2 remote-as 65001
 neighbor 192.0.2.2 passive
 neighbor 192.0.2.2 timers 1 3
 neighbor 192.0.2.2 bfd profile fast
 neighbor 2001:db8:1::2 remote-as 65001
 neighbor 2001:db8:1::2 passive
 neighbor 2001:db8:1::2 timers 1 3
 neighbor 2001:db8:1::2 bfd profile fast
 address-family ipv4 unicast
  neighbor 192.0.2.2 activate
 exit-address-family
 address-family ipv6 unicast
  neighbor 2001:db8:1::2 activate
 exit-address-family
`

// peerBy returns the speaker's status of peer a.
func peerBy(ps []PeerStatus, a netip.Addr) PeerStatus {
	for _, p := range ps {
		if p.Address == a {
			return p
		}
	}
	return PeerStatus{}
}

// TestFRRBFD runs BFD against FRR's bfdd over IPv4 and IPv6: both sides Up
// with the 100ms timers negotiated (the Poll Sequence after Up reached
// FRR), a cut between them (carrier kept) ends BGP through BFD well
// within the 3s hold time on both sides, the sessions come back after the
// cut heals, and SIGTERM of the speaker shows FRR an AdminDown, not a
// failure.
func TestFRRBFD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/bfdd", "/usr/lib/frr/zebra", "vtysh", "nft")
	rns, sns := lab(t, "fb")
	frr := routers.StartFRRConfig(t, rns, routers.FRRConfig{BGPD: frrBGPWithBFD, BFDD: frrBFDConf})
	spk := startSpeakerProc(t, sns, speakerConfig(
		Peer{Address: routerV4, ASN: routerASN, HoldTime: 3 * time.Second, BFD: fastBFD},
		Peer{Address: routerV6, ASN: routerASN, HoldTime: 3 * time.Second, BFD: fastBFD},
	))
	speakers := []netip.Addr{speakerV4, speakerV6}
	waitUp := func(what string) {
		t.Helper()
		for _, nb := range speakers {
			netnstest.Eventually(t, 30*time.Second, 100*time.Millisecond, what+": frr bgp and bfd up with "+nb.String(), func() (bool, string) {
				if ok, out := frr.Established(nb); !ok {
					return false, out
				}
				p, ok, err := frr.BFDPeer(nb)
				return err == nil && ok && p.Status == "up" && p.RemoteReceiveInterval == 100 && p.RemoteTransmitInterval == 100,
					fmt.Sprintf("bfd peer %+v (%v)", p, err)
			})
		}
		netnstest.Eventually(t, 10*time.Second, 100*time.Millisecond, what+": speaker sees bfd up", func() (bool, string) {
			ps := spk.peers(t)
			for _, a := range []netip.Addr{routerV4, routerV6} {
				if p := peerBy(ps, a); p.BFD != "up" || p.State != "established" || p.HeldByBFD {
					return false, fmt.Sprintf("%+v", ps)
				}
			}
			return true, ""
		})
	}
	waitUp("start")
	spk.do(t, "announce "+vip4.Addr().String())
	spk.do(t, "announce "+vip6.Addr().String())
	waitRoute(t, frr, vip4, speakerV4, "frr has the ipv4 vip", noGshut)
	waitRoute(t, frr, vip6, speakerV6, "frr has the ipv6 vip", noGshut)

	// Cut: both links stay up, nothing passes.
	cut := time.Now()
	uncut := netnstest.Cut(t, rns, speakerV4, speakerV6)
	waitNoRoute(t, frr, vip4, 1500*time.Millisecond, "frr drops the ipv4 vip through bfd (hold time 3s)")
	gone4 := time.Since(cut)
	waitNoRoute(t, frr, vip6, 1500*time.Millisecond, "frr drops the ipv6 vip through bfd")
	t.Logf("cut: frr dropped the ipv4 vip after %v (bfd 100ms x 3, hold 3s)", gone4.Round(10*time.Millisecond))
	for _, nb := range speakers {
		p, _, err := frr.BFDPeer(nb)
		if err != nil || p.Status != "down" || p.Diagnostic != "control detection time expired" {
			t.Errorf("frr bfd peer %s after the cut: %+v (%v), want down, control detection time expired", nb, p, err)
		}
	}
	netnstest.Eventually(t, 2*time.Second, 50*time.Millisecond, "speaker closes bgp after bfd down", func() (bool, string) {
		ps := spk.peers(t)
		for _, a := range []netip.Addr{routerV4, routerV6} {
			p := peerBy(ps, a)
			if p.BFD != "down" || p.BFDDiag != "control_detection_time_expired" || !p.HeldByBFD || p.State == "established" {
				return false, fmt.Sprintf("%+v", ps)
			}
		}
		return true, ""
	})
	if d := time.Since(cut); d > 2500*time.Millisecond {
		t.Errorf("speaker side took %v, not faster than the hold time", d)
	}

	uncut()
	waitUp("after the cut healed")
	waitRoute(t, frr, vip4, speakerV4, "frr has the ipv4 vip again", noGshut)

	// A planned stop: AdminDown, which FRR records as the remote's
	// diagnostic instead of a detection failure.
	spk.signal(t, syscall.SIGTERM)
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "frr sees admin down", func() (bool, string) {
		p, _, err := frr.BFDPeer(speakerV4)
		return err == nil && p.Status == "down" && p.RemoteDiagnostic == "administratively down" && p.Diagnostic != "control detection time expired",
			fmt.Sprintf("%+v (%v)", p, err)
	})
}

const birdBFDConf = `
router id 192.0.2.1;
protocol device { scan time 1; }
protocol bfd {
	interface "eth0" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; };
}
protocol bgp spk4 {
	local 192.0.2.1 as 65000;
	neighbor 192.0.2.2 as 65001;
	passive on;
	error wait time 1, 5;
	hold time 3;
	bfd yes;
	ipv4 { import all; export none; };
}
protocol bgp spk6 {
	local 2001:db8:1::1 as 65000;
	neighbor 2001:db8:1::2 as 65001;
	passive on;
	error wait time 1, 5;
	hold time 3;
	bfd yes;
	ipv6 { import all; export none; };
}
`

// TestBIRDBFD is TestFRRBFD's first half against BIRD 2's protocol bfd.
func TestBIRDBFD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc", "nft")
	rns, sns := lab(t, "bb")
	bird := routers.StartBIRD(t, rns, birdBFDConf)
	spk := startSpeakerProc(t, sns, speakerConfig(
		Peer{Address: routerV4, ASN: routerASN, HoldTime: 3 * time.Second, BFD: fastBFD},
		Peer{Address: routerV6, ASN: routerASN, HoldTime: 3 * time.Second, BFD: fastBFD},
	))
	up := func(what string) {
		t.Helper()
		for _, c := range []struct {
			proto string
			nb    netip.Addr
		}{{"spk4", speakerV4}, {"spk6", speakerV6}} {
			netnstest.Eventually(t, 30*time.Second, 100*time.Millisecond, what+": bird "+c.proto+" established with bfd up", func() (bool, string) {
				if ok, out := bird.Established(c.proto); !ok {
					return false, out
				}
				st, err := bird.BFDState(c.nb)
				return err == nil && st == "Up", fmt.Sprintf("bfd %q (%v)", st, err)
			})
		}
	}
	up("start")
	spk.do(t, "announce "+vip4.Addr().String())
	waitRoute(t, bird, vip4, speakerV4, "bird has the ipv4 vip", noGshut)
	cut := time.Now()
	uncut := netnstest.Cut(t, rns, speakerV4, speakerV6)
	waitNoRoute(t, bird, vip4, 1500*time.Millisecond, "bird drops the vip through bfd (hold time 3s)")
	t.Logf("cut: bird dropped the ipv4 vip after %v", time.Since(cut).Round(10*time.Millisecond))
	out, _ := bird.Cmd("show protocols all spk4")
	if !strings.Contains(strings.ToLower(out), "bfd") {
		t.Errorf("bird does not name bfd as the reason:\n%s", out)
	}
	uncut()
	up("after the cut healed")
	waitRoute(t, bird, vip4, speakerV4, "bird has the ipv4 vip again", noGshut)
	spk.signal(t, syscall.SIGTERM)
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "bird sees the bfd session go down", func() (bool, string) {
		st, err := bird.BFDState(speakerV4)
		return err == nil && st != "Up", fmt.Sprintf("bfd %q (%v)", st, err)
	})
	out, _ = bird.Cmd("show bfd sessions")
	t.Logf("bird after SIGTERM:\n%s", out)
}
