//go:build linux

package conns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// TestNetnsPokeResetsUnlistedClient: a client has a connection s1 listed
// (W) and opens another after the list (X, a kubectl's: idle, as one whose
// request s1 took but had not answered when it was lost). s1 is lost, s2
// takes the VIP over, and the client comes back to s2 (Y). The kernel
// gave X a port between W's and Y's (Linux's per-destination port
// counter), so s2 finds it among conns.Unlisted's ports and its poke
// resets it; Y still works. The control (s2 pokes only what s1 listed)
// shows X would have waited.
func TestNetnsPokeResetsUnlistedClient(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	for _, tc := range []struct {
		name     string
		vip      string
		unlisted bool
	}{
		{"ipv4/unlisted poked", "192.0.2.10", true},
		{"ipv4/only the list poked", "192.0.2.10", false},
		{"ipv6/unlisted poked", "2001:db8::10", true},
		{"ipv6/only the list poked", "2001:db8::10", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFailoverLab(t)
			vip := netip.MustParseAddr(tc.vip)
			ap := netip.AddrPortFrom(vip, 6443).String()
			addVIP(t, l.s1, vip)
			listen(t, l.s1, ap)
			w := dial(t, l.c, ap)
			published, err := openTableIn(t, l.s1).List(Filter{Addrs: []netip.Addr{vip}, Ports: []uint16{6443}})
			if err != nil {
				t.Fatal(err)
			}
			if published.Len() != 1 || !published.Contains(localConn(t, w)) {
				t.Fatalf("s1 lists %v, want only %v", published.Conns(), localConn(t, w))
			}
			x := dial(t, l.c, ap)

			// s1 is lost; s2 takes the VIP over; the client comes back.
			netnstest.MustRun(t, "ip", "-n", l.sw, "link", "set", l.s1Port, "down")
			listen(t, l.s2, ":6443")
			addVIP(t, l.s2, vip)
			netnstest.MustRun(t, "ip", "-n", l.c, "neigh", "replace", vip.String(), "lladdr", l.s2MAC, "dev", "eth0", "nud", "reachable")
			y := dial(t, l.c, ap)
			port := func(c net.Conn) uint16 { return c.LocalAddr().(*net.TCPAddr).AddrPort().Port() }
			t.Logf("client ports: listed %d, unlisted %d, back on s2 %d", port(w), port(x), port(y))

			start := time.Now()
			var res PokeResult
			netnstest.MustIn(t, l.s2, func() error {
				tab, err := Open()
				if err != nil {
					return err
				}
				defer tab.Close()
				own, err := tab.List(Filter{Addrs: []netip.Addr{vip}})
				if err != nil {
					return err
				}
				if !own.Contains(localConn(t, y)) {
					t.Errorf("s2 lists %v, want %v among them", own.Conns(), localConn(t, y))
				}
				cands := published
				if tc.unlisted {
					cands = NewSet(Unlisted(published, own, UnlistedSpan)...)
				}
				p, err := NewPoker(PokeConfig{})
				if err != nil {
					return err
				}
				res, err = p.Poke(context.Background(), Pokable(cands, own, []Takeover{{VIP: vip, Held: true}}))
				return err
			})
			if res.Sent == 0 || res.Failed != 0 {
				t.Fatalf("poke: %+v", res)
			}
			took, err := waitReset(x, start, start.Add(resetWithin))
			switch {
			case tc.unlisted && err != nil:
				t.Fatalf("unlisted connection after the poke: %v", err)
			case tc.unlisted:
				t.Logf("unlisted connection reset %v after %d pokes", took.Round(time.Millisecond), res.Sent)
			case err == nil:
				t.Fatalf("unlisted connection reset %v after poking only the list: the control shows nothing", took)
			case !errors.Is(err, os.ErrDeadlineExceeded):
				t.Fatalf("unlisted connection without its poke: %v, want still waiting", err)
			}
			if err := echoes(y); err != nil {
				t.Errorf("the client's connection to s2 after the pokes: %v", err)
			}
		})
	}
}
