package bfd

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	localDisc  = 0x1111
	remoteDisc = 0x2222
	ms         = time.Millisecond
)

// fixed returns a rand func that always returns r.
func fixed(r float64) func() float64 { return func() float64 { return r } }

func fast() Timers { return Timers{DesiredMinTx: 100 * ms, RequiredMinRx: 100 * ms, DetectMult: 3} }

// remote builds a packet from the remote system (disc remoteDisc) in
// state st, addressed to the local session once it knows it.
func remote(st State, yourDisc uint32) *Packet {
	return &Packet{
		State:                 st,
		DetectMult:            3,
		MyDiscriminator:       remoteDisc,
		YourDiscriminator:     yourDisc,
		DesiredMinTxInterval:  uint32(100 * ms / time.Microsecond),
		RequiredMinRxInterval: uint32(100 * ms / time.Microsecond),
	}
}

func mustReceive(t *testing.T, s *Session, now time.Time, p *Packet) {
	t.Helper()
	if err := s.Receive(now, p); err != nil {
		t.Fatalf("receive %+v: %v", p, err)
	}
}

// upSession returns a session brought Up by the three-way handshake at t0,
// with the Poll Sequence that follows answered.
func upSession(t *testing.T) *Session {
	t.Helper()
	s := NewSession(localDisc, fast(), fixed(0.5), t0)
	mustReceive(t, s, t0, remote(Down, 0))
	mustReceive(t, s, t0, remote(Up, localDisc))
	if s.State() != Up {
		t.Fatalf("state %v after handshake, want up", s.State())
	}
	var p Packet
	s.Transmit(t0, &p)
	f := remote(Up, localDisc)
	f.Final = true
	mustReceive(t, s, t0, f)
	if s.Polling() {
		t.Fatal("still polling after Final")
	}
	return s
}

func TestHandshake(t *testing.T) {
	cases := []struct {
		name   string
		from   State
		rx     State
		yours  uint32
		want   State
		wantOK bool
	}{
		{"down, remote down: init", Down, Down, 0, Init, true},
		{"down, remote init: up", Down, Init, localDisc, Up, true},
		{"down, remote up: stays down", Down, Up, localDisc, Down, true},
		{"init, remote init: up", Init, Init, localDisc, Up, true},
		{"init, remote up: up", Init, Up, localDisc, Up, true},
		{"init, remote down: stays init", Init, Down, localDisc, Init, true},
		{"up, remote init: stays up", Up, Init, localDisc, Up, true},
		{"up, remote up: stays up", Up, Up, localDisc, Up, true},
		{"up, remote down: down", Up, Down, localDisc, Down, true},
		{"up, remote admin down: down", Up, AdminDown, localDisc, Down, true},
		{"init, remote admin down: down", Init, AdminDown, localDisc, Down, true},
		{"down, remote admin down: stays down", Down, AdminDown, 0, Down, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSession(localDisc, fast(), fixed(0.5), t0)
			switch c.from {
			case Init:
				mustReceive(t, s, t0, remote(Down, 0))
			case Up:
				s = upSession(t)
			}
			if s.State() != c.from {
				t.Fatalf("setup: state %v, want %v", s.State(), c.from)
			}
			err := s.Receive(t0.Add(ms), remote(c.rx, c.yours))
			if (err == nil) != c.wantOK {
				t.Fatalf("receive: %v", err)
			}
			if s.State() != c.want {
				t.Errorf("state %v, want %v", s.State(), c.want)
			}
			if c.from != Down && c.want == Down && s.LocalDiag() != DiagNeighborDown {
				t.Errorf("diag %v, want %v", s.LocalDiag(), DiagNeighborDown)
			}
		})
	}
}

