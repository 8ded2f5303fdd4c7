package l2

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestUpWithCarrier(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flags uint32
		want  bool
	}{
		{"up with carrier", unix.IFF_UP | unix.IFF_BROADCAST | unix.IFF_RUNNING | unix.IFF_LOWER_UP, true},
		{"up without carrier", unix.IFF_UP | unix.IFF_BROADCAST, false},
		{"administratively down", unix.IFF_BROADCAST | unix.IFF_LOWER_UP, false},
		{"no flags", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := upWithCarrier(tt.flags); got != tt.want {
				t.Fatalf("upWithCarrier(%#x) = %v, want %v", tt.flags, got, tt.want)
			}
		})
	}
}

// TestLinkUpReadsTheKernel compares LinkUp with what Go's net package reads
// for loopback (a separate netlink dump and parser); it needs no privileges.
func TestLinkUpReadsTheKernel(t *testing.T) {
	if LinkUp("vt-l2-absent") || LinkUp("") {
		t.Fatal("a missing interface reads as up")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	want := lo.Flags&net.FlagUp != 0 && lo.Flags&net.FlagRunning != 0
	if got := LinkUp("lo"); got != want {
		t.Fatalf("LinkUp(lo) = %v, net says up %v (flags %v)", got, want, lo.Flags)
	}
}

func TestLinkRemoved(t *testing.T) {
	link := func(index int) netlink.Link {
		return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index, Name: "eth0"}}
	}
	update := func(typ uint16, l netlink.Link) netlink.LinkUpdate {
		return netlink.LinkUpdate{Header: unix.NlMsghdr{Type: typ}, Link: l}
	}
	for _, tt := range []struct {
		name string
		u    netlink.LinkUpdate
		want bool
	}{
		{"interface deleted", update(unix.RTM_DELLINK, link(3)), true},
		{"interface changed", update(unix.RTM_NEWLINK, link(3)), false},
		{"another interface deleted", update(unix.RTM_DELLINK, link(4)), false},
		{"update without a link", update(unix.RTM_DELLINK, nil), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := linkRemoved(tt.u, 3); got != tt.want {
				t.Fatalf("linkRemoved = %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeReader plays the reader goroutine of a netlink subscription: it sends
// updates until done is closed, then reports the socket closed and closes
// ch; or, with fail set, it reports fail and closes ch after the updates.
func fakeReader(s *subscription[int], updates []int, fail error) (ended chan struct{}) {
	ended = make(chan struct{})
	go func() {
		defer close(ended)
		defer close(s.ch)
		for _, u := range updates {
			select {
			case s.ch <- u:
			case <-s.done:
				s.onError(net.ErrClosed)
				return
			}
		}
		if fail != nil {
			s.onError(fail)
			return
		}
		<-s.done
		s.onError(net.ErrClosed)
	}()
	return ended
}

// waitEnded fails the test if the fake reader is still running. The timeout
// only guards against a hung test.
func waitEnded(t *testing.T, ended chan struct{}) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription reader still running")
	}
}

func TestSubscriptionRun(t *testing.T) {
	t.Run("cancel returns nil and drains a blocked reader", func(t *testing.T) {
		s := newSubscription[int]()
		// More updates than the channel holds: the reader blocks on a send.
		many := make([]int, 100)
		ended := fakeReader(s, many, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var got int
		err := s.run(ctx, "test", func(int) error {
			got++
			if got == 3 {
				cancel()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("run after cancel = %v, want nil", err)
		}
		waitEnded(t, ended)
		if got < 3 || got == len(many) {
			t.Fatalf("handled %d updates, want to stop after the cancel at 3", got)
		}
	})
	t.Run("a failed subscription returns its error", func(t *testing.T) {
		s := newSubscription[int]()
		ended := fakeReader(s, []int{1, 2}, errBoom)
		var got []int
		err := s.run(context.Background(), "test", func(u int) error {
			got = append(got, u)
			return nil
		})
		if !errors.Is(err, errBoom) {
			t.Fatalf("run = %v, want errBoom", err)
		}
		waitEnded(t, ended)
		if len(got) != 2 {
			t.Fatalf("handled %v before the failure, want both updates", got)
		}
	})
	t.Run("an error from the handler ends the subscription", func(t *testing.T) {
		s := newSubscription[int]()
		ended := fakeReader(s, make([]int, 100), nil)
		err := s.run(context.Background(), "test", func(int) error { return errBoom })
		if !errors.Is(err, errBoom) {
			t.Fatalf("run = %v, want errBoom", err)
		}
		waitEnded(t, ended)
	})
}

// BenchmarkLinkUp measures one LinkUp call, made once per interface per
// reconcile pass.
func BenchmarkLinkUp(b *testing.B) {
	for b.Loop() {
		LinkUp("lo")
	}
}
