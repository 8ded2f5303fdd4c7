package bfd

import (
	"errors"
	"time"
)

// SlowTxInterval is the smallest DesiredMinTxInterval a session advertises
// while it is not Up (RFC 5880 section 6.8.3).
const SlowTxInterval = time.Second

// Timers are the parameters a session advertises.
type Timers struct {
	// DesiredMinTx is bfd.DesiredMinTxInterval while the session is Up;
	// while it is not Up, at least SlowTxInterval is advertised.
	DesiredMinTx time.Duration
	// RequiredMinRx is bfd.RequiredMinRxInterval.
	RequiredMinRx time.Duration
	// DetectMult is bfd.DetectMult; it must not be zero.
	DetectMult uint8
}

// Errors returned by Session.Receive for packets the session discards.
var (
	ErrDiscriminator   = errors.New("bfd: your discriminator is not this session's")
	ErrNoDiscriminator = errors.New("bfd: your discriminator is zero in a packet whose state is init or up")
	ErrAuth            = errors.New("bfd: authentication present but not configured")
	ErrLocalAdminDown  = errors.New("bfd: session is administratively down")
)

// params are the two intervals whose change needs a Poll Sequence.
type params struct{ tx, rx time.Duration }

// Session is the state machine of one asynchronous BFD session (RFC 5880
// section 6.8) without sockets or timers: every method takes the current
// time, Next says when it must be called again, and Transmit fills the
// packet to send. Demand mode, the Echo function and authentication are
// not implemented (a remote in Demand mode is honoured). A Session is not
// safe for concurrent use.
type Session struct {
	timers Timers
	rand   func() float64

	state, remoteState    State
	localDiag, remoteDiag Diag
	localDisc, remoteDisc uint32
	remoteMinRx           time.Duration
	remoteDesiredTx       time.Duration
	remoteMult            uint8
	remoteDemand          bool

	// acked are the intervals the remote is known to apply: equal to what
	// is advertised while not Up, updated by the Final that ends a Poll
	// Sequence while Up.
	acked     params
	polling   bool
	polled    params // advertised when the running Poll Sequence started
	sendFinal bool
	urgent    bool          // a state change to announce with the next packet
	adminTx   time.Duration // TX interval kept while AdminDown

	interval time.Duration // the TX interval nextTx was computed with
	lastTx   time.Time
	nextTx   time.Time
	detectAt time.Time // zero when no detection timer runs
}

// NewSession returns a session in state Down with local discriminator disc
// (non-zero, unique on this system). rnd returns numbers in [0, 1) for the
// transmit jitter of RFC 5880 section 6.8.7. The first packet is due at
// now.
func NewSession(disc uint32, t Timers, rnd func() float64, now time.Time) *Session {
	s := &Session{
		timers:      t,
		rand:        rnd,
		state:       Down,
		remoteState: Down,
		localDisc:   disc,
		remoteMinRx: time.Microsecond, // RFC 5880 section 6.8.1: initialised to 1
		nextTx:      now,
		lastTx:      now,
	}
	s.acked = s.adv()
	s.interval = s.txInterval()
	return s
}

// State returns bfd.SessionState.
func (s *Session) State() State { return s.state }

// RemoteState returns bfd.RemoteSessionState.
func (s *Session) RemoteState() State { return s.remoteState }

// LocalDiag returns bfd.LocalDiag: why the session last went down.
func (s *Session) LocalDiag() Diag { return s.localDiag }

// RemoteDiag returns the diagnostic of the last packet received.
func (s *Session) RemoteDiag() Diag { return s.remoteDiag }

// LocalDiscriminator returns bfd.LocalDiscr.
func (s *Session) LocalDiscriminator() uint32 { return s.localDisc }

// RemoteDiscriminator returns bfd.RemoteDiscr (zero when unknown).
func (s *Session) RemoteDiscriminator() uint32 { return s.remoteDisc }

// Polling reports whether a Poll Sequence is in progress.
func (s *Session) Polling() bool { return s.polling }

// Timers returns the configured timers.
func (s *Session) Timers() Timers { return s.timers }

// adv returns the intervals advertised now.
func (s *Session) adv() params {
	tx := s.timers.DesiredMinTx
	switch s.state {
	case Up:
	case AdminDown:
		tx = s.adminTx
	default:
		tx = max(tx, SlowTxInterval)
	}
	return params{tx: tx, rx: s.timers.RequiredMinRx}
}

