package conns

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestFeedMirror: a peer that gets every message has the holder's latest
// listing after each, from small deltas and a full set every FullEvery.
func TestFeedMirror(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	f := NewFeed(7, 10*time.Second)
	var m Mirror
	s := benchSet(rng, 2000, false)
	fulls, deltas, quiet := 0, 0, 0
	for i := range 60 {
		now := t0.Add(time.Duration(i) * time.Second)
		if i%5 != 4 { // a second without change now and then
			s = churn(rng, s, false)
		}
		msg := f.Next(s, now)
		if msg == nil {
			quiet++
		} else {
			var probe Set
			if probe.UnmarshalBinary(msg[16:]) == nil {
				fulls++
			} else {
				deltas++
			}
			if resync, err := m.Apply(msg, now); err != nil || resync {
				t.Fatalf("second %d: Apply = %v, %v", i, resync, err)
			}
		}
		got, synced, _ := m.Set()
		if !synced || !got.Equal(s) {
			t.Fatalf("second %d: mirror has %d connections (synced %v), holder %d", i, got.Len(), synced, s.Len())
		}
	}
	if fulls != 6 || quiet == 0 || deltas == 0 {
		t.Errorf("%d full sets, %d deltas, %d quiet seconds; want 6 full sets (one per 10 s) and both others", fulls, deltas, quiet)
	}
}

// TestMirrorResync: a lost delta or a restarted publisher leaves the
// mirror out of sync, asking for a full set, keeping what it had; the full
// set brings it back.
func TestMirrorResync(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	f := NewFeed(1, time.Hour)
	var m Mirror
	s0 := benchSet(rng, 100, false)
	mustApply(t, &m, f.Next(s0, t0), false)
	s1 := churn(rng, s0, false)
	_ = f.Next(s1, t0.Add(time.Second)) // lost
	s2 := churn(rng, s1, false)
	mustApply(t, &m, f.Next(s2, t0.Add(2*time.Second)), true)
	if got, synced, _ := m.Set(); synced || !got.Equal(s0) {
		t.Fatalf("after a gap: synced %v, %d connections; want out of sync with the last set known", synced, got.Len())
	}
	s3 := churn(rng, s2, false)
	mustApply(t, &m, f.Next(s3, t0.Add(3*time.Second)), true) // still out of sync
	mustApply(t, &m, f.Full(), false)
	if got, synced, _ := m.Set(); !synced || !got.Equal(s3) {
		t.Fatalf("after the full set: synced %v, equal %v", synced, got.Equal(s3))
	}
	// A duplicate and a late full set change nothing.
	s4 := churn(rng, s3, false)
	msg := f.Next(s4, t0.Add(4*time.Second))
	mustApply(t, &m, msg, false)
	mustApply(t, &m, msg, false)
	f2 := NewFeed(1, time.Hour)
	f2.Next(s0, t0)
	mustApply(t, &m, f2.Full(), false)
	if got, _, _ := m.Set(); !got.Equal(s4) {
		t.Fatal("a late full set replaced a newer state")
	}

	// The publisher restarts: a new epoch.
	g := NewFeed(2, time.Hour)
	g.seq, g.cur, g.fullAt = 10, s4, t0 // as if its first full set was lost
	mustApply(t, &m, g.Next(churn(rng, s4, false), t0.Add(5*time.Second)), true)
	mustApply(t, &m, g.Full(), false)
}

func TestMirrorRefusesGarbage(t *testing.T) {
	var m Mirror
	for _, msg := range [][]byte{nil, make([]byte, 15), make([]byte, 17), append(make([]byte, 16), 1, 9)} {
		if _, err := m.Apply(msg, t0); !errors.Is(err, ErrFormat) {
			t.Errorf("Apply(%x) = %v, want ErrFormat", msg, err)
		}
	}
	if _, _, updated := m.Set(); !updated.IsZero() {
		t.Error("garbage changed the mirror")
	}
}

func mustApply(t *testing.T, m *Mirror, msg []byte, wantResync bool) {
	t.Helper()
	resync, err := m.Apply(msg, t0)
	if err != nil || resync != wantResync {
		t.Fatalf("Apply = %v, %v; want resync %v", resync, err, wantResync)
	}
}