// TestReceptionRules covers the RFC 5880 section 6.8.6 discards that
// depend on the session.
func TestReceptionRules(t *testing.T) {
	t.Run("your discriminator not ours", func(t *testing.T) {
		s := upSession(t)
		err := s.Receive(t0.Add(ms), remote(Down, localDisc+1))
		if !errors.Is(err, ErrDiscriminator) || s.State() != Up {
			t.Fatalf("err %v state %v, want ErrDiscriminator and still up", err, s.State())
		}
	})
	for _, st := range []State{Init, Up} {
		t.Run("zero your discriminator in state "+st.String(), func(t *testing.T) {
			s := NewSession(localDisc, fast(), fixed(0.5), t0)
			err := s.Receive(t0, remote(st, 0))
			if !errors.Is(err, ErrNoDiscriminator) || s.State() != Down || s.RemoteDiscriminator() != 0 {
				t.Fatalf("err %v state %v remote disc %x, want ErrNoDiscriminator, down, 0", err, s.State(), s.RemoteDiscriminator())
			}
		})
	}
	t.Run("authentication bit without authentication", func(t *testing.T) {
		s := NewSession(localDisc, fast(), fixed(0.5), t0)
		p := remote(Down, 0)
		p.AuthPresent = true
		if err := s.Receive(t0, p); !errors.Is(err, ErrAuth) || s.State() != Down {
			t.Fatalf("err %v state %v, want ErrAuth, down", err, s.State())
		}
	})
	t.Run("local admin down discards after updating remote state", func(t *testing.T) {
		s := upSession(t)
		s.SetAdminDown(t0.Add(ms), DiagAdminDown)
		p := remote(Down, localDisc)
		p.MyDiscriminator = 0x3333
		err := s.Receive(t0.Add(2*ms), p)
		if !errors.Is(err, ErrLocalAdminDown) || s.State() != AdminDown {
			t.Fatalf("err %v state %v, want ErrLocalAdminDown, admin_down", err, s.State())
		}
		if s.RemoteDiscriminator() != 0x3333 || s.RemoteState() != Down {
			t.Errorf("remote disc %x state %v, want 3333 down (updated before the discard)", s.RemoteDiscriminator(), s.RemoteState())
		}
	})
	t.Run("remote variables are updated", func(t *testing.T) {
		s := NewSession(localDisc, fast(), fixed(0.5), t0)
		p := remote(Down, 0)
		p.Diag = DiagControlDetectionExpired
		p.RequiredMinRxInterval = 250000
		mustReceive(t, s, t0, p)
		if s.RemoteDiscriminator() != remoteDisc || s.RemoteDiag() != DiagControlDetectionExpired {
			t.Errorf("remote disc %x diag %v", s.RemoteDiscriminator(), s.RemoteDiag())
		}
		// Not Up: the local TX is at least 1s, above the remote's 250ms.
		if got := s.TxInterval(); got != SlowTxInterval {
			t.Errorf("tx interval %v, want %v", got, SlowTxInterval)
		}
	})
}