// inForce returns the local TX interval and the RequiredMinRx used for the
// detection time: while a Poll Sequence has not confirmed a change, the
// slower TX (section 6.8.3) and the larger RX (section 6.8.4) stay in force.
func (s *Session) inForce() params {
	a := s.adv()
	if s.state != Up {
		return a
	}
	return params{tx: min(a.tx, s.acked.tx), rx: max(a.rx, s.acked.rx)}
}

// TxInterval returns the interval between periodic packets before jitter:
// the larger of the local DesiredMinTx in force and the remote's
// RequiredMinRx (section 6.8.7).
func (s *Session) TxInterval() time.Duration {
	return s.txInterval()
}

func (s *Session) txInterval() time.Duration {
	return max(s.inForce().tx, s.remoteMinRx)
}

// DetectionTime returns the remote's detect multiplier times the larger of
// the RequiredMinRx in force and the remote's last DesiredMinTx (section
// 6.8.4), or zero before any packet was received.
func (s *Session) DetectionTime() time.Duration {
	return time.Duration(s.remoteMult) * max(s.inForce().rx, s.remoteDesiredTx)
}

// periodic reports whether periodic transmission is allowed (section
// 6.8.7): not when the remote asks for no packets (RequiredMinRx zero) or
// runs Demand mode on an Up session.
func (s *Session) periodic() bool {
	if s.remoteMinRx == 0 {
		return false
	}
	return !(s.remoteDemand && s.state == Up && s.remoteState == Up)
}

// Next returns when the session must next be served (Transmit or
// Timeout): the next periodic packet, a pending Final, or the detection
// timer, whichever is first. The zero time means nothing is scheduled.
func (s *Session) Next() time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if s.sendFinal {
		earliest(s.lastTx) // as soon as possible
	}
	if s.periodic() {
		earliest(s.nextTx)
	}
	earliest(s.detectAt)
	return next
}

// TxDue reports whether a packet must be sent at now: a Final answering a
// Poll, or the periodic packet.
func (s *Session) TxDue(now time.Time) bool {
	return s.sendFinal || (s.periodic() && !now.Before(s.nextTx))
}

// Transmit fills p with the packet to send at now (section 6.8.7) and
// schedules the next periodic one with jitter. A Final answering a Poll
// is sent without regard to the periodic schedule; a packet never carries
// both Poll and Final.
func (s *Session) Transmit(now time.Time, p *Packet) {
	a := s.adv()
	*p = Packet{
		Diag:                  s.localDiag,
		State:                 s.state,
		DetectMult:            s.timers.DetectMult,
		MyDiscriminator:       s.localDisc,
		YourDiscriminator:     s.remoteDisc,
		DesiredMinTxInterval:  micros(a.tx),
		RequiredMinRxInterval: micros(a.rx),
	}
	periodic := s.periodic() && !now.Before(s.nextTx)
	if s.sendFinal {
		p.Final = true
		s.sendFinal = false
	} else if s.polling {
		p.Poll = true
	}
	if periodic {
		s.interval = s.txInterval()
		s.lastTx = now
		s.nextTx = now.Add(s.jitter(s.interval))
	}
}

// jitter reduces d by a random 0-25% (10-25% when DetectMult is 1), as
// section 6.8.7 requires.
func (s *Session) jitter(d time.Duration) time.Duration {
	r := s.rand()
	if s.timers.DetectMult == 1 {
		return d*3/4 + time.Duration(r*float64(d*15/100))
	}
	return d*3/4 + time.Duration(r*float64(d/4))
}

