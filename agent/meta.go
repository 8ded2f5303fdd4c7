package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// NodeMeta is what a node tells the others about itself through memberlist
// node metadata. Every node elects from these, so they must agree.
//
// Wire format version 1 (what this release writes), at most 512 bytes:
//
//	byte 0      version (1)
//	byte 1      flags: bit 0 withdrawn, bit 1 leaving (graceful shutdown),
//	            bit 2 fenced (no majority hears this node: it holds nothing),
//	            bit 3 removed (decommissioned: forget it once it stops),
//	            bit 4 withdrawn by its Node (cordoned, excluded, deleted,
//	            shutting down: nodewatch), bit 5 restart-aware (this node
//	            waits out a peer's restart in place), bit 6 restarting (this
//	            node is restarting in place: written as version 2, with the
//	            grace)
//	then per VIP, 5 bytes: uint32 key (FNV-32a of the VIP name, big endian)
//	            and a flags byte: bit 0 healthy, bit 1 held, bit 2 down (the
//	            VIP's interface is down: never eligible for it), bit 3
//	            healthy while withdrawn by its Node (set instead of bit 0),
//	            bit 4 forwarding (the holder passes the connections it does
//	            not know on to the previous holder: a planned handoff's
//	            daisy chain; releases before it ignore the bit, and their
//	            handoffs close the connections at once, as before)
//
// VIPs not listed are unhealthy and not held.
//
// Bits 4 of the flags and 3 of a VIP's flags came with the Node watch.
// Releases before it ignore both (DecodeMeta reads only the bits it
// knows), so to them a node withdrawn by its Node is an unhealthy node:
// eligible only when no node is healthy, which is where this release puts
// it too (after the healthy nodes the Node does not withdraw). Both
// releases then elect the same owner whenever a healthy node that its Node
// does not withdraw exists; TestMetaNodeWithdrawnAsOldReleaseReadsIt holds
// it to that.
//
// Versions 2 and later are self-describing, so this release reads what a
// newer one writes (during a rolling upgrade of vipd) without knowing its
// additions:
//
//	byte 0      version (2 or more)
//	byte 1      flags, as in version 1; bits this release does not know are ignored
//	byte 2      n, the number of VIP entries
//	byte 3      s, the size of one entry, at least 5
//	n entries of s bytes: the 5 bytes of version 1 (key, flags; unknown flag
//	            bits ignored), then s-5 bytes of later fields, ignored
//	then        fields of later versions, ignored
//
// Version 2's field after the entries: uint32, the restart grace in
// milliseconds (with the restarting flag).
//
// Version 3 is version 2 with entries of 6 bytes: the sixth is the node's
// priority for the VIP (vip.priority, 1-255). A node writes it only when a
// VIP of its has a priority other than the default, and version 1 (or 2
// while restarting) otherwise, so a cluster without priorities sends what
// it sent before. A VIP's entry is then written when the VIP is healthy,
// held or down, or its priority is not the default.
//
// Bit 7 of the flags (priority-aware) says the node elects by priority,
// preempt delay and group (Elect); bit 5 of a VIP's flags (waiting) says
// the node waits out its preempt delay for the VIP. Both came with
// priorities; releases before ignore them, and Elect applies priorities
// only while every member sets bit 7 (docs/design.md, "Priorities and
// groups").
//
// This release writes version 1, and version 2 only while it restarts in
// place, which it does only when every member says it is restart-aware
// (so reads version 2). The previous release reads both and ignores the
// restart flags (docs/operations.md, "Upgrading vipd").
type NodeMeta struct {
	// Valid is false for a member whose metadata could not be decoded; such
	// a member is never eligible.
	Valid     bool
	Withdrawn bool
	// Leaving is set by a node shutting down gracefully, so its departure
	// is reported as left rather than dead.
	Leaving bool
	// Fenced: no majority of the known members confirmed hearing this node
	// recently (the lease); it holds no VIP and marks them down too, which
	// older versions understand.
	Fenced bool
	// Removed: the node is being removed from the cluster for good
	// (vipctl decommission); the others forget it once it has stopped.
	Removed bool
	// NodeWithdrawn: the node's Kubernetes Node withdraws it (cordoned,
	// labelled vipd.io/exclude, being deleted, deleted,
	// shutting down, out of service). Unlike Withdrawn it does not take the
	// node out of the election for good: it is eligible when no other node
	// can be (Elect's tiers).
	NodeWithdrawn bool
	// RestartAware: the node understands restarts in place (it waits out
	// a restarting peer's grace). A node restarts in place only when every
	// known member says so.
	RestartAware bool
	// RestartGrace, when not zero: the node is restarting in place and
	// its next process will be back within this grace (the peers claim
	// nothing of it meanwhile). At most metaMaxRestartGrace.
	RestartGrace time.Duration
	// PriorityAware: the node elects by priority, preempt delay and
	// group. Elect applies them only when every member says so.
	PriorityAware bool
	VIPs          map[uint32]VIPMeta
}

