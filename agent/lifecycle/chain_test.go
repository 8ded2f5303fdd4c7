package lifecycle

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var (
	addrB = netip.MustParseAddr("192.0.2.12")
	addrC = netip.MustParseAddr("192.0.2.13")
	addrD = netip.MustParseAddr("192.0.2.14")
)

// TestForwardStep: the holder forwards to each lingering member until it
// is gone (then at once, lost: its clients are reset) or has stopped
// lingering (ForwardGrace later, its clients reset too); it adds a member
// that starts lingering while it forwards; it stops when none is left,
// and at once when it no longer holds the VIP. A dropped target's clients
// are taken over when this node can reset them.
func TestForwardStep(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := &Forward{Since: now, Targets: map[string]netip.Addr{"b": addrB, "c": addrC}, Gone: map[string]time.Time{}}
	self := Peer{Name: "a", Held: true}
	in := func(view ...Peer) Chain {
		return Chain{Now: now, Self: "a", View: append([]Peer{self}, view...), Held: true, CanForward: true, CanReset: true}
	}
	step := func(in Chain) []Effect {
		t.Helper()
		return f.Step(in)
	}
	want := func(got []Effect, want ...Effect) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("effects %+v, want %+v", got, want)
		}
	}
	targets := func(want ...string) {
		t.Helper()
		if got := slices.Sorted(maps.Keys(f.Targets)); !slices.Equal(got, want) {
			t.Fatalf("targets %v, want %v", got, want)
		}
	}

	// b is gone: dropped at once, lost.
	want(step(in(Peer{Name: "b", State: Dead, Lingering: true, Addr: addrB}, Peer{Name: "c", Lingering: true, Addr: addrC})),
		Effect{Kind: DropTarget, Member: "b", Lost: true}, Effect{Kind: TakeOver, Member: "b"}, Effect{Kind: InstallForward})
	targets("c")
	// d starts lingering: added; one whose address is unknown is not.
	want(step(in(Peer{Name: "c", Lingering: true, Addr: addrC}, Peer{Name: "d", Lingering: true, Addr: addrD}, Peer{Name: "e", Lingering: true})),
		Effect{Kind: NoAddress, Member: "e"}, Effect{Kind: AddTarget, Member: "d"}, Effect{Kind: InstallForward})
	targets("c", "d")
	// c stops lingering: kept ForwardGrace, then dropped (not lost).
	want(step(in(Peer{Name: "c", Addr: addrC}, Peer{Name: "d", Lingering: true, Addr: addrD})))
	now = now.Add(ForwardGrace - time.Millisecond)
	want(step(in(Peer{Name: "c", Addr: addrC}, Peer{Name: "d", Lingering: true, Addr: addrD})))
	now = now.Add(time.Millisecond)
	want(step(in(Peer{Name: "c", Addr: addrC}, Peer{Name: "d", Lingering: true, Addr: addrD})),
		Effect{Kind: DropTarget, Member: "c"}, Effect{Kind: TakeOver, Member: "c"}, Effect{Kind: InstallForward})
	targets("d")
	// d lingers again within the grace: its clock starts over.
	want(step(in(Peer{Name: "d", Addr: addrD})))
	want(step(in(Peer{Name: "d", Lingering: true, Addr: addrD})))
	if _, ok := f.Gone["d"]; ok {
		t.Fatalf("gone %v: d lingers again", f.Gone)
	}
	// d left: nothing left to forward to.
	want(step(in(Peer{Name: "d", State: Left, Lingering: true, Addr: addrD})),
		Effect{Kind: DropTarget, Member: "d", Lost: true}, Effect{Kind: TakeOver, Member: "d"}, Effect{Kind: StopForward, Reason: "no member holds or lingers on the VIP any more"})

	// Not holding any more: stop, whatever the targets.
	f = &Forward{Targets: map[string]netip.Addr{"b": addrB}, Gone: map[string]time.Time{}}
	c := in(Peer{Name: "b", Lingering: true, Addr: addrB})
	c.Held = false
	want(step(c), Effect{Kind: StopForward, Reason: "this node no longer holds the VIP"})

	// A node that cannot reset clients drops a target without a takeover.
	f = &Forward{Targets: map[string]netip.Addr{"b": addrB}, Gone: map[string]time.Time{}}
	c = in(Peer{Name: "b", State: Dead, Lingering: true, Addr: addrB})
	c.CanReset = false
	want(step(c), Effect{Kind: DropTarget, Member: "b", Lost: true},
		Effect{Kind: StopForward, Reason: "no member holds or lingers on the VIP any more"})
}

// TestStartForward: a node about to claim forwards to the last holder
// while it holds the VIP and to every member lingering on it, not to a
// holder it did not see last, nor to one gone; not at all when it cannot,
// or when it forwards already.
func TestStartForward(t *testing.T) {
	view := []Peer{
		{Name: "a"},
		{Name: "b", Held: true, Addr: addrB},
		{Name: "c", Lingering: true, Addr: addrC},
		{Name: "d", Held: true, Addr: addrD},
		{Name: "e", State: Dead, Lingering: true, Addr: addrD},
	}
	in := Chain{Self: "a", LastHolder: "b", View: view, CanForward: true}
	got, unknown := StartForward(nil, in)
	if !maps.Equal(got, map[string]netip.Addr{"b": addrB, "c": addrC}) || len(unknown) != 0 {
		t.Errorf("StartForward = %v, %v; want b and c", got, unknown)
	}
	if got, _ := StartForward(&Forward{}, in); got != nil {
		t.Errorf("StartForward while forwarding = %v, want none", got)
	}
	in.CanForward = false
	if got, _ := StartForward(nil, in); got != nil {
		t.Errorf("StartForward without the capability = %v, want none", got)
	}
	in = Chain{Self: "a", View: []Peer{{Name: "a"}, {Name: "d", Held: true, Addr: addrD}}, CanForward: true}
	if got, _ := StartForward(nil, in); got != nil {
		t.Errorf("StartForward with no previous holder = %v, want none", got)
	}
}

// TestStepLinger covers StepLinger's rules, one situation per case.
func TestStepLinger(t *testing.T) {
	endsLinger := []Peer{{Name: "a"}, {Name: "b", Held: true, Forwarding: true, EndLinger: true}}
	tests := []struct {
		name string
		in   Linger
		want Kind // 0: nothing to do
	}{
		{"lingers on", Linger{Self: "a", Healthy: true}, 0},
		{"goroutine done", Linger{Self: "a", Finished: true}, EndLinger},
		{"unhealthy here", Linger{Self: "a"}, AbandonLinger},
		{"shutting down", Linger{Self: "a", Healthy: true, Ending: true}, HurryLinger},
		{"shutting down, hurried already", Linger{Self: "a", Healthy: true, Ending: true, Hurried: true}, 0},
		{"the holder restarts in place", Linger{Self: "a", Healthy: true, View: endsLinger}, HurryLinger},
		{"a dead holder asks to end", Linger{Self: "a", Healthy: true, View: []Peer{{Name: "b", State: Dead, Held: true, EndLinger: true}}}, 0},
		{"a member not holding asks to end", Linger{Self: "a", Healthy: true, View: []Peer{{Name: "b", EndLinger: true}}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Kind
			if e := StepLinger(tt.in); len(e) == 1 {
				got = e[0].Kind
			} else if len(e) > 1 {
				t.Fatalf("StepLinger = %+v, want one effect at most", e)
			}
			if got != tt.want {
				t.Errorf("StepLinger = %s, want %s", got, tt.want)
			}
		})
	}
}
