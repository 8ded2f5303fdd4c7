package routers

import (
	"bufio"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// BIRD is a BIRD 2 daemon running in a namespace with its own control socket.
type BIRD struct {
	// NS is the namespace BIRD runs in.
	NS string
	// Socket is the control socket path, for `birdc -s`.
	Socket string
	d      *daemon
}

// StartBIRD writes conf to a temporary directory and runs
//
//	ip netns exec NS bird -f -c DIR/bird.conf -s DIR/bird.ctl -P DIR/bird.pid
//
// then waits (at most 10s) until `birdc -s DIR/bird.ctl show status` answers.
// BIRD is killed by its PID in t.Cleanup.
func StartBIRD(t testing.TB, ns, conf string) *BIRD {
	t.Helper()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bird.conf", conf)
	b := &BIRD{NS: ns, Socket: filepath.Join(dir, "bird.ctl")}
	if out, err := netnstest.Run("bird", "-p", "-c", cfg); err != nil {
		t.Fatalf("bird config check: %v\n%s", err, out)
	}
	b.d = start(t, ns, "bird", "bird", "-f", "-c", cfg, "-s", b.Socket, "-P", filepath.Join(dir, "bird.pid"))
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "bird control socket", func() (bool, string) {
		if err := b.d.exited(); err != nil {
			t.Fatal(err)
		}
		out, err := b.Cmd("show status")
		return err == nil && strings.Contains(out, "Daemon is up"), out
	})
	return b
}

// Cmd runs one birdc command and returns its output.
func (b *BIRD) Cmd(command string) (string, error) {
	return netnstest.Run("birdc", append([]string{"-s", b.Socket}, strings.Fields(command)...)...)
}

// Established reports whether BGP protocol name is in state Established.
func (b *BIRD) Established(name string) (bool, string) {
	out, err := b.Cmd("show protocols " + name)
	if err != nil {
		return false, err.Error()
	}
	return strings.Contains(out, "Established"), out
}

// BFDState returns the state BIRD's BFD protocols show for the session with
// peer ("Up", "Down", "Init", "AdminDown"; "" when there is none), from
// `birdc show bfd sessions`:
//
//	bfd1:
//	IP address                Interface  State      Since         Interval  Timeout
//	192.0.2.2                 eth0       Up         10:00:00.000    0.100    0.300
func (b *BIRD) BFDState(peer netip.Addr) (string, error) {
	out, err := b.Cmd("show bfd sessions")
	if err != nil {
		return "", err
	}
	return parseBIRDBFD(out, peer), nil
}

func parseBIRDBFD(out string, peer netip.Addr) string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if a, err := netip.ParseAddr(f[0]); err == nil && a == peer {
			return f[2]
		}
	}
	return ""
}

// Routes returns BIRD's paths for exactly prefix, from
// `birdc -s SOCKET show route PREFIX all`.
func (b *BIRD) Routes(prefix netip.Prefix) ([]Route, error) {
	out, err := b.Cmd("show route " + prefix.String() + " all")
	if strings.Contains(out, "Network not found") {
		return nil, nil // birdc exits 1 for this
	}
	if err != nil {
		return nil, err
	}
	return parseBIRDRoutes(out)
}

// parseBIRDRoutes parses `birdc show route ... all` output:
//
//	203.0.113.10/32      unicast [spk 19:55:01.123] * (100) [AS65001i]
//		via 192.0.2.2 on veth0
//		BGP.community: (65535,0) (65000,100)
func parseBIRDRoutes(out string) ([]Route, error) {
	var routes []Route
	var cur *Route
	var curPrefix netip.Prefix
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(line, "BIRD ") || strings.HasPrefix(line, "Table "):
			continue
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			// A route line; a continuation path of the same prefix starts
			// with spaces in place of the prefix, handled below.
			f := strings.Fields(line)
			p, err := netip.ParsePrefix(f[0])
			if err != nil {
				return nil, fmt.Errorf("bird route line %q: %w", line, err)
			}
			curPrefix = p
			routes = append(routes, Route{Prefix: p, Best: strings.Contains(line, "] * ")})
			cur = &routes[len(routes)-1]
		case strings.Contains(line, "unicast [") && cur != nil:
			routes = append(routes, Route{Prefix: curPrefix, Best: strings.Contains(line, "] * ")})
			cur = &routes[len(routes)-1]
		case cur == nil:
			continue
		case strings.HasPrefix(trimmed, "via "):
			f := strings.Fields(trimmed)
			if a, err := netip.ParseAddr(f[1]); err == nil {
				cur.NextHops = append(cur.NextHops, a)
			}
		case strings.HasPrefix(trimmed, "BGP.community:"):
			for _, c := range strings.Fields(strings.TrimPrefix(trimmed, "BGP.community:")) {
				c = strings.Trim(c, "()")
				hi, lo, ok := strings.Cut(c, ",")
				if !ok {
					return nil, fmt.Errorf("bird community %q", c)
				}
				if _, err := strconv.ParseUint(hi, 10, 16); err != nil {
					return nil, fmt.Errorf("bird community %q", c)
				}
				cur.Communities = append(cur.Communities, hi+":"+lo)
			}
		}
	}
	return routes, sc.Err()
}