func TestPacketChecks(t *testing.T) {
	good := remote(Up, localDisc)
	b := good.Append(nil)
	if len(b) != HeaderLen {
		t.Fatalf("encoded %d bytes", len(b))
	}
	var p Packet
	if err := p.Unmarshal(b); err != nil || p != *good {
		t.Fatalf("round trip: %v, %+v != %+v", err, p, *good)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(good.Append(nil)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", b[:23], ErrShort},
		{"version 0", mod(func(b []byte) []byte { b[0] &^= 0xe0; return b }), ErrVersion},
		{"version 2", mod(func(b []byte) []byte { b[0] = b[0]&0x1f | 2<<5; return b }), ErrVersion},
		{"length below 24", mod(func(b []byte) []byte { b[3] = 23; return b }), ErrLengthTooSmall},
		{"length beyond payload", mod(func(b []byte) []byte { b[3] = 30; return b }), ErrShort},
		{"auth bit with length 24", mod(func(b []byte) []byte { b[1] |= bitAuth; return b }), ErrLengthTooSmall},
		{"detect mult zero", mod(func(b []byte) []byte { b[2] = 0; return b }), ErrDetectMult},
		{"multipoint", mod(func(b []byte) []byte { b[1] |= bitMultipoint; return b }), ErrMultipoint},
		{"my discriminator zero", mod(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }), ErrMyDiscrim},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Packet
			if err := p.Unmarshal(c.b); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	// Trailing bytes beyond the length field are ignored; an
	// authentication section is accepted by the decoder (the session
	// discards it).
	auth := append(mod(func(b []byte) []byte { b[1] |= bitAuth; b[3] = 26; return b }), 1, 2, 9)
	if err := p.Unmarshal(auth); err != nil || !p.AuthPresent {
		t.Fatalf("auth section: %v %+v", err, p)
	}
}

func TestDetectionTime(t *testing.T) {
	s := upSession(t)
	last := t0.Add(500 * ms)
	p := remote(Up, localDisc)
	p.DesiredMinTxInterval = 150000 // the remote sends slower than we require
	mustReceive(t, s, last, p)
	want := 3 * 150 * ms
	if got := s.DetectionTime(); got != want {
		t.Fatalf("detection time %v, want %v (remote mult 3 x max(100ms, 150ms))", got, want)
	}
	s.Timeout(last.Add(want - time.Nanosecond))
	if s.State() != Up {
		t.Fatalf("down before the detection time passed")
	}
	if next := s.Next(); next.After(last.Add(want)) {
		t.Errorf("Next %v is after the detection deadline %v", next, last.Add(want))
	}
	s.Timeout(last.Add(want))
	if s.State() != Down || s.LocalDiag() != DiagControlDetectionExpired {
		t.Fatalf("state %v diag %v, want down, control_detection_time_expired", s.State(), s.LocalDiag())
	}
	if s.RemoteDiscriminator() != 0 {
		t.Errorf("remote discriminator %x kept after detection expiry, want 0", s.RemoteDiscriminator())
	}
	// The packet telling the remote is due at once and says Down with
	// diagnostic 1 and no discriminator of the remote.
	now := last.Add(want)
	if !s.TxDue(now) {
		t.Fatal("no packet due after going down")
	}
	var out Packet
	s.Transmit(now, &out)
	if out.State != Down || out.Diag != DiagControlDetectionExpired || out.YourDiscriminator != 0 || out.DesiredMinTxInterval != 1000000 {
		t.Errorf("packet %+v, want down, diag 1, your disc 0, desired tx 1s", out)
	}
	// A remote with a larger multiplier gets a longer detection time.
	s2 := upSession(t)
	p = remote(Up, localDisc)
	p.DetectMult = 5
	mustReceive(t, s2, last, p)
	if got := s2.DetectionTime(); got != 500*ms {
		t.Errorf("detection time %v, want 500ms", got)
	}
}

func TestPollSequence(t *testing.T) {
	s := NewSession(localDisc, fast(), fixed(0.5), t0)
	var p Packet
	s.Transmit(t0, &p)
	if p.DesiredMinTxInterval != 1000000 || p.Poll {
		t.Fatalf("down packet %+v, want desired tx 1s (slow while not up), no poll", p)
	}
	mustReceive(t, s, t0.Add(10*ms), remote(Init, localDisc))
	if s.State() != Up || !s.Polling() {
		t.Fatalf("state %v polling %v, want up and polling", s.State(), s.Polling())
	}
	// The faster rate applies at once (a decrease needs no confirmation).
	if s.TxInterval() != 100*ms {
		t.Fatalf("tx interval %v, want 100ms", s.TxInterval())
	}
	// The Up packet goes out as soon as the remote's RequiredMinRx
	// (100ms) after the last one allows, not after the slow 1s.
	now := s.Next()
	if now.After(t0.Add(100 * ms)) {
		t.Fatalf("next packet at %v, want by 100ms", now.Sub(t0))
	}
	s.Transmit(now, &p)
	if !p.Poll || p.Final || p.DesiredMinTxInterval != 100000 || p.State != Up {
		t.Fatalf("packet %+v, want poll, desired tx 100ms, up", p)
	}
	// Until the Final, every periodic packet polls.
	now = s.Next()
	s.Transmit(now, &p)
	if !p.Poll {
		t.Fatal("second packet does not poll")
	}
	f := remote(Up, localDisc)
	f.Final = true
	mustReceive(t, s, now, f)
	if s.Polling() {
		t.Fatal("poll sequence not ended by the Final")
	}
	now = s.Next()
	s.Transmit(now, &p)
	if p.Poll {
		t.Fatal("packet polls after the Final")
	}

	// Slower TX while up: advertised at once with a poll, applied only
	// after the Final.
	s.SetTimers(now, Timers{DesiredMinTx: 500 * ms, RequiredMinRx: 100 * ms, DetectMult: 3})
	if !s.Polling() || s.TxInterval() != 100*ms {
		t.Fatalf("polling %v tx %v, want polling and still 100ms", s.Polling(), s.TxInterval())
	}
	now = s.Next()
	s.Transmit(now, &p)
	if !p.Poll || p.DesiredMinTxInterval != 500000 {
		t.Fatalf("packet %+v, want poll with desired tx 500ms", p)
	}
	mustReceive(t, s, now, f)
	if s.TxInterval() != 500*ms {
		t.Fatalf("tx interval %v after the Final, want 500ms", s.TxInterval())
	}

	// Smaller RequiredMinRx while up: the detection time keeps the old
	// value until the Final.
	s.SetTimers(now, Timers{DesiredMinTx: 500 * ms, RequiredMinRx: 50 * ms, DetectMult: 3})
	slow := remote(Up, localDisc)
	slow.DesiredMinTxInterval = 10000 // remote could send every 10ms
	mustReceive(t, s, now, slow)
	if got := s.DetectionTime(); got != 300*ms {
		t.Fatalf("detection time %v during the poll, want 300ms (old RequiredMinRx 100ms)", got)
	}
	slow.Final = true
	mustReceive(t, s, now, slow)
	if got := s.DetectionTime(); got != 150*ms {
		t.Fatalf("detection time %v after the Final, want 150ms", got)
	}
}

func TestPollIsAnsweredWithFinal(t *testing.T) {
	s := upSession(t)
	var p Packet
	now := t0.Add(20 * ms)
	s.Transmit(now, &p) // a periodic packet just went out
	if s.TxDue(now.Add(ms)) {
		t.Fatal("a packet is due 1ms after the last one")
	}
	poll := remote(Up, localDisc)
	poll.Poll = true
	mustReceive(t, s, now.Add(ms), poll)
	if !s.TxDue(now.Add(ms)) || !s.Next().Before(now.Add(2*ms)) {
		t.Fatal("the Final is not due at once")
	}
	next := s.nextTx
	s.Transmit(now.Add(ms), &p)
	if !p.Final || p.Poll {
		t.Fatalf("packet %+v, want Final without Poll", p)
	}
	if s.nextTx != next {
		t.Errorf("the Final moved the periodic schedule from %v to %v", next, s.nextTx)
	}
}

func TestJitter(t *testing.T) {
	for _, c := range []struct {
		name     string
		mult     uint8
		r        float64
		min, max time.Duration
	}{
		{"lowest", 3, 0, 75 * ms, 75 * ms},
		{"highest", 3, 0.9999999, 99 * ms, 100 * ms},
		{"mult 1 highest is at most 90%", 1, 0.9999999, 89 * ms, 90 * ms},
		{"mult 1 lowest", 1, 0, 75 * ms, 75 * ms},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := fast()
			tm.DetectMult = c.mult
			s := NewSession(localDisc, tm, fixed(c.r), t0)
			mustReceive(t, s, t0, remote(Init, localDisc))
			var p Packet
			now := t0
			s.Transmit(now, &p)
			for i := 0; i < 5; i++ {
				mustReceive(t, s, now, remote(Up, localDisc)) // keeps detection away
				next := s.Next()
				if gap := next.Sub(now); gap < c.min || gap > c.max {
					t.Fatalf("gap %v, want %v-%v", gap, c.min, c.max)
				}
				now = next
				s.Transmit(now, &p)
			}
		})
	}
}

