package lease

import (
	"slices"
	"sort"
	"time"
)

// tracker is the lease's pure state of one node (doc.go): time is passed
// in, nothing is sent or read here. The Runner drives it.

// sentHB remembers when a heartbeat was sent, for the fence.
type sentHB struct {
	seq uint64
	at  time.Time
}

// peerState is what this node knows of one peer from its heartbeats.
type peerState struct {
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
	// restartUntil: it said it is restarting in place (its heartbeat or
	// its metadata), and its next process is due back by then (this
	// node's clock, from when it learnt it). Until then it is neither
	// silent nor gone, whatever this node hears or does not; restartEpoch
	// is the epoch of the process that said so: a heartbeat of another
	// epoch is the next process, back.
	restartUntil time.Time
	restartEpoch uint64
	// backEpoch is the epoch of the next process heard back after a
	// restart in place (back is false until one was). Metadata that still
	// says restarting when this process is the one heard is its
	// predecessor's, not yet replaced in the gossip: markRestarting
	// ignores it (this process announces its own restart by heartbeat).
	backEpoch uint64
	back      bool
}

// restarting reports whether p said it restarts in place and its grace
// has not run out at now.
func (p *peerState) restarting(now time.Time) bool {
	return p != nil && !p.restartUntil.IsZero() && now.Before(p.restartUntil)
}

// heardWithin reports whether p's last heartbeat arrived less than d
// before now.
func (p *peerState) heardWithin(d time.Duration, now time.Time) bool {
	return !p.heard.IsZero() && now.Sub(p.heard) < d
}

