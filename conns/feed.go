package conns

import (
	"encoding/binary"
	"fmt"
	"time"
)

// A Feed turns a holder's successive listings into messages for its
// peers: a Delta when the listing changed, the whole Set every FullEvery
// (and whenever a peer asks, with Full). It does no I/O and reads no
// clock: the caller sends the messages (encrypted, as the rest of the
// cluster's traffic) and passes the time in.
//
// A message is the publisher's epoch (8 bytes, big endian: a number that
// changes when the publisher restarts), a sequence number (8 bytes: the
// number of the listing it brings a peer to), then a Set or a Delta in
// their encoding. A Delta numbered n applies to the Set numbered n-1.
type Feed struct {
	epoch     uint64
	seq       uint64
	cur       Set
	fullAt    time.Time
	fullEvery time.Duration
}

// NewFeed returns a Feed for a publisher whose epoch is epoch (random at
// start, say), sending the whole set every fullEvery.
func NewFeed(epoch uint64, fullEvery time.Duration) *Feed {
	return &Feed{epoch: epoch, fullEvery: fullEvery}
}

// Next takes the holder's latest listing and returns the message for its
// peers: nil when nothing changed and no full set is due.
//
// A listing of more than MaxConns connections is cut to its first
// MaxConns: a peer refuses a longer list.
func (f *Feed) Next(s Set, now time.Time) []byte {
	if s.Len() > MaxConns {
		s = Set{k: s.k[:MaxConns]}
	}
	d := Diff(f.cur, s)
	full := f.seq == 0 || now.Sub(f.fullAt) >= f.fullEvery || now.Before(f.fullAt)
	if d.Empty() && !full {
		return nil
	}
	f.seq++
	f.cur = s
	if full {
		f.fullAt = now
		return f.Full()
	}
	b, _ := d.AppendBinary(f.header())
	return b
}

// Full returns the whole current set as a message (for a peer that joined
// or asked), numbered as the last message Next returned.
func (f *Feed) Full() []byte {
	b, _ := f.cur.AppendBinary(f.header())
	return b
}

func (f *Feed) header() []byte {
	b := binary.BigEndian.AppendUint64(nil, f.epoch)
	return binary.BigEndian.AppendUint64(b, f.seq)
}

// A Mirror is a peer's copy of one publisher's connections, kept from its
// Feed's messages. Like the Feed it does no I/O.
type Mirror struct {
	epoch, seq uint64
	set        Set
	synced     bool
	updated    time.Time
}

// Apply applies one message received at now. It returns resync when the
// message cannot be applied (a delta after a lost one, or from a new epoch
// of the publisher): the Mirror keeps what it had, no longer in sync, and
// the caller should ask the publisher for Full. A message older than the
// Mirror's state is ignored. An error means the message is malformed.
func (m *Mirror) Apply(msg []byte, now time.Time) (resync bool, err error) {
	if len(msg) < 16 {
		return false, fmt.Errorf("%w: message of %d bytes", ErrFormat, len(msg))
	}
	epoch, seq, body := binary.BigEndian.Uint64(msg), binary.BigEndian.Uint64(msg[8:]), msg[16:]
	var s Set
	if err := s.UnmarshalBinary(body); err == nil {
		if epoch == m.epoch && seq < m.seq && m.synced {
			return false, nil // a late full set
		}
		m.epoch, m.seq, m.set, m.synced, m.updated = epoch, seq, s, true, now
		return false, nil
	}
	var d Delta
	if err := d.UnmarshalBinary(body); err != nil {
		return false, err
	}
	switch {
	case epoch == m.epoch && seq <= m.seq && m.synced:
		return false, nil // already applied
	case epoch != m.epoch || seq != m.seq+1 || !m.synced:
		m.synced = false
		return true, nil
	}
	next := m.set.Apply(d)
	if next.Len() > MaxConns {
		m.synced = false
		return false, fmt.Errorf("%w: a delta making %d connections, more than %d", ErrFormat, next.Len(), MaxConns)
	}
	m.seq, m.set, m.updated = seq, next, now
	return false, nil
}

// Set returns the publisher's connections as last known, whether the
// Mirror is in sync with the publisher (every message applied since its
// last full set), and when it last changed (zero: nothing received yet).
// A Mirror out of sync still has the last set it knew: connections that
// have ended since are harmless to poke (the client, having no socket,
// answers with a reset), new ones are missing until the next full set.
func (m *Mirror) Set() (s Set, synced bool, updated time.Time) {
	return m.set, m.synced, m.updated
}
