package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// heartbeat is the lease message.
//
// Wire format, version 1 (the payload; the agent's transport frames and
// seals it):
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
//	then, with flag bit 3 (restarting): uint32 the restart grace in
//	            milliseconds
//
// A reader ignores flag bits it does not know and bytes after what it
// reads, so the restart fields are invisible to a release without them
// (it never sees them: a node restarts in place only when every member
// says it understands restarts, in its metadata).
type heartbeat struct {
	From   string
	Epoch  uint64
	Seq    uint64
	Driver bool   // the sender drives rounds (holds or is about to claim)
	Reply  bool   // an answer: never answered
	AskAll bool   // every receiver answers at once
	Ask    string // this member answers at once
	// Restart, when not zero: the sender is exiting for a restart in
	// place and its next process will be back within this grace; until
	// then the receiver takes it for alive and holding whatever it hears
	// or does not.
	Restart time.Duration
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

	hbDriver  = 1 << 0
	hbReply   = 1 << 1
	hbAskAll  = 1 << 2
	hbRestart = 1 << 3

	// maxRestart is the largest restart grace a heartbeat carries.
	maxRestart = time.Duration(math.MaxUint32) * time.Millisecond
)

// MaxRestartGrace is the longest restart grace a peer's word counts for,
// whatever its heartbeat or metadata says (they carry up to about 49
// days): cluster.restart_grace allows no more (config.MaxRestartGrace).
const MaxRestartGrace = 60 * time.Second

// encode returns the wire form.
func (h heartbeat) encode() ([]byte, error) {
	if len(h.From) > 255 || len(h.Ask) > 255 || len(h.Entries) > 255 {
		return nil, errors.New("heartbeat: name or entry list too long")
	}
	b := make([]byte, 0, 24+len(h.From)+len(h.Ask)+len(h.Entries)*32)
	b = append(b, heartbeatKind, heartbeatVersion)
	b = binary.BigEndian.AppendUint64(b, h.Epoch)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	if h.Restart < 0 || h.Restart > maxRestart {
		return nil, errors.New("heartbeat: restart grace out of range")
	}
	f := flag(h.Driver, hbDriver) | flag(h.Reply, hbReply) | flag(h.AskAll, hbAskAll) | flag(h.Restart > 0, hbRestart)
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
		b = append(b, flag(e.Silent, 1))
	}
	if h.Restart > 0 {
		b = binary.BigEndian.AppendUint32(b, uint32(h.Restart/time.Millisecond))
	}
	return b, nil
}

// flag is bit when on, else 0.
func flag(on bool, bit byte) byte {
	if on {
		return bit
	}
	return 0
}

// decodeHeartbeat parses a heartbeat whose names valid accepts. Garbage
// gives an error, never a panic; a later version's extra bytes after the
// entries are ignored.
func decodeHeartbeat(b []byte, valid func(string) bool) (heartbeat, error) {
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
		return s, valid(s)
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
	if f&hbRestart != 0 {
		if p+4 > len(b) {
			return heartbeat{}, errors.New("heartbeat: restart grace missing")
		}
		ms := binary.BigEndian.Uint32(b[p:])
		if ms == 0 {
			return heartbeat{}, errors.New("heartbeat: restarting with no grace")
		}
		h.Restart = time.Duration(ms) * time.Millisecond
	}
	return h, nil
}