// tracker holds the lease state of one node.
type tracker struct {
	cfg     Timers
	self    string
	started time.Time
	// epoch names this process's run: sequence numbers start again with
	// a restart, and acks name the epoch they are for.
	epoch uint64
	seq   uint64
	sent  []sentHB // recent heartbeats, oldest first
	peers map[string]*peerState

	grid   Grid // rounds fall on its beats of Interval
	driver bool // this node drives rounds (set by the loop)
	// restart, when not zero: this node is exiting for a restart in place
	// with this grace, and every heartbeat it sends says so.
	restart    time.Duration
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

func newTracker(self string, cfg Timers, now time.Time, epoch uint64) *tracker {
	return &tracker{cfg: cfg, self: self, started: now, epoch: epoch, peers: map[string]*peerState{}, hello: true, grid: Grid{Base: now}}
}

func (l *tracker) peer(name string) *peerState {
	p := l.peers[name]
	if p == nil {
		p = &peerState{}
		l.peers[name] = p
	}
	return p
}

// silentFor is how long an expected member has not been heard (0 when not
// expected; counted from when the expectation began, so a node that just
// started or just raised its alarm has no vote yet).
func (l *tracker) silentFor(name string, now time.Time) time.Duration {
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
func (l *tracker) setDriver(on bool) {
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
func (l *tracker) heartbeat(base []string, ask string, askAll, reply bool, now time.Time) heartbeat {
	l.seq++
	l.sent = append(l.sent, sentHB{seq: l.seq, at: now})
	for len(l.sent) > 1 && now.Sub(l.sent[0].at) > l.cfg.Release+l.cfg.Claim {
		l.sent = l.sent[1:]
	}
	hb := heartbeat{From: l.self, Epoch: l.epoch, Seq: l.seq, Driver: l.driver, AskAll: askAll, Reply: reply, Ask: ask, Restart: l.restart}
	for _, n := range base {
		if n == l.self {
			continue
		}
		// No vote against a member restarting in place: its silence is
		// announced.
		e := heartbeatEntry{Name: n, Silent: l.silentFor(n, now) >= l.cfg.Claim && !l.peers[n].restarting(now)}
		if p := l.peers[n]; p != nil {
			e.Epoch, e.Seq = p.epoch, p.seq
		}
		hb.Entries = append(hb.Entries, e)
	}
	return hb
}

// outgoing is a heartbeat to send, to one member or to all (To == "").
type outgoing struct {
	To string
	HB heartbeat
}

// tick is the lease's clock. The runner calls it when the time next
// returned has come (a driver's round on the grid, a late answer's retry,
// the alarm's round every half interval, a silent driver's deadline), and
// at once when the loop changes the base or whether this node drives; never
// on a fixed period. It returns the heartbeats due now and when to call it
// next (zero: only when a heartbeat arrives or the loop asks).
func (l *tracker) tick(base []string, now time.Time) ([]outgoing, time.Time) {
	var out []outgoing
	peers := l.others(base)

	// The alarm: raised when an expected driver is silent for two
	// intervals; it asks everyone every half interval until no driver is
	// silent and not yet gone.
	alarm := false
	for _, n := range peers {
		if p := l.peers[n]; p != nil && p.driver && !p.gone && !p.restarting(now) && l.silentFor(n, now) >= 2*l.cfg.Interval {
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
		out = append(out, outgoing{HB: l.heartbeat(base, "", false, false, now)})
	}
	switch {
	case !l.alarmSince.IsZero():
		if l.roundAt.IsZero() || now.Sub(l.roundAt) >= l.cfg.Interval/2 {
			out = append(out, outgoing{HB: l.heartbeat(base, "", true, false, now)})
			l.roundAt, l.roundSeq, l.roundAsked, l.retries = now, l.seq, "", 2
		}
	case !l.driver || len(peers) == 0:
	case l.roundAt.IsZero() || !now.Before(l.grid.After(l.roundAt, l.cfg.Interval)):
		// A driver's round, on the grid's next beat (at most Interval
		// after the last round; the first one at once). With more than
		// one ack needed for a majority, every round asks all.
		l.turn = (l.turn + 1) % len(peers)
		ask, all := peers[l.turn], Majority(len(peers)+1) > 2
		if all {
			ask = ""
		}
		out = append(out, outgoing{HB: l.heartbeat(base, ask, all, false, now)})
		l.roundAt, l.roundSeq, l.roundAsked, l.retries = now, l.seq, ask, 0
	case l.retries < 2 && !l.answered(l.roundAsked, l.roundSeq) && now.Sub(l.roundAt) >= l.cfg.Retry*time.Duration(l.retries+1):
		// The asked member is late: ask all.
		l.retries++
		out = append(out, outgoing{HB: l.heartbeat(base, "", true, false, now)})
		l.roundSeq, l.roundAsked = l.seq, ""
	}
	return out, l.next(base, now)
}

// next is when tick has something to do (zero: only when a heartbeat
// arrives or the loop asks).
func (l *tracker) next(base []string, now time.Time) time.Time {
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
		next = l.grid.After(l.roundAt, l.cfg.Interval)
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
func (l *tracker) watchDeadline(now time.Time) time.Time {
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
		if p.restarting(now) {
			// Silent by announcement: nothing to do before its grace
			// runs out, when it is a silent driver like any other.
			d = p.restartUntil
		}
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
func (l *tracker) answered(who string, seq uint64) bool {
	for n, p := range l.peers {
		if (who == "" || n == who) && p.ackedSeq >= seq {
			return true
		}
	}
	return false
}

// others is base without this node, sorted.
func (l *tracker) others(base []string) []string {
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
func (l *tracker) receive(hb heartbeat, base []string, now time.Time) (heartbeat, bool) {
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
	case hb.Restart > 0 && (p.restartUntil.IsZero() || p.restartEpoch != hb.Epoch):
		// The first word of this process's restart starts the grace;
		// repeats do not stretch it.
		p.restartUntil, p.restartEpoch = now.Add(capGrace(hb.Restart)), hb.Epoch
	case hb.Restart == 0 && !p.restartUntil.IsZero() && hb.Epoch != p.restartEpoch:
		p.restartUntil = time.Time{} // its next process: back
		p.backEpoch, p.back = hb.Epoch, true
	case hb.Restart == 0 && !p.restartUntil.IsZero() && !now.Before(p.restartUntil):
		// The grace ran out and the same process says it is not
		// restarting: over, so that a later restart of it starts a new
		// grace (its announcement would otherwise be taken for a repeat).
		p.restartUntil = time.Time{}
	}
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
func (l *tracker) sentAt(seq uint64) (time.Time, bool) {
	i := sort.Search(len(l.sent), func(i int) bool { return l.sent[i].seq >= seq })
	if i < len(l.sent) && l.sent[i].seq == seq {
		return l.sent[i].at, true
	}
	return time.Time{}, false
}

// heardWithin returns the members whose last heartbeat arrived less than d
// before now, sorted.
func (l *tracker) heardWithin(d time.Duration, now time.Time) []string {
	var out []string
	for n, p := range l.peers {
		if p.heardWithin(d, now) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// refused records that name's membership port refused a connection: its
// vipd is gone, so it holds no lease. A member restarting in place is
// expected to refuse until its next process listens: no evidence then.
func (l *tracker) refused(name string, now time.Time) {
	if p := l.peer(name); !p.restarting(now) {
		p.refused = now
	}
}

// markRestarting records that name said (in its metadata) it restarts in
// place with grace, as a heartbeat saying so would: the word of the
// process this node last heard from it.
func (l *tracker) markRestarting(name string, grace time.Duration, now time.Time) {
	p := l.peer(name)
	if p.back && p.backEpoch == p.epoch {
		return // the successor heard: the word is its predecessor's
	}
	if p.restartUntil.IsZero() || p.restartEpoch != p.epoch {
		p.restartUntil, p.restartEpoch = now.Add(capGrace(grace)), p.epoch
	}
}

// capGrace bounds a peer's announced restart grace by MaxRestartGrace: a
// buggy or later peer's word holds the VIP for no longer than any
// configuration can ask.
func capGrace(grace time.Duration) time.Duration {
	return min(grace, MaxRestartGrace)
}

// fence reports whether this node may hold VIPs now: without required
// quorum always; with it, when a majority of the known members (this node
// included) acked one of its heartbeats sent less than Release ago. It
// returns the time of the newest majority evidence (zero: none) too.
func (l *tracker) fence(base []string, required bool, now time.Time) (ok bool, evidence time.Time) {
	if !required {
		return true, now
	}
	need := Majority(len(base)) - 1 // acks from peers, with this node's own
	if need <= 0 {
		return true, now
	}
	var buf [16]time.Time // on the stack for clusters up to 17 members
	acks := buf[:0]
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
func (l *tracker) expired(name string, base []string, required bool, now time.Time) bool {
	p := l.peers[name]
	if p == nil {
		return false
	}
	if p.gone {
		return true
	}
	if p.restarting(now) {
		return false
	}
	if !p.refused.IsZero() && p.refused.After(p.heard) {
		p.gone, p.goneAt = true, now
		return true
	}
	if l.silentFor(name, now) < l.cfg.Claim {
		return false
	}
	votes, need := 1, Majority(len(base))
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
func (l *tracker) silent(base []string, now time.Time) []string {
	var out []string
	for _, n := range base {
		if n != l.self && l.silentFor(n, now) >= 2*l.cfg.Interval && !l.peers[n].restarting(now) {
			out = append(out, n)
		}
	}
	return out
}
