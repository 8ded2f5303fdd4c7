package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// State is a BFD session state (RFC 5880 section 4.1).
type State uint8

// Session states, with their wire values.
const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

// String returns "admin_down", "down", "init" or "up".
func (s State) String() string {
	switch s {
	case AdminDown:
		return "admin_down"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Diag is a diagnostic code: why the session last left Up (RFC 5880
// section 4.1).
type Diag uint8

// Diagnostic codes, with their wire values.
const (
	DiagNone                        Diag = 0
	DiagControlDetectionExpired     Diag = 1
	DiagEchoFailed                  Diag = 2
	DiagNeighborDown                Diag = 3
	DiagForwardingPlaneReset        Diag = 4
	DiagPathDown                    Diag = 5
	DiagConcatenatedPathDown        Diag = 6
	DiagAdminDown                   Diag = 7
	DiagReverseConcatenatedPathDown Diag = 8
)

// String returns the diagnostic as a stable snake_case name, such as
// "control_detection_time_expired".
func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "none"
	case DiagControlDetectionExpired:
		return "control_detection_time_expired"
	case DiagEchoFailed:
		return "echo_function_failed"
	case DiagNeighborDown:
		return "neighbor_signaled_session_down"
	case DiagForwardingPlaneReset:
		return "forwarding_plane_reset"
	case DiagPathDown:
		return "path_down"
	case DiagConcatenatedPathDown:
		return "concatenated_path_down"
	case DiagAdminDown:
		return "administratively_down"
	case DiagReverseConcatenatedPathDown:
		return "reverse_concatenated_path_down"
	}
	return fmt.Sprintf("diag(%d)", uint8(d))
}

// Version is the BFD protocol version this package speaks.
const Version = 1

// HeaderLen is the length of a Control packet without authentication.
const HeaderLen = 24

// minAuthLen is the mandatory part length with the shortest authentication
// section (type and length bytes).
const minAuthLen = HeaderLen + 2

// Errors returned by Packet.Unmarshal: each is a reason RFC 5880 section
// 6.8.6 gives for discarding a packet before any session is looked at.
var (
	ErrShort          = errors.New("bfd: packet shorter than its length field or the minimum")
	ErrVersion        = errors.New("bfd: unsupported version")
	ErrDetectMult     = errors.New("bfd: detect multiplier is zero")
	ErrMultipoint     = errors.New("bfd: multipoint bit set")
	ErrMyDiscrim      = errors.New("bfd: my discriminator is zero")
	ErrLengthTooSmall = errors.New("bfd: length field below the minimum")
)

// Packet is a BFD Control packet (RFC 5880 section 4.1). Intervals are in
// microseconds, as on the wire. Authentication sections are not decoded:
// AuthPresent tells that one was there.
type Packet struct {
	Diag  Diag
	State State
	// Poll, Final, ControlPlaneIndependent, AuthPresent, Demand and
	// Multipoint are the P, F, C, A, D and M bits.
	Poll, Final, ControlPlaneIndependent, AuthPresent, Demand, Multipoint  bool
	DetectMult                                                             uint8
	MyDiscriminator, YourDiscriminator                                     uint32
	DesiredMinTxInterval, RequiredMinRxInterval, RequiredMinEchoRxInterval uint32
}

const (
	bitPoll       = 0x20
	bitFinal      = 0x10
	bitCPI        = 0x08
	bitAuth       = 0x04
	bitDemand     = 0x02
	bitMultipoint = 0x01
)

// Unmarshal decodes b into p. It applies the checks of RFC 5880 section
// 6.8.6 that need no session (version, length, detect multiplier,
// multipoint bit, my discriminator) and returns one of the Err values when
// the packet must be discarded. Bytes after the length field's end are
// ignored. It does not allocate.
func (p *Packet) Unmarshal(b []byte) error {
	if len(b) < HeaderLen {
		return ErrShort
	}
	if v := b[0] >> 5; v != Version {
		return ErrVersion
	}
	flags := b[1]
	auth := flags&bitAuth != 0
	length := int(b[3])
	switch {
	case length < HeaderLen, auth && length < minAuthLen:
		return ErrLengthTooSmall
	case length > len(b):
		return ErrShort
	}
	*p = Packet{
		Diag:                      Diag(b[0] & 0x1f),
		State:                     State(flags >> 6),
		Poll:                      flags&bitPoll != 0,
		Final:                     flags&bitFinal != 0,
		ControlPlaneIndependent:   flags&bitCPI != 0,
		AuthPresent:               auth,
		Demand:                    flags&bitDemand != 0,
		Multipoint:                flags&bitMultipoint != 0,
		DetectMult:                b[2],
		MyDiscriminator:           binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:         binary.BigEndian.Uint32(b[8:]),
		DesiredMinTxInterval:      binary.BigEndian.Uint32(b[12:]),
		RequiredMinRxInterval:     binary.BigEndian.Uint32(b[16:]),
		RequiredMinEchoRxInterval: binary.BigEndian.Uint32(b[20:]),
	}
	switch {
	case p.DetectMult == 0:
		return ErrDetectMult
	case p.Multipoint:
		return ErrMultipoint
	case p.MyDiscriminator == 0:
		return ErrMyDiscrim
	}
	return nil
}

// Append appends p's wire form (HeaderLen bytes, version 1, no
// authentication section: AuthPresent is ignored) to b.
func (p *Packet) Append(b []byte) []byte {
	var flags byte
	set := func(on bool, bit byte) {
		if on {
			flags |= bit
		}
	}
	set(p.Poll, bitPoll)
	set(p.Final, bitFinal)
	set(p.ControlPlaneIndependent, bitCPI)
	set(p.Demand, bitDemand)
	set(p.Multipoint, bitMultipoint)
	flags |= byte(p.State&3) << 6
	b = append(b, Version<<5|byte(p.Diag&0x1f), flags, p.DetectMult, HeaderLen)
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.DesiredMinTxInterval)
	b = binary.BigEndian.AppendUint32(b, p.RequiredMinRxInterval)
	b = binary.BigEndian.AppendUint32(b, p.RequiredMinEchoRxInterval)
	return b
}
