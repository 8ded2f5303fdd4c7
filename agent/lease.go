package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The lease: fast failure detection and fencing on top of membership.
//
// Every node sends every other member a heartbeat every Interval (over
// memberlist's own packets, so encrypted and authenticated with key_file).
// A heartbeat carries a sequence number and, for each other member, the
// highest sequence number heard from it (an ack) and a vote: "I have not
// heard from it for Claim".
//
// Fence (the holder's side): a node may hold a VIP only while it has recent
// evidence that a majority of the known members hear it: a heartbeat it
// sent at time E (its own clock) acked by enough peers to make a majority
// with itself, and now - E < Release. When the evidence is older, the node
// releases every VIP at once and tells the others it cannot carry them.
//
// Expiry (the claimant's side): a node treats a member as gone, for the
// election, only on positive evidence that the member's fence has expired:
// a majority of the known members each vote that they have not heard from
// it for Claim (each measured on the voter's own monotonic clock, so no
// clocks are compared across hosts), or a connection to its membership port
// refused (the process is gone and holds no lease).
//
// Why that is safe (docs/design.md has the long form): two majorities
// share a member W. If W voted, W heard nothing from the holder for Claim,
// so W's last ack is for a heartbeat sent at least Claim before; the
// holder's evidence from W expired Release after that. With Claim > Release
// + margin, and every member of the claimant's majority voting, the holder
// has no majority left and released before anyone claims. The margin covers
// clock rates (1% each way), the holder's reaction time (one Interval plus
// scheduling) and the claimant's.
//
// leaseTracker is the pure state: time is passed in, nothing is sent here.

// leaseConfig are the lease's timers.
type leaseConfig struct {
	// Interval between heartbeats.
	Interval time.Duration
	// Release: a holder without majority evidence for this long releases.
	Release time.Duration
	// Claim: a member not heard from for this long gets this node's vote.
	Claim time.Duration
	// Fresh: a peer's votes count while its last heartbeat is this recent.
	Fresh time.Duration
}

// leaseConfigFor returns the lease timers of a failure_detection mode.
func leaseConfigFor(mode string) leaseConfig {
	if mode == "lan" {
		return leaseConfig{Interval: 200 * time.Millisecond, Release: 1200 * time.Millisecond, Claim: 1600 * time.Millisecond, Fresh: 800 * time.Millisecond}
	}
	return leaseConfig{Interval: 50 * time.Millisecond, Release: 300 * time.Millisecond, Claim: 400 * time.Millisecond, Fresh: 200 * time.Millisecond}
}

// leaseSent remembers when a heartbeat was sent, for the fence.
type leaseSent struct {
	seq uint64
	at  time.Time
}

// peerLease is what this node knows of one peer from its heartbeats.
type peerLease struct {
	heard    time.Time       // when its last heartbeat arrived (zero: never)
	epoch    uint64          // its process's epoch (a restart starts a new one)
	seq      uint64          // the highest sequence number it sent us
	ackedAt  time.Time       // send time of our heartbeat it acked last
	ackedSeq uint64          // and its sequence number
	votes    map[string]bool // its votes in its last heartbeat
	refused  time.Time       // its membership port refused a connection
}

// leaseTracker holds the lease state of one node.
type leaseTracker struct {
	cfg     leaseConfig
	self    string
	started time.Time
	// epoch names this process's run: sequence numbers start again with
	// a restart, and acks name the epoch they are for.
	epoch uint64
	seq   uint64
	sent  []leaseSent // recent heartbeats, oldest first
	peers map[string]*peerLease
}

func newLeaseTracker(self string, cfg leaseConfig, now time.Time, epoch uint64) *leaseTracker {
	return &leaseTracker{cfg: cfg, self: self, started: now, epoch: epoch, peers: map[string]*peerLease{}}
}

func (l *leaseTracker) peer(name string) *peerLease {
	p := l.peers[name]
	if p == nil {
		p = &peerLease{}
		l.peers[name] = p
	}
	return p
}

// silentFor is how long this node has not heard from name (counted from
// its own start when it never has: a node that just started has no vote).
func (l *leaseTracker) silentFor(name string, now time.Time) time.Duration {
	p := l.peers[name]
	since := l.started
	if p != nil && p.heard.After(since) {
		since = p.heard
	}
	return now.Sub(since)
}

