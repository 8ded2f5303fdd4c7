// Package lifecycle is the pure part of one VIP's life on this node: what
// the node does with the VIP at each pass of the agent's loop, given what
// it sees. It does no I/O, reads no clock (time is an input), starts no
// goroutine and imports nothing of vipd's: the agent gathers the inputs,
// calls it, and executes what it answers (announcers, the connections
// backend, logs, metrics, events), feeding back the results that matter
// at the next pass (a claim that failed, a linger that ended).
//
// A pass, in the agent's order (agent/reconcile.go):
//
//   - Decide: hold, claim, keep, re-announce, drain, hand off, release or
//     quiesce (release by lingering), and the memory the next pass needs
//     (settle, handoff and drain starts);
//   - before a claim, StartForward: the previous holders whose
//     connections the new holder passes on to them (the daisy chain);
//   - after the claim or release, Forward.Step: which members are no
//     longer forwarded to (and whose clients are then reset), which ones
//     are forwarded to too, and when the forwarding ends;
//   - StepLinger: when a lingering node ends its linger, hurries it, or
//     abandons it;
//   - at a claim, StartTakeovers (over the holders NoteHolders remembers),
//     and at each pass TakeoverStep: whose clients a new holder resets,
//     and when (takeover.go);
//   - ConfirmAdoption: when a VIP adopted in a restart in place is this
//     process's own (hold.go, with the backoff after a failed announce,
//     the preempt delay and whether a planned handoff is under way).
//
// Effects (effect.go) are done in the order a step returns them.
//
// A VIP's states, as the agent keeps them: not held; settling (eligible,
// waiting out the settle); held; handing off (held, drain and handoff
// started); lingering (released, serving its connections through the
// successor's forwarding); and, beside those, forwarding (held, passing
// the previous holders' connections on to them).
//
// The host's capabilities ([connections] reset on, an announcer that can
// forward or linger, the connections backend there) are inputs, decided
// once by the agent for each VIP, not checked here.
package lifecycle