// VIPMeta is a node's state for one VIP.
type VIPMeta struct {
	Healthy bool
	Held    bool
	// Down: the node cannot carry the VIP (its L2 interface is down or has
	// no carrier); it is not eligible, not even by the bootstrap fallback.
	Down bool
	// Forwarding: the node holds the VIP and passes the packets of the
	// connections it does not know on to the previous holder (a planned
	// handoff's daisy chain, chain.go), which may then close them one at
	// an idle moment instead of all at once.
	Forwarding bool
	// Lingering: the node handed the VIP off and still serves the
	// connections it had on it, without the address, through the
	// holder's forwarding (chain.go); it does not hold the VIP.
	Lingering bool
	// EndLinger: the node holds the VIP, forwards, and is about to
	// restart in place (finishHandoffs): the members lingering on the VIP
	// close what they have left now, so that its forwarding can end.
	EndLinger bool
	// Priority is the node's priority for the VIP (vip.priority); 0 when
	// it did not say (the default, config.DefaultPriority).
	Priority uint8
	// Waiting: the node waits out its preempt delay for the VIP: it may
	// not take it from a holder yet.
	Waiting bool
}

// priority is the node's priority for the VIP, the default when unsaid.
func (v VIPMeta) priority() int {
	if v.Priority == 0 {
		return config.DefaultPriority
	}
	return int(v.Priority)
}

const (
	metaVersion      = 1
	metaFlagWithdraw = 1 << 0
	metaFlagLeaving  = 1 << 1
	metaFlagFenced   = 1 << 2
	metaFlagRemoved  = 1 << 3
	// metaFlagNodeWithdrawn: withdrawn by its Node.
	metaFlagNodeWithdrawn = 1 << 4
	// metaFlagAware: the node waits out a peer's restart in place.
	metaFlagAware = 1 << 5
	// metaFlagRestart: the node is restarting in place (version 2, with
	// the grace after the entries).
	metaFlagRestart = 1 << 6
	// metaFlagPriorityAware: the node elects by priority.
	metaFlagPriorityAware = 1 << 7
	vipFlagHealthy        = 1 << 0
	vipFlagHeld           = 1 << 1
	vipFlagDown           = 1 << 2
	// vipFlagHealthyNodeWithdrawn is healthy on a node its Node withdraws,
	// written instead of vipFlagHealthy so that releases that do not know
	// metaFlagNodeWithdrawn see an unhealthy node.
	vipFlagHealthyNodeWithdrawn = 1 << 3
	vipFlagForwarding           = 1 << 4
	vipFlagLingering            = 1 << 5
	vipFlagEndLinger            = 1 << 6
	vipFlagWaiting              = 1 << 7
	metaMaxSize                 = 512
)

// VIP returns the node's state for the VIP with key k.
func (m NodeMeta) VIP(k uint32) VIPMeta { return m.VIPs[k] }

// metaMaxRestartGrace is the longest restart grace the metadata carries.
const metaMaxRestartGrace = time.Duration(math.MaxUint32) * time.Millisecond