// beat makes this node's next heartbeat for the members in base (the quorum
// base, self excluded or not) and records when it was sent.
func (l *leaseTracker) beat(base []string, now time.Time) heartbeat {
	l.seq++
	l.sent = append(l.sent, leaseSent{seq: l.seq, at: now})
	// Keep what the fence can still use: Release back, and a few more.
	for len(l.sent) > 1 && now.Sub(l.sent[0].at) > l.cfg.Release+l.cfg.Claim {
		l.sent = l.sent[1:]
	}
	hb := heartbeat{From: l.self, Epoch: l.epoch, Seq: l.seq}
	for _, n := range base {
		if n == l.self {
			continue
		}
		e := heartbeatEntry{Name: n, Silent: l.silentFor(n, now) >= l.cfg.Claim}
		if p := l.peers[n]; p != nil {
			e.Epoch, e.Seq = p.epoch, p.seq
		}
		hb.Entries = append(hb.Entries, e)
	}
	return hb
}

// receive records a peer's heartbeat.
func (l *leaseTracker) receive(hb heartbeat, now time.Time) {
	if hb.From == l.self || hb.From == "" {
		return
	}
	p := l.peer(hb.From)
	if hb.Epoch == p.epoch && hb.Seq < p.seq {
		return // reordered: an older heartbeat
	}
	// A new epoch is the peer restarted: its numbering starts again.
	p.heard, p.epoch, p.seq = now, hb.Epoch, hb.Seq
	p.refused = time.Time{}
	p.votes = map[string]bool{}
	for _, e := range hb.Entries {
		p.votes[e.Name] = e.Silent
		if e.Name == l.self && e.Epoch == l.epoch && e.Seq > p.ackedSeq {
			if at, ok := l.sentAt(e.Seq); ok {
				p.ackedSeq, p.ackedAt = e.Seq, at
			}
		}
	}
}

// sentAt returns when this node sent heartbeat seq.
func (l *leaseTracker) sentAt(seq uint64) (time.Time, bool) {
	i := sort.Search(len(l.sent), func(i int) bool { return l.sent[i].seq >= seq })
	if i < len(l.sent) && l.sent[i].seq == seq {
		return l.sent[i].at, true
	}
	return time.Time{}, false
}

// refused records that name's membership port refused a connection: its
// vipd is gone, so it holds no lease.
func (l *leaseTracker) refused(name string, now time.Time) {
	l.peer(name).refused = now
}

// majority is how many of n known members make a majority.
func majority(n int) int { return n/2 + 1 }

// fence reports whether this node may hold VIPs: required is whether quorum
// is required (without it there is no fence), base the quorum base. It
// returns the time of the newest majority evidence (zero: none) too.
func (l *leaseTracker) fence(base []string, required bool, now time.Time) (ok bool, evidence time.Time) {
	if !required {
		return true, now
	}
	need := majority(len(base)) - 1 // acks from peers, with this node's own
	if need <= 0 {
		return true, now
	}
	var acks []time.Time
	for _, n := range base {
		if n == l.self {
			continue
		}
		if p := l.peers[n]; p != nil && !p.ackedAt.IsZero() {
			acks = append(acks, p.ackedAt)
		}
	}
	if len(acks) < need {
		return false, time.Time{}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return b.Compare(a) })
	evidence = acks[need-1]
	return now.Sub(evidence) < l.cfg.Release, evidence
}

// expired reports whether name's lease has expired with positive evidence:
// its membership port refused a connection, or a majority of the known
// members (this node included) vote that they have not heard from it for
// Claim. Without required quorum this node's own vote is enough.
func (l *leaseTracker) expired(name string, base []string, required bool, now time.Time) bool {
	if p := l.peers[name]; p != nil && !p.refused.IsZero() && p.refused.After(p.heard) {
		return true
	}
	if l.silentFor(name, now) < l.cfg.Claim {
		return false
	}
	votes, need := 1, majority(len(base))
	if !required {
		need = 1
	}
	for _, n := range base {
		if n == l.self || n == name {
			continue
		}
		p := l.peers[n]
		if p != nil && now.Sub(p.heard) < l.cfg.Fresh && p.votes[name] {
			votes++
		}
	}
	return votes >= need
}

