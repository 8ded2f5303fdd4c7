package routers

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// FRR is FRR's zebra and bgpd (and bfdd, when configured) running in a
// namespace with every socket, pid file and config under one temporary
// directory.
type FRR struct {
	// NS is the namespace the daemons run in.
	NS string
	// Dir holds the configs, pid files, zebra's zserv socket and the vty
	// sockets; query with `vtysh --vty_socket DIR`.
	Dir               string
	zebra, bgpd, bfdd *daemon
}

// FRRConfig is the configuration of each daemon StartFRRConfig runs.
type FRRConfig struct {
	// BGPD is bgpd.conf.
	BGPD string
	// BFDD is bfdd.conf; bfdd runs only when it is not empty (bgpd's
	// `neighbor X bfd` talks to it through zebra).
	BFDD string
}

// StartFRR is StartFRRConfig with bgpd only.
func StartFRR(t testing.TB, ns, bgpdConf string) *FRR {
	t.Helper()
	return StartFRRConfig(t, ns, FRRConfig{BGPD: bgpdConf})
}

// StartFRRConfig writes the configurations to a temporary directory DIR and
// runs, inside ns,
//
//	chown frr:frr DIR DIR/*.conf
//	ip netns exec NS /usr/lib/frr/zebra -u frr -g frr -f DIR/zebra.conf -i DIR/zebra.pid -z DIR/zserv.api --vty_socket DIR --log stdout
//	ip netns exec NS /usr/lib/frr/bfdd  -u frr -g frr -f DIR/bfdd.conf  -i DIR/bfdd.pid  -z DIR/zserv.api --vty_socket DIR --log stdout --bfdctl DIR/bfdd.sock
//	ip netns exec NS /usr/lib/frr/bgpd  -u frr -g frr -f DIR/bgpd.conf  -i DIR/bgpd.pid  -z DIR/zserv.api --vty_socket DIR --log stdout
//
// (bfdd only with c.BFDD), then waits (at most 15s) until vtysh reaches
// bgpd. zebra installs the best BGP routes into the namespace's kernel
// table. All are killed by PID in t.Cleanup.
func StartFRRConfig(t testing.TB, ns string, c FRRConfig) *FRR {
	t.Helper()
	// Not t.TempDir: its parent is 0700 root, which the frr user cannot enter.
	dir, err := os.MkdirTemp("", "vt-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &FRR{NS: ns, Dir: dir}
	zserv := filepath.Join(dir, "zserv.api")
	zconf := writeFile(t, dir, "zebra.conf", "hostname "+ns+"\n")
	bconf := writeFile(t, dir, "bgpd.conf", c.BGPD)
	files := []string{dir, zconf, bconf}
	var fconf string
	if c.BFDD != "" {
		fconf = writeFile(t, dir, "bfdd.conf", c.BFDD)
		files = append(files, fconf)
	}
	// The Debian build insists the run-as user is in the vty group
	// (frrvty), which root is not; run as frr and hand it the directory.
	for _, p := range files {
		netnstest.MustRun(t, "chown", "frr:frr", p)
	}
	common := func(d, conf string) []string {
		return []string{"/usr/lib/frr/" + d, "-u", "frr", "-g", "frr", "-f", conf,
			"-i", filepath.Join(dir, d+".pid"), "-z", zserv, "--vty_socket", dir, "--log", "stdout"}
	}
	f.zebra = start(t, ns, "zebra", common("zebra", zconf)...)
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "zebra zserv socket", func() (bool, string) {
		if err := f.zebra.exited(); err != nil {
			t.Fatal(err)
		}
		out, err := f.Cmd("show version")
		return err == nil, out
	})
	if c.BFDD != "" {
		f.bfdd = start(t, ns, "bfdd", append(common("bfdd", fconf), "--bfdctl", filepath.Join(dir, "bfdd.sock"))...)
		netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "bfdd vty", func() (bool, string) {
			if err := f.bfdd.exited(); err != nil {
				t.Fatal(err)
			}
			out, err := f.Cmd("show bfd peers json")
			return err == nil && strings.Contains(out, "["), out
		})
	}
	f.bgpd = start(t, ns, "bgpd", common("bgpd", bconf)...)
	netnstest.Eventually(t, 15*time.Second, 100*time.Millisecond, "bgpd vty", func() (bool, string) {
		if err := f.bgpd.exited(); err != nil {
			t.Fatal(err)
		}
		out, err := f.Cmd("show bgp summary json")
		return err == nil && strings.Contains(out, "{"), out
	})
	return f
}