// Encode returns the wire form, in a stable order: version 1, version 2
// with the restart grace while restarting, or version 3 when a VIP has a
// priority.
func (m NodeMeta) Encode() ([]byte, error) {
	if m.RestartGrace < 0 || m.RestartGrace > metaMaxRestartGrace {
		return nil, fmt.Errorf("restart grace %s out of range", m.RestartGrace)
	}
	b := make([]byte, 2, 8+6*len(m.VIPs))
	b[0] = metaVersion
	if m.Withdrawn {
		b[1] |= metaFlagWithdraw
	}
	if m.Leaving {
		b[1] |= metaFlagLeaving
	}
	if m.Fenced {
		b[1] |= metaFlagFenced
	}
	if m.Removed {
		b[1] |= metaFlagRemoved
	}
	if m.NodeWithdrawn {
		b[1] |= metaFlagNodeWithdrawn
	}
	if m.RestartAware {
		b[1] |= metaFlagAware
	}
	if m.PriorityAware {
		b[1] |= metaFlagPriorityAware
	}
	restarting := m.RestartGrace > 0
	if restarting {
		b[1] |= metaFlagRestart
	}
	size := 5
	for _, v := range m.VIPs {
		if v.Priority != 0 {
			size = 6
		}
	}
	if restarting || size == 6 {
		if len(m.VIPs) > 255 {
			return nil, fmt.Errorf("node metadata: %d VIPs do not fit version 2", len(m.VIPs))
		}
		b[0] = 2
		if size == 6 {
			b[0] = 3
		}
		b = append(b, byte(len(m.VIPs)), byte(size))
	}
	keys := make([]uint32, 0, len(m.VIPs))
	for k := range m.VIPs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		v := m.VIPs[k]
		var f byte
		switch {
		case v.Healthy && m.NodeWithdrawn:
			f |= vipFlagHealthyNodeWithdrawn
		case v.Healthy:
			f |= vipFlagHealthy
		}
		if v.Held {
			f |= vipFlagHeld
		}
		if v.Down {
			f |= vipFlagDown
		}
		if v.Forwarding {
			f |= vipFlagForwarding
		}
		if v.Lingering {
			f |= vipFlagLingering
		}
		if v.EndLinger {
			f |= vipFlagEndLinger
		}
		if v.Waiting {
			f |= vipFlagWaiting
		}
		b = binary.BigEndian.AppendUint32(b, k)
		b = append(b, f)
		if size == 6 {
			b = append(b, byte(v.priority()))
		}
	}
	if restarting {
		b = binary.BigEndian.AppendUint32(b, uint32(m.RestartGrace/time.Millisecond))
	}
	if len(b) > metaMaxSize {
		return nil, fmt.Errorf("node metadata is %d bytes, more than memberlist's %d", len(b), metaMaxSize)
	}
	return b, nil
}

// DecodeMeta parses metadata received from a peer: version 1, or a later
// version's self-describing layout (its unknown flags and fields ignored).
// Garbage gives an error, never a panic.
func DecodeMeta(b []byte) (NodeMeta, error) {
	if len(b) < 2 {
		return NodeMeta{}, errors.New("metadata too short")
	}
	var entries []byte
	var grace time.Duration
	size := 5
	switch v := b[0]; {
	case v == 0:
		return NodeMeta{}, errors.New("metadata version 0 not understood")
	case v == metaVersion:
		if (len(b)-2)%5 != 0 {
			return NodeMeta{}, fmt.Errorf("metadata length %d is not 2+5n", len(b))
		}
		entries = b[2:]
	default:
		if len(b) < 4 {
			return NodeMeta{}, fmt.Errorf("metadata version %d: header too short", v)
		}
		n, s := int(b[2]), int(b[3])
		if s < 5 {
			return NodeMeta{}, fmt.Errorf("metadata version %d: entry size %d is less than 5", v, s)
		}
		if 4+n*s > len(b) {
			return NodeMeta{}, fmt.Errorf("metadata version %d: %d entries of %d bytes do not fit in %d bytes", v, n, s, len(b))
		}
		entries, size = b[4:4+n*s], s
		if rest := b[4+n*s:]; b[1]&metaFlagRestart != 0 {
			if len(rest) < 4 || binary.BigEndian.Uint32(rest) == 0 {
				return NodeMeta{}, fmt.Errorf("metadata version %d: restarting without a grace", v)
			}
			grace = time.Duration(binary.BigEndian.Uint32(rest)) * time.Millisecond
		}
	}
	m := NodeMeta{Valid: true, Withdrawn: b[1]&metaFlagWithdraw != 0, Leaving: b[1]&metaFlagLeaving != 0, Fenced: b[1]&metaFlagFenced != 0,
		Removed: b[1]&metaFlagRemoved != 0, NodeWithdrawn: b[1]&metaFlagNodeWithdrawn != 0,
		RestartAware: b[1]&metaFlagAware != 0, RestartGrace: grace, PriorityAware: b[1]&metaFlagPriorityAware != 0, VIPs: map[uint32]VIPMeta{}}
	for p := 0; p+size <= len(entries); p += size {
		k := binary.BigEndian.Uint32(entries[p:])
		f := entries[p+4]
		vm := VIPMeta{Healthy: f&(vipFlagHealthy|vipFlagHealthyNodeWithdrawn) != 0, Held: f&vipFlagHeld != 0, Down: f&vipFlagDown != 0,
			Forwarding: f&vipFlagForwarding != 0, Lingering: f&vipFlagLingering != 0,
			EndLinger: f&vipFlagEndLinger != 0, Waiting: f&vipFlagWaiting != 0}
		if b[0] >= 3 && size >= 6 {
			// Priorities are 1-255; a 0 on the wire (no vipd sends one)
			// means the default, as an entry without a priority does,
			// so the decoded form re-encodes to itself.
			vm.Priority = entries[p+5]
			if vm.Priority == 0 {
				vm.Priority = config.DefaultPriority
			}
		}
		m.VIPs[k] = vm
	}
	return m, nil
}
