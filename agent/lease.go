package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// The lease: fast failure detection and fencing on top of membership.
//
// Heartbeats travel on the membership port (transport.go; sealed with the
// cluster key when key_file is set). A heartbeat carries the sender's
// sequence number and, for each other member, the highest sequence number
// heard from it (an ack) and a vote: "I expected to hear from it and have
// not, for Claim".
//
// Who sends what, so an idle cluster wakes as little as it can:
//
//   - A driver is a node that holds a VIP or is about to claim one. It runs
//     a round every Interval: a heartbeat to every member, one of them (in
//     turn) asked to answer at once; when the answer is late it asks all of
//     them, twice at most per round.
//   - Every node answers a heartbeat that asks it, at once, from the packet
//     reader: no timer, no extra wake-up.
//   - A node that expects to hear a driver and has not for two intervals
//     raises the alarm: until the driver is heard again or is gone, it sends
//     every member a heartbeat every half interval asking all to answer, so
//     live members show up and the votes about the silent one travel fast.
//
// Fence (the holder's side): a node may hold a VIP only while it has recent
// evidence that a majority of the known members hear it: a heartbeat it sent
// at time E (its own clock) acked by enough peers to make a majority with
// itself, and now - E < Release. A holder whose evidence is older releases
// every VIP at once and tells the others it cannot carry them.
//
// Expiry (the claimant's side): a node treats a driver as gone, for the
// election, only on positive evidence that its fence has expired: a
// majority of the known members (itself included) each vote that they have
// not heard from it for Claim (each on its own monotonic clock: no clocks
// are compared across hosts), or its membership port refused a connection
// (its vipd is gone and holds no lease). A member taken for gone stays so
// until it is heard again.
//
// Why that is safe (docs/design.md has the long form): two majorities share
// a member W. If W voted, W heard nothing from the holder for Claim, so its
// acks name no heartbeat sent in that time, and the holder's evidence from W
// expired Release after the last one. With Claim > Release + margin and
// every member of the claimant's majority voting, the holder has no majority
// left and released before anyone claims. The margin covers clock rates (1%
// each way), the holder's reaction (a pass of its loop and a netlink call)
// and scheduling on a loaded host.
//
// leaseTracker is the pure state: time is passed in, nothing is sent here.

// leaseConfig are the lease's timers.
type leaseConfig struct {
	// Interval between a driver's rounds; the alarm beats at half of it.
	Interval time.Duration
	// Retry: how long a driver waits for the asked member's answer before
	// asking all.
	Retry time.Duration
	// Release: a holder without majority evidence for this long releases.
	Release time.Duration
	// Claim: an expected member not heard from for this long gets this
	// node's vote.
	Claim time.Duration
	// Fresh: a peer's votes count while its last heartbeat is this recent.
	Fresh time.Duration
}

// leaseConfigFor returns the lease timers of a failure_detection mode.
func leaseConfigFor(mode string) leaseConfig {
	if mode == "lan" {
		return leaseConfig{Interval: 250 * time.Millisecond, Retry: 60 * time.Millisecond, Release: 1200 * time.Millisecond,
			Claim: 1600 * time.Millisecond, Fresh: 500 * time.Millisecond}
	}
	return leaseConfig{Interval: 100 * time.Millisecond, Retry: 25 * time.Millisecond, Release: 300 * time.Millisecond,
		Claim: 400 * time.Millisecond, Fresh: 150 * time.Millisecond}
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
	driver   bool            // its last heartbeat said it drives rounds
	// expectSince is when this node began expecting to hear it (it became
	// a driver, or the alarm asked it); zero while not expected.
	expectSince time.Time
	refused     time.Time // its membership port refused a connection
	gone        bool      // taken for gone; cleared when heard again
	goneAt      time.Time // when it was taken for gone
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

	grid       grid      // rounds fall on its beats of Interval
	driver     bool      // this node drives rounds (set by the loop)
	resign     bool      // it stopped: the next tick says so
	hello      bool      // just started: the first tick says so to all
	alarmSince time.Time // zero: no alarm
	// The current round: the heartbeat that asked one member, and the
	// retries that asked all.
	roundSeq   uint64
	roundAsked string
	roundAt    time.Time
	retries    int
	turn       int
}