// silent reports the members this node has not heard from for twice the
// heartbeat interval: candidates for a direct probe.
func (l *leaseTracker) silent(base []string, now time.Time) []string {
	var out []string
	for _, n := range base {
		if n != l.self && l.silentFor(n, now) >= 2*l.cfg.Interval {
			out = append(out, n)
		}
	}
	return out
}

// heartbeat is the lease message.
//
// Wire format, version 1:
//
//	byte 0      message kind: 'H' (so it is told from other user messages)
//	byte 1      version (1)
//	bytes 2-9   the sender's epoch, big endian
//	bytes 10-17 sequence number, big endian
//	byte 18     length of the sender's name, then the name
//	byte        number of entries, then each entry:
//	            name length, name, uint64 epoch and uint64 highest sequence
//	            heard from it, flags (bit 0: silent vote)
type heartbeat struct {
	From    string
	Epoch   uint64
	Seq     uint64
	Entries []heartbeatEntry
}

// heartbeatEntry is the sender's view of one other member.
type heartbeatEntry struct {
	Name   string
	Epoch  uint64
	Seq    uint64
	Silent bool
}

const (
	heartbeatKind    = 'H'
	heartbeatVersion = 1
)

// encode returns the wire form.
func (h heartbeat) encode() ([]byte, error) {
	if len(h.From) > 255 || len(h.Entries) > 255 {
		return nil, errors.New("heartbeat: name or entry list too long")
	}
	b := make([]byte, 0, 16+len(h.From)+len(h.Entries)*24)
	b = append(b, heartbeatKind, heartbeatVersion)
	b = binary.BigEndian.AppendUint64(b, h.Epoch)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	b = append(b, byte(len(h.From)))
	b = append(b, h.From...)
	b = append(b, byte(len(h.Entries)))
	for _, e := range h.Entries {
		if len(e.Name) > 255 {
			return nil, errors.New("heartbeat: name too long")
		}
		b = append(b, byte(len(e.Name)))
		b = append(b, e.Name...)
		b = binary.BigEndian.AppendUint64(b, e.Epoch)
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		var f byte
		if e.Silent {
			f |= 1
		}
		b = append(b, f)
	}
	return b, nil
}

// decodeHeartbeat parses a heartbeat. Garbage gives an error, never a
// panic; a later version's extra bytes after the entries are ignored.
func decodeHeartbeat(b []byte) (heartbeat, error) {
	var h heartbeat
	if len(b) < 19 || b[0] != heartbeatKind {
		return h, errors.New("heartbeat: too short or not a heartbeat")
	}
	if b[1] == 0 {
		return h, fmt.Errorf("heartbeat: version %d not understood", b[1])
	}
	h.Epoch = binary.BigEndian.Uint64(b[2:])
	h.Seq = binary.BigEndian.Uint64(b[10:])
	p := 18
	str := func() (string, bool) {
		if p >= len(b) {
			return "", false
		}
		n := int(b[p])
		p++
		if p+n > len(b) {
			return "", false
		}
		s := string(b[p : p+n])
		p += n
		return s, true
	}
	var ok bool
	if h.From, ok = str(); !ok || !ValidNodeName(h.From) {
		return heartbeat{}, errors.New("heartbeat: bad sender name")
	}
	if p >= len(b) {
		return heartbeat{}, errors.New("heartbeat: no entry count")
	}
	n := int(b[p])
	p++
	for range n {
		var e heartbeatEntry
		if e.Name, ok = str(); !ok || !ValidNodeName(e.Name) {
			return heartbeat{}, errors.New("heartbeat: bad entry name")
		}
		if p+17 > len(b) {
			return heartbeat{}, errors.New("heartbeat: entry cut short")
		}
		e.Epoch = binary.BigEndian.Uint64(b[p:])
		e.Seq = binary.BigEndian.Uint64(b[p+8:])
		e.Silent = b[p+16]&1 != 0
		p += 17
		h.Entries = append(h.Entries, e)
	}
	return h, nil
}