func TestNoPeriodicPackets(t *testing.T) {
	t.Run("remote required min rx zero", func(t *testing.T) {
		s := upSession(t)
		p := remote(Up, localDisc)
		p.RequiredMinRxInterval = 0
		mustReceive(t, s, t0.Add(ms), p)
		if s.TxDue(t0.Add(time.Hour)) {
			t.Fatal("periodic packet due although the remote asked for none")
		}
	})
	t.Run("remote demand mode on an up session", func(t *testing.T) {
		s := upSession(t)
		p := remote(Up, localDisc)
		p.Demand = true
		mustReceive(t, s, t0.Add(ms), p)
		if s.TxDue(t0.Add(time.Hour)) {
			t.Fatal("periodic packet due although the remote runs demand mode")
		}
	})
}

func TestAdminDown(t *testing.T) {
	s := upSession(t)
	var p Packet
	now := t0.Add(30 * ms)
	s.Transmit(now, &p)
	s.SetAdminDown(now.Add(ms), DiagAdminDown)
	if !s.TxDue(now.Add(ms)) {
		t.Fatal("admin down not due at once")
	}
	s.Transmit(now.Add(ms), &p)
	if p.State != AdminDown || p.Diag != DiagAdminDown {
		t.Fatalf("packet %+v, want admin_down with diag 7", p)
	}
	// It keeps the rate in force (the remote expects packets at it), and
	// runs no detection.
	if s.TxInterval() != 100*ms {
		t.Errorf("tx interval %v, want 100ms", s.TxInterval())
	}
	s.Timeout(now.Add(time.Hour))
	if s.State() != AdminDown {
		t.Errorf("state %v after a long silence, want admin_down", s.State())
	}
}