// Cmd runs one vtysh command against this FRR instance.
func (f *FRR) Cmd(command string) (string, error) {
	return netnstest.Run("vtysh", "--vty_socket", f.Dir, "-c", command)
}

// BFDPeer is one BFD session of bfdd, from `show bfd peers json`.
type BFDPeer struct {
	Peer   string `json:"peer"`
	Local  string `json:"local"`
	Status string `json:"status"` // "up", "down", "init", "shutdown"
	// Diagnostic and RemoteDiagnostic are FRR's names, such as "ok",
	// "control detection time expired", "neighbor signaled session down",
	// "administratively down".
	Diagnostic       string `json:"diagnostic"`
	RemoteDiagnostic string `json:"remote-diagnostic"`
	// Intervals in milliseconds.
	ReceiveInterval        int `json:"receive-interval"`
	TransmitInterval       int `json:"transmit-interval"`
	RemoteReceiveInterval  int `json:"remote-receive-interval"`
	RemoteTransmitInterval int `json:"remote-transmit-interval"`
	RemoteDetectMultiplier int `json:"remote-detect-multiplier"`
}

// BFDPeer returns bfdd's session with peer (false if there is none).
func (f *FRR) BFDPeer(peer netip.Addr) (BFDPeer, bool, error) {
	out, err := f.Cmd("show bfd peers json")
	if err != nil {
		return BFDPeer{}, false, err
	}
	var ps []BFDPeer
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		return BFDPeer{}, false, fmt.Errorf("parse %q: %w", out, err)
	}
	for _, p := range ps {
		if a, err := netip.ParseAddr(p.Peer); err == nil && a == peer {
			return p, true, nil
		}
	}
	return BFDPeer{}, false, nil
}

// Established reports whether the BGP session with neighbor is Established.
func (f *FRR) Established(neighbor netip.Addr) (bool, string) {
	out, err := f.Cmd("show bgp neighbors " + neighbor.String() + " json")
	if err != nil {
		return false, err.Error()
	}
	var m map[string]struct {
		BGPState string `json:"bgpState"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return false, fmt.Sprintf("parse %q: %v", out, err)
	}
	return m[neighbor.String()].BGPState == "Established", out
}

// Routes returns bgpd's paths for exactly prefix, from
// `show bgp ipv4|ipv6 unicast PREFIX json`.
func (f *FRR) Routes(prefix netip.Prefix) ([]Route, error) {
	afi := "ipv4"
	if prefix.Addr().Is6() {
		afi = "ipv6"
	}
	out, err := f.Cmd(fmt.Sprintf("show bgp %s unicast %s json", afi, prefix))
	if err != nil {
		return nil, err
	}
	return parseFRRRoutes(prefix, out)
}

// frrCommunityNames maps the names FRR 8 prints for well-known communities
// (community_str in bgpd/bgp_community.c) back to numbers.
var frrCommunityNames = map[string]string{
	"internet":           "0:0",
	"graceful-shutdown":  "65535:0",
	"accept-own":         "65535:1",
	"accept-own-nexthop": "65535:5",
	"llgr-stale":         "65535:6",
	"no-llgr":            "65535:7",
	"blackhole":          "65535:666",
	"no-export":          "65535:65281",
	"no-advertise":       "65535:65282",
	"local-AS":           "65535:65283",
	"no-peer":            "65535:65284",
}

func parseFRRRoutes(prefix netip.Prefix, out string) ([]Route, error) {
	var v struct {
		Prefix string `json:"prefix"`
		Paths  []struct {
			Bestpath *struct {
				Overall bool `json:"overall"`
			} `json:"bestpath"`
			Community *struct {
				String string   `json:"string"`
				List   []string `json:"list"`
			} `json:"community"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
			Stale bool `json:"stale"`
		} `json:"paths"`
	}
	if strings.TrimSpace(out) == "{}" || strings.TrimSpace(out) == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("parse frr route json %q: %w", out, err)
	}
	var routes []Route
	for _, p := range v.Paths {
		r := Route{Prefix: prefix, Best: p.Bestpath != nil && p.Bestpath.Overall, Stale: p.Stale}
		for _, nh := range p.Nexthops {
			if a, err := netip.ParseAddr(nh.IP); err == nil {
				r.NextHops = append(r.NextHops, a)
			}
		}
		if p.Community != nil {
			for _, c := range strings.Fields(p.Community.String) {
				if n, ok := frrCommunityNames[c]; ok {
					c = n
				}
				r.Communities = append(r.Communities, c)
			}
		}
		routes = append(routes, r)
	}
	return routes, nil
}
