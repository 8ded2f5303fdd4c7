package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
)

// silenceAnnouncer records the calls the loop makes; it is a Silencer, as
// the l2 announcer is.
type silenceAnnouncer struct{ calls []string }

func (f *silenceAnnouncer) Announce(context.Context, netip.Addr) error {
	f.calls = append(f.calls, "announce")
	return nil
}

func (f *silenceAnnouncer) Withdraw(context.Context, netip.Addr) error {
	f.calls = append(f.calls, "withdraw")
	return nil
}

func (f *silenceAnnouncer) Silence(context.Context, netip.Addr) error {
	f.calls = append(f.calls, "silence")
	return nil
}

// TestHandoffSilencesAdvertisements: a holder handing a VIP off
// make-before-break stops advertising it (the l2 refresh) at the first
// pass of the handoff, once, and keeps the address: a refresh from it
// after the successor's announcement would point the clients back at it
// just before it releases. A handoff called off advertises again.
func TestHandoffSilencesAdvertisements(t *testing.T) {
	ctx := context.Background()
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ann := &silenceAnnouncer{}
	cfg, err := config.Parse("t.toml", []byte("[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := &vipState{cfg: cfg.VIPs[0], ann: ann, held: true}

	for _, step := range []struct {
		name string
		do   lifecycle.Action
		want []string
	}{
		{"handoff starts", lifecycle.Handoff, []string{"silence"}},
		{"handoff goes on", lifecycle.Handoff, []string{"silence"}},
		{"handoff called off", lifecycle.Keep, []string{"silence", "announce"}},
		{"kept", lifecycle.Keep, []string{"silence", "announce"}},
		{"handed off again, draining first", lifecycle.Drain, []string{"silence", "announce", "silence"}},
		{"handoff goes on after the drain", lifecycle.Handoff, []string{"silence", "announce", "silence"}},
	} {
		a.apply(ctx, v, lifecycle.Decision{Do: step.do})
		if !slices.Equal(ann.calls, step.want) {
			t.Fatalf("%s: calls %v, want %v", step.name, ann.calls, step.want)
		}
	}
}

// TestHandoffWithoutSilencer: an announcer that does not advertise unasked
// (BGP) is left alone during a handoff.
func TestHandoffWithoutSilencer(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ann := &fakeBGPOnly{}
	v := &vipState{ann: ann, held: true}
	a.apply(context.Background(), v, lifecycle.Decision{Do: lifecycle.Handoff})
	a.apply(context.Background(), v, lifecycle.Decision{Do: lifecycle.Keep})
	if ann.calls != 0 || v.silenced {
		t.Fatalf("%d calls, silenced %v; want none", ann.calls, v.silenced)
	}
}

type fakeBGPOnly struct{ calls int }

func (f *fakeBGPOnly) Announce(context.Context, netip.Addr) error { f.calls++; return nil }
func (f *fakeBGPOnly) Withdraw(context.Context, netip.Addr) error { f.calls++; return nil }
