//go:build linux

package l2

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// Network namespace tests for converging on what the kernel holds: the
// host's own address next to a VIP.

// TestNetnsHostAddressSurvives: with the VIP equal to the node's own primary
// address 192.0.2.11/24, Announce adds 192.0.2.11/32 beside it, and Withdraw
// and RemoveAddress remove that /32 only; the /24 and its routes stay. An
// IPv6 VIP equal to the node's own 2001:db8::1/64 cannot get its /128 (the
// kernel holds an IPv6 address once per interface): Announce says so, and
// nothing removes the /64.
func TestNetnsHostAddressSurvives(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	own4 := netip.MustParseAddr("192.0.2.11")
	own6 := netip.MustParseAddr("2001:db8::1")
	// 192.0.2.11/24 becomes A's only, primary, IPv4 address.
	ipCmd(t, "-n", l.nsA, "addr", "del", "192.0.2.1/24", "dev", l.ifA)
	ipCmd(t, "-n", l.nsA, "addr", "add", "192.0.2.11/24", "dev", l.ifA)
	a := newLabAnnouncer(t, l, Config{GARPCount: 1})
	ctx := context.Background()

	has := func(addr netip.Addr) bool {
		t.Helper()
		var held bool
		if err := inNS(l.hA, func() (err error) {
			held, err = HasAddress(l.ifA, addr)
			return err
		}); err != nil {
			t.Fatalf("HasAddress(%s): %v", addr, err)
		}
		return held
	}
	// check fails unless A's addresses include every one of want and
	// 192.0.2.11/32 is there exactly when withHost.
	check := func(step string, withHost bool) {
		t.Helper()
		lines := addrLines(t, l)
		for _, want := range []string{"inet 192.0.2.11/24 ", "inet6 2001:db8::1/64 "} {
			if _, ok := findLine(lines, want); !ok {
				t.Fatalf("%s: %s removed:\n%s", step, strings.TrimSpace(want), strings.Join(lines, "\n"))
			}
		}
		if _, ok := findLine(lines, "inet 192.0.2.11/32 "); ok != withHost {
			t.Fatalf("%s: 192.0.2.11/32 present %v, want %v:\n%s", step, ok, withHost, strings.Join(lines, "\n"))
		}
		if held, err := a.Held(own4); err != nil || held != withHost {
			t.Fatalf("%s: Held(%s) = %v, %v; want %v", step, own4, held, err, withHost)
		}
		if held := has(own4); held != withHost {
			t.Fatalf("%s: HasAddress(%s) = %v, want %v", step, own4, held, withHost)
		}
	}
	ping := func(step string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", l.nsB, "ping", "-c", "1", "-W", "2", own4.String()).CombinedOutput(); err != nil {
			t.Fatalf("%s: ping %s from B: %v\n%s", step, own4, err, out)
		}
	}

	check("before Announce", false)
	if err := inNS(l.hA, func() error { return a.Announce(ctx, own4) }); err != nil {
		t.Fatalf("Announce(%s): %v", own4, err)
	}
	check("after Announce", true)
	if err := a.Withdraw(ctx, own4); err != nil {
		t.Fatalf("Withdraw(%s): %v", own4, err)
	}
	check("after Withdraw", false)
	ping("after Withdraw")
	if err := a.Withdraw(ctx, own4); err != nil {
		t.Fatalf("Withdraw(%s) without the /32: %v", own4, err)
	}
	check("after a second Withdraw", false)

	if err := inNS(l.hA, func() error { return a.Announce(ctx, own4) }); err != nil {
		t.Fatalf("Announce(%s) again: %v", own4, err)
	}
	for i := range 2 { // the second call finds only the /24
		if err := inNS(l.hA, func() error { return RemoveAddress(l.ifA, own4) }); err != nil {
			t.Fatalf("RemoveAddress(%s) #%d: %v", own4, i+1, err)
		}
		check("after RemoveAddress", false)
	}
	ping("after RemoveAddress")

	err := inNS(l.hA, func() error { return a.Announce(ctx, own6) })
	if !errors.Is(err, errOtherPrefix) {
		t.Fatalf("Announce(%s) with %s/64 on the interface = %v, want errOtherPrefix", own6, own6, err)
	}
	if err := a.Withdraw(ctx, own6); err != nil {
		t.Fatalf("Withdraw(%s): %v", own6, err)
	}
	if err := inNS(l.hA, func() error { return RemoveAddress(l.ifA, own6) }); err != nil {
		t.Fatalf("RemoveAddress(%s): %v", own6, err)
	}
	if held := has(own6); held {
		t.Fatalf("HasAddress(%s) with only the /64 = true", own6)
	}
	check("after the IPv6 calls", false)
}