// Receive applies a packet that passed Packet.Unmarshal and was
// demultiplexed to this session (RFC 5880 section 6.8.6). It returns an
// Err value when the packet is discarded.
func (s *Session) Receive(now time.Time, p *Packet) error {
	if p.YourDiscriminator != 0 && p.YourDiscriminator != s.localDisc {
		return ErrDiscriminator
	}
	if p.YourDiscriminator == 0 && p.State != Down && p.State != AdminDown {
		return ErrNoDiscriminator
	}
	if p.AuthPresent {
		return ErrAuth
	}
	s.remoteDisc = p.MyDiscriminator
	s.remoteState = p.State
	s.remoteDiag = p.Diag
	s.remoteDemand = p.Demand
	s.remoteMinRx = fromMicros(p.RequiredMinRxInterval)
	s.remoteDesiredTx = fromMicros(p.DesiredMinTxInterval)
	s.remoteMult = p.DetectMult
	if p.Final && s.polling {
		s.polling = false
		s.acked = s.polled
		if s.state == Up && s.adv() != s.acked {
			s.startPoll()
		}
	}
	if s.state == AdminDown {
		s.settle(now)
		return ErrLocalAdminDown
	}
	if p.State == AdminDown {
		if s.state != Down {
			s.localDiag = DiagNeighborDown
			s.setState(now, Down)
		}
	} else {
		switch s.state {
		case Down:
			switch p.State {
			case Down:
				s.setState(now, Init)
			case Init:
				s.setState(now, Up)
			}
		case Init:
			if p.State == Init || p.State == Up {
				s.setState(now, Up)
			}
		case Up:
			if p.State == Down {
				s.localDiag = DiagNeighborDown
				s.setState(now, Down)
			}
		}
	}
	if p.Poll {
		s.sendFinal = true
	}
	// Computed after the state change, which may change its inputs.
	s.detectAt = now.Add(s.DetectionTime())
	s.settle(now)
	return nil
}

// Timeout runs the detection timer (section 6.8.4): when a detection time
// has passed without a packet, an Init or Up session goes Down with
// diagnostic 1 and the remote discriminator is forgotten (section 6.8.1).
func (s *Session) Timeout(now time.Time) {
	if s.detectAt.IsZero() || now.Before(s.detectAt) {
		return
	}
	s.detectAt = time.Time{}
	s.remoteDisc = 0
	if s.state == Init || s.state == Up {
		s.localDiag = DiagControlDetectionExpired
		s.setState(now, Down)
	}
	s.settle(now)
}

// SetTimers changes the configured timers. On an Up session the change is
// signalled with a Poll Sequence; a slower TX or a smaller RequiredMinRx
// only takes effect once the remote has answered it (section 6.8.3).
func (s *Session) SetTimers(now time.Time, t Timers) {
	s.timers = t
	if s.state != Up {
		s.acked = s.adv()
	} else if !s.polling && s.adv() != s.acked {
		s.startPoll()
	}
	s.settle(now)
}

// SetAdminDown takes the session administratively down (section 6.8.16)
// with diagnostic diag (normally DiagAdminDown): the next packet, due at
// once, says AdminDown, and the remote treats the session as down without
// counting it as a failure. Packets keep the TX interval in force before,
// so that a system shutting down can tell the remote quickly.
func (s *Session) SetAdminDown(now time.Time, diag Diag) {
	if s.state == AdminDown {
		return
	}
	s.adminTx = s.inForce().tx
	s.localDiag = diag
	s.setState(now, AdminDown)
	s.detectAt = time.Time{}
	s.settle(now)
	s.nextTx = now
}

func (s *Session) startPoll() {
	s.polling = true
	s.polled = s.adv()
}

func (s *Session) setState(now time.Time, to State) {
	from := s.state
	s.state = to
	if to == Up && from != Up {
		s.localDiag = DiagNone
		if s.adv() != s.acked {
			s.startPoll()
		}
	}
	if to != Up {
		s.polling = false
		s.acked = s.adv()
	}
	s.urgent = true
}

// settle reschedules the next periodic packet after a change: one
// jittered new interval after the last packet when the TX interval
// changed, and after a state change at once (so the remote learns it),
// but no sooner than the remote's RequiredMinRx after the last packet.
func (s *Session) settle(now time.Time) {
	if iv := s.txInterval(); iv != s.interval {
		s.interval = iv
		s.nextTx = s.lastTx.Add(s.jitter(iv))
	}
	if s.urgent {
		s.urgent = false
		if soon := s.lastTx.Add(s.remoteMinRx); soon.Before(s.nextTx) {
			s.nextTx = soon
		}
	}
	if s.nextTx.Before(now) {
		s.nextTx = now
	}
}

func micros(d time.Duration) uint32 {
	us := d / time.Microsecond
	if us > 0xffffffff {
		return 0xffffffff
	}
	return uint32(us)
}

func fromMicros(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }
