package lease

import (
	"testing"
	"time"
)

func TestGridAfter(t *testing.T) {
	base := time.Unix(1000, 0)
	g := Grid{Base: base}
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		t    time.Duration // after base
		p    time.Duration
		want time.Duration // after base
	}{
		{"on a beat: the next one", 300 * ms, 100 * ms, 400 * ms},
		{"between beats", 250 * ms, 100 * ms, 300 * ms},
		{"just after a beat", 300*ms + 1, 100 * ms, 400 * ms},
		{"just before a beat", 300*ms - 1, 100 * ms, 300 * ms},
		{"at the base", 0, time.Second, time.Second},
		{"before the base", -5 * ms, 100 * ms, 0},
		{"zero period", 123 * ms, 0, 123 * ms},
		// Periods that are multiples share beats: a health check every
		// 300 ms beats with every third lease round of 100 ms.
		{"300 ms on the 100 ms beats", 350 * ms, 300 * ms, 600 * ms},
	} {
		if got := g.After(base.Add(c.t), c.p).Sub(base); got != c.want {
			t.Errorf("%s: after(base+%v, %v) = base+%v, want base+%v", c.name, c.t, c.p, got, c.want)
		}
	}
	// Never more than one period after t, always strictly after it.
	for d := time.Duration(0); d < 2*time.Second; d += 7 * ms {
		at := base.Add(d)
		next := g.After(at, 250*ms)
		if !next.After(at) || next.Sub(at) > 250*ms {
			t.Fatalf("after(base+%v, 250ms) = base+%v: not in (t, t+p]", d, next.Sub(base))
		}
	}
	if got := (Grid{}).After(base, time.Second); !got.Equal(base.Add(time.Second)) {
		t.Errorf("zero grid: after(t, 1s) = %v, want t+1s", got)
	}
}
