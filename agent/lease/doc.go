// Package lease is vipd's fast failure detection and fencing on top of
// membership: the evidence that decides whether this node may hold a VIP
// (its fence) and whether another node is gone (its lease expired), the
// quorum count, and the timers the agent's periodic work beats on.
//
// It is shaped like package bfd: tracker is the pure state (time passed
// in, nothing sent or read; tested by a simulator of three nodes with
// their own clocks over a lossy network, lease_test.go), and Runner does
// the I/O around it (a timer, the heartbeats, probes). The agent's loop
// reads a State each pass and keeps a Fence, the state machine of this
// node's fence; neither does I/O. Membership stays the agent's; the lease
// only adds evidence to it (State.View, CountQuorum).
//
// # Heartbeats
//
// Heartbeats travel on the membership port (the agent's transport takes
// them off it, sealed with the cluster key when key_file is set). A
// heartbeat carries the sender's sequence number and, for each other
// member, the highest sequence number heard from it (an ack) and a vote:
// "I expected to hear from it and have not, for Claim".
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
// # Fence and expiry
//
// Fence (the holder's side): a node may hold a VIP only while it has
// recent evidence that a majority of the known members hear it: a
// heartbeat it sent at time E (its own clock) acked by enough peers to make
// a majority with itself, and now - E < Release. A holder whose evidence is
// older releases every VIP at once and tells the others it cannot carry
// them (Fence).
//
// Expiry (the claimant's side): a node treats a driver as gone, for the
// election, only on positive evidence that its fence has expired: a
// majority of the known members (itself included) each vote that they have
// not heard from it for Claim (each on its own monotonic clock: no clocks
// are compared across hosts), or its membership port refused a connection
// (its vipd is gone and holds no lease). A member taken for gone stays so
// until it is heard again.
//
// # Why no two nodes hold a VIP at once
//
// Say the holder X loses its membership traffic (both ways, or one way)
// while it keeps its link and its clients. The claimant Y needs votes from
// a majority M of the known members; X needs acks from a majority S (X
// included). Two majorities share a member W, and W is not X (X does not
// vote about itself).
//
//   - W voted at time v: it had heard nothing from X during [v - Claim, v]
//     (W's clock). Its acks name the highest sequence number it heard, so
//     no ack of W names a heartbeat X sent after v - Claim.
//   - X's evidence E from W is therefore at most v - Claim, and X's fence
//     without W's newer acks expires at E + Release on X's clock.
//   - Y claims at c >= v, so c - (E + Release) >= Claim - Release: with the
//     clock rates below, at least 0.99 Claim - 1.01 Release, about 93 ms
//     with FastTimers. X released before Y claims, if it reacts within that
//     margin.
//
// If W heard X again after voting, X's fence may live on, but then X is
// heard by a majority and was never gone: Y's claim needs votes that are
// fresh (within Fresh) from every member of its majority, and a member that
// hears X again stops voting. A node that restarts votes only Claim after
// it began expecting a driver, so a restart cannot lend a stale vote. A
// refused connection is other evidence: X's vipd is not running, so it
// holds no lease.
//
// # Restarts in place
//
// A node exiting for a restart in place (AnnounceRestart) says so in every
// heartbeat, with the grace its next process has to come back, and asks
// every member to answer: an answer is the member having taken it. Until
// the grace runs out on its own clock (from when it learnt it, so never
// before the restarting node's own deadline) a member takes the
// restarting node for alive and holding: it casts no vote about it, raises
// no alarm, does not probe it, and takes a refused connection for nothing
// (the process is expected to be gone). A heartbeat of another epoch (the
// next process) ends the grace; when it runs out the node is a silent
// driver like any other, gone on votes or a refused connection. The word
// can come from the metadata too (MarkRestarting), for a member that
// joined meanwhile. Either way the grace counts for at most
// MaxRestartGrace, whatever the word says. The next process may hold the VIPs it adopts without
// evidence until the same deadline (HoldUntil) or until a majority first
// answers it, whichever comes first, and from then on only with evidence:
// the peers claim nothing while they wait for it, and a peer that heard it
// (its grace ended) may take the VIPs over on votes, once it has fenced
// itself.
//
// docs/design.md ("The lease") has the long form, and what it costs.
//
// # Assumptions
//
//   - Clock rates: every node's monotonic clock runs within 1% of real
//     time. Nothing else about clocks is assumed: no two readings of
//     different hosts are compared, and wall-clock steps do not reach the
//     lease (it uses the monotonic reading; an injected clock must carry
//     one).
//   - Reaction: a holder whose fence expired withdraws its addresses (a
//     pass of the agent's loop and a netlink call) within the margin
//     above, about 90 ms with FastTimers: the runner wakes the loop at
//     once when the fence changes (TestLeaseFenceBeforeClaim allows 80 ms).
//     A loop stuck longer in an announcer call (each is bounded by 5 s) is
//     outside the argument.
//   - Heard means a heartbeat from the member arrived and decoded (sealed
//     under the cluster key when there is one, from an address membership
//     admits): an ack is evidence only for a heartbeat of this process
//     (its epoch) and sequence number that this node sent. Membership's
//     own traffic is not heard: gossip is hearsay.
//   - Packets may be lost, reordered and delayed; a delay only makes an
//     ack's evidence older.
//   - The quorum base (the known members) is the same set on every node
//     that matters, give or take members joining: a majority of a smaller
//     base is a majority only while that base is everyone.
//
// Not covered: a node whose clock runs faster than the bound, a Byzantine
// member (one with the key that lies in its acks or votes), and two
// clusters sharing a VIP.
package lease