func newLeaseTracker(self string, cfg leaseConfig, now time.Time, epoch uint64) *leaseTracker {
	return &leaseTracker{cfg: cfg, self: self, started: now, epoch: epoch, peers: map[string]*peerLease{}, hello: true, grid: grid{base: now}}
}

func (l *leaseTracker) peer(name string) *peerLease {
	p := l.peers[name]
	if p == nil {
		p = &peerLease{}
		l.peers[name] = p
	}
	return p
}

// expected reports whether this node expects to hear name now: name drives
// rounds, or this node's alarm asks everyone.
func (l *leaseTracker) expected(name string) bool {
	p := l.peers[name]
	return p != nil && !p.expectSince.IsZero()
}

// silentFor is how long an expected member has not been heard (0 when not
// expected; counted from when the expectation began, so a node that just
// started or just raised its alarm has no vote yet).
func (l *leaseTracker) silentFor(name string, now time.Time) time.Duration {
	p := l.peers[name]
	if p == nil || p.expectSince.IsZero() {
		return 0
	}
	since := p.expectSince
	if p.heard.After(since) {
		since = p.heard
	}
	return now.Sub(since)
}

// setDriver makes this node drive rounds (it holds a VIP or is about to
// claim one) or stop; when it stops, its next tick says so.
func (l *leaseTracker) setDriver(on bool) {
	if l.driver && !on {
		l.resign = true
	}
	if on && !l.driver {
		l.roundAt = time.Time{} // a round at the next tick
	}
	l.driver = on
}