// TestBackToUpAfterFailure: a session that timed out comes back by the
// handshake when the remote answers again, with the diagnostic cleared.
func TestBackToUpAfterFailure(t *testing.T) {
	s := upSession(t)
	s.Timeout(t0.Add(time.Second))
	if s.State() != Down {
		t.Fatal("not down")
	}
	// The remote also timed out: it sends Down without our discriminator.
	mustReceive(t, s, t0.Add(2*time.Second), remote(Down, 0))
	mustReceive(t, s, t0.Add(2*time.Second), remote(Up, localDisc))
	if s.State() != Up || s.LocalDiag() != DiagNone {
		t.Fatalf("state %v diag %v, want up, none", s.State(), s.LocalDiag())
	}
}

func TestTwoSessionsComeUp(t *testing.T) {
	// Two state machines wired back to back reach Up and stay there with
	// packets flowing at their jittered intervals.
	a := NewSession(1, fast(), fixed(0.3), t0)
	b := NewSession(2, fast(), fixed(0.8), t0)
	now := t0
	var p Packet
	for i := 0; i < 200; i++ {
		na, nb := a.Next(), b.Next()
		now = na
		src, dst := a, b
		if nb.Before(na) {
			now, src, dst = nb, b, a
		}
		src.Timeout(now)
		if src.TxDue(now) {
			src.Transmit(now, &p)
			var q Packet
			if err := q.Unmarshal(p.Append(nil)); err != nil {
				t.Fatal(err)
			}
			if err := dst.Receive(now, &q); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	}
	if a.State() != Up || b.State() != Up || a.Polling() || b.Polling() {
		t.Fatalf("states %v/%v polling %v/%v, want both up, no poll", a.State(), b.State(), a.Polling(), b.Polling())
	}
	if now.Sub(t0) < 3*time.Second {
		t.Errorf("200 packets took only %v", now.Sub(t0))
	}
}