// heartbeat makes this node's next heartbeat, asking ask to answer ("" for
// no one, askAll for everyone), and records when it was sent.
func (l *leaseTracker) heartbeat(base []string, ask string, askAll, reply bool, now time.Time) heartbeat {
	l.seq++
	l.sent = append(l.sent, leaseSent{seq: l.seq, at: now})
	for len(l.sent) > 1 && now.Sub(l.sent[0].at) > l.cfg.Release+l.cfg.Claim {
		l.sent = l.sent[1:]
	}
	hb := heartbeat{From: l.self, Epoch: l.epoch, Seq: l.seq, Driver: l.driver, AskAll: askAll, Reply: reply, Ask: ask}
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

// leaseSend is a heartbeat to send, to one member or to all (To == "").
type leaseSend struct {
	To string
	HB heartbeat
}

// tick is the lease's clock: called every Interval/2 (and when the loop
// changes something), it returns the heartbeats due now and when to call it
// next (zero: only when a heartbeat arrives or the loop asks).
func (l *leaseTracker) tick(base []string, now time.Time) ([]leaseSend, time.Time) {
	var out []leaseSend
	peers := l.others(base)

	// The alarm: raised when an expected driver is silent for two
	// intervals; it asks everyone every half interval until no driver is
	// silent and not yet gone.
	alarm := false
	for _, n := range peers {
		if p := l.peers[n]; p != nil && p.driver && !p.gone && l.silentFor(n, now) >= 2*l.cfg.Interval {
			alarm = true
		}
	}
	switch {
	case alarm && l.alarmSince.IsZero():
		l.alarmSince = now
		for _, n := range peers {
			if p := l.peer(n); p.expectSince.IsZero() {
				p.expectSince = now
			}
		}
	case !alarm && !l.alarmSince.IsZero() && now.Sub(l.alarmSince) >= l.cfg.Claim:
		// Over (held a little, so the last votes travel): expect only
		// drivers again.
		l.alarmSince = time.Time{}
		for _, n := range peers {
			if p := l.peers[n]; p != nil && !p.driver {
				p.expectSince = time.Time{}
			}
		}
	}
	if (l.resign || l.hello) && len(peers) > 0 {
		// This node just started (a member that took it for gone hears it
		// again) or stopped driving (nobody expects it any more): say so.
		l.resign, l.hello = false, false
		out = append(out, leaseSend{HB: l.heartbeat(base, "", false, false, now)})
	}
	switch {
	case !l.alarmSince.IsZero():
		if l.roundAt.IsZero() || now.Sub(l.roundAt) >= l.cfg.Interval/2 {
			out = append(out, leaseSend{HB: l.heartbeat(base, "", true, false, now)})
			l.roundAt, l.roundSeq, l.roundAsked, l.retries = now, l.seq, "", 2
		}
	case !l.driver || len(peers) == 0:
	case l.roundAt.IsZero() || !now.Before(l.grid.after(l.roundAt, l.cfg.Interval)):
		// A driver's round, on the grid's next beat (at most Interval
		// after the last round; the first one at once). With more than
		// one ack needed for a majority, every round asks all.
		l.turn = (l.turn + 1) % len(peers)
		ask, all := peers[l.turn], majority(len(peers)+1) > 2
		if all {
			ask = ""
		}
		out = append(out, leaseSend{HB: l.heartbeat(base, ask, all, false, now)})
		l.roundAt, l.roundSeq, l.roundAsked, l.retries = now, l.seq, ask, 0
	case l.retries < 2 && !l.answered(l.roundAsked, l.roundSeq) && now.Sub(l.roundAt) >= l.cfg.Retry*time.Duration(l.retries+1):
		// The asked member is late: ask all.
		l.retries++
		out = append(out, leaseSend{HB: l.heartbeat(base, "", true, false, now)})
		l.roundSeq, l.roundAsked = l.seq, ""
	}
	return out, l.next(base, now)
}

// next is when tick has something to do (zero: only when a heartbeat
// arrives or the loop asks).
func (l *leaseTracker) next(base []string, now time.Time) time.Time {
	var next time.Time
	switch {
	case l.resign || (l.hello && len(l.others(base)) > 0):
		return now
	case !l.alarmSince.IsZero():
		next = l.roundAt.Add(l.cfg.Interval / 2)
	case !l.driver || len(l.others(base)) == 0:
	case l.roundAt.IsZero():
		return now
	case l.retries < 2 && !l.answered(l.roundAsked, l.roundSeq):
		next = l.roundAt.Add(l.cfg.Retry * time.Duration(l.retries+1))
	default:
		next = l.grid.after(l.roundAt, l.cfg.Interval)
	}
	if w := l.watchDeadline(now); !w.IsZero() && (next.IsZero() || w.Before(next)) {
		next = w
	}
	return next
}

// watchDeadline is when a silent driver would raise the alarm: two
// intervals after it was last heard (zero: no driver is expected). A
// heartbeat from it moves the deadline, so a node that only listens wakes
// only when a driver falls silent.
//
// Once the alarm is up, a deadline that has passed is moot: the alarm's
// rounds (every half interval) take over until the driver is heard or
// gone. Returned, it would make the next tick due at once, again and
// again: a busy loop for as long as a driver is silent and not yet gone,
// on every node, which on a loaded host (many members, many drivers)
// delays the very heartbeats the fence waits for.
func (l *leaseTracker) watchDeadline(now time.Time) time.Time {
	var next time.Time
	for _, p := range l.peers {
		if !p.driver || p.gone || p.expectSince.IsZero() {
			continue
		}
		since := p.expectSince
		if p.heard.After(since) {
			since = p.heard
		}
		d := since.Add(2 * l.cfg.Interval)
		if !l.alarmSince.IsZero() && !d.After(now) {
			continue
		}
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next
}

// answered reports whether the round asking who (everyone: "") has its
// answer: who (or anyone) acked seq or later.
func (l *leaseTracker) answered(who string, seq uint64) bool {
	for n, p := range l.peers {
		if (who == "" || n == who) && p.ackedSeq >= seq {
			return true
		}
	}
	return false
}

// others is base without this node, sorted.
func (l *leaseTracker) others(base []string) []string {
	out := make([]string, 0, len(base))
	for _, n := range base {
		if n != l.self {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// receive records a peer's heartbeat and returns the answer to send back,
// if it asked this node.
func (l *leaseTracker) receive(hb heartbeat, base []string, now time.Time) (heartbeat, bool) {
	if hb.From == l.self || hb.From == "" {
		return heartbeat{}, false
	}
	p := l.peer(hb.From)
	if hb.Epoch == p.epoch && hb.Seq < p.seq {
		return heartbeat{}, false // reordered: an older heartbeat
	}
	// A new epoch is the peer restarted: its numbering starts again.
	p.heard, p.epoch, p.seq = now, hb.Epoch, hb.Seq
	p.refused, p.gone = time.Time{}, false
	switch {
	case hb.Driver && !p.driver:
		p.driver = true
		if p.expectSince.IsZero() {
			p.expectSince = now
		}
	case !hb.Driver && p.driver:
		p.driver = false
		if l.alarmSince.IsZero() {
			p.expectSince = time.Time{}
		}
	}
	p.votes = map[string]bool{}
	for _, e := range hb.Entries {
		p.votes[e.Name] = e.Silent
		if e.Name == l.self && e.Epoch == l.epoch && e.Seq > p.ackedSeq {
			if at, ok := l.sentAt(e.Seq); ok {
				p.ackedSeq, p.ackedAt = e.Seq, at
			}
		}
	}
	if !hb.Reply && (hb.AskAll || hb.Ask == l.self) {
		return l.heartbeat(base, "", false, true, now), true
	}
	return heartbeat{}, false
}

// sentAt returns when this node sent heartbeat seq.
func (l *leaseTracker) sentAt(seq uint64) (time.Time, bool) {
	i := sort.Search(len(l.sent), func(i int) bool { return l.sent[i].seq >= seq })
	if i < len(l.sent) && l.sent[i].seq == seq {
		return l.sent[i].at, true
	}
	return time.Time{}, false
}

// heardWithin returns the members whose last heartbeat arrived less than d
// before now, sorted.
func (l *leaseTracker) heardWithin(d time.Duration, now time.Time) []string {
	var out []string
	for n, p := range l.peers {
		if !p.heard.IsZero() && now.Sub(p.heard) < d {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// refused records that name's membership port refused a connection: its
// vipd is gone, so it holds no lease.
func (l *leaseTracker) refused(name string, now time.Time) {
	l.peer(name).refused = now
}

// majority is how many of n known members make a majority.
func majority(n int) int { return n/2 + 1 }

// fence reports whether this node may hold VIPs now: without required
// quorum always; with it, when a majority of the known members (this node
// included) acked one of its heartbeats sent less than Release ago. It
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

// expired reports whether name is gone on positive evidence: its
// membership port refused a connection, or a majority of the known members
// (this node included) vote that they expected and have not heard from it
// for Claim. Without required quorum this node's own vote is enough. Once
// gone, a member stays gone until it is heard again.
func (l *leaseTracker) expired(name string, base []string, required bool, now time.Time) bool {
	p := l.peers[name]
	if p == nil {
		return false
	}
	if p.gone {
		return true
	}
	if !p.refused.IsZero() && p.refused.After(p.heard) {
		p.gone, p.goneAt = true, now
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
		v := l.peers[n]
		if v != nil && now.Sub(v.heard) < l.cfg.Fresh && v.votes[name] {
			votes++
		}
	}
	if votes >= need {
		p.gone, p.goneAt = true, now
	}
	return p.gone
}

// silent reports the members this node expects and has not heard from for
// two intervals: candidates for a direct probe.
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
// Wire format, version 1 (the payload; transport.go frames and seals it):
//
//	byte 0      message kind: 'H'
//	byte 1      version (1)
//	bytes 2-9   the sender's epoch, big endian
//	bytes 10-17 sequence number, big endian
//	byte 18     flags: bit 0 driver, bit 1 a reply, bit 2 everyone answer
//	byte 19     length of the sender's name, then the name
//	byte        length of the name asked to answer (0: none), then the name
//	byte        number of entries, then each entry:
//	            name length, name, uint64 epoch and uint64 highest sequence
//	            heard from it, flags (bit 0: silent vote)
type heartbeat struct {
	From   string
	Epoch  uint64
	Seq    uint64
	Driver bool   // the sender drives rounds (holds or is about to claim)
	Reply  bool   // an answer: never answered
	AskAll bool   // every receiver answers at once
	Ask    string // this member answers at once
	// Entries are the sender's view of the other members.
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

	hbDriver = 1 << 0
	hbReply  = 1 << 1
	hbAskAll = 1 << 2
)

// encode returns the wire form.
func (h heartbeat) encode() ([]byte, error) {
	if len(h.From) > 255 || len(h.Ask) > 255 || len(h.Entries) > 255 {
		return nil, errors.New("heartbeat: name or entry list too long")
	}
	b := make([]byte, 0, 24+len(h.From)+len(h.Ask)+len(h.Entries)*32)
	b = append(b, heartbeatKind, heartbeatVersion)
	b = binary.BigEndian.AppendUint64(b, h.Epoch)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	var f byte
	if h.Driver {
		f |= hbDriver
	}
	if h.Reply {
		f |= hbReply
	}
	if h.AskAll {
		f |= hbAskAll
	}
	b = append(b, f, byte(len(h.From)))
	b = append(b, h.From...)
	b = append(b, byte(len(h.Ask)))
	b = append(b, h.Ask...)
	b = append(b, byte(len(h.Entries)))
	for _, e := range h.Entries {
		if len(e.Name) > 255 {
			return nil, errors.New("heartbeat: name too long")
		}
		b = append(b, byte(len(e.Name)))
		b = append(b, e.Name...)
		b = binary.BigEndian.AppendUint64(b, e.Epoch)
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		var ef byte
		if e.Silent {
			ef |= 1
		}
		b = append(b, ef)
	}
	return b, nil
}

// decodeHeartbeat parses a heartbeat. Garbage gives an error, never a
// panic; a later version's extra bytes after the entries are ignored.
func decodeHeartbeat(b []byte) (heartbeat, error) {
	var h heartbeat
	if len(b) < 20 || b[0] != heartbeatKind {
		return h, errors.New("heartbeat: too short or not a heartbeat")
	}
	if b[1] == 0 {
		return h, fmt.Errorf("heartbeat: version %d not understood", b[1])
	}
	h.Epoch = binary.BigEndian.Uint64(b[2:])
	h.Seq = binary.BigEndian.Uint64(b[10:])
	f := b[18]
	h.Driver, h.Reply, h.AskAll = f&hbDriver != 0, f&hbReply != 0, f&hbAskAll != 0
	p := 19
	str := func(allowEmpty bool) (string, bool) {
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
		if s == "" {
			return "", allowEmpty
		}
		return s, config.ValidNodeName(s)
	}
	var ok bool
	if h.From, ok = str(false); !ok {
		return heartbeat{}, errors.New("heartbeat: bad sender name")
	}
	if h.Ask, ok = str(true); !ok {
		return heartbeat{}, errors.New("heartbeat: bad name asked")
	}
	if p >= len(b) {
		return heartbeat{}, errors.New("heartbeat: no entry count")
	}
	n := int(b[p])
	p++
	for range n {
		var e heartbeatEntry
		if e.Name, ok = str(false); !ok {
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
