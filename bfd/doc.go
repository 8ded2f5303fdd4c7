// Package bfd implements single-hop asynchronous Bidirectional Forwarding
// Detection (RFC 5880, RFC 5881) over IPv4 and IPv6, small enough to run
// inside vipd next to its BGP speaker.
//
// Session is the RFC 5880 state machine (Down, Init, Up, AdminDown; the
// section 6.8.6 reception rules, detection time, Poll Sequences for timer
// changes, transmit jitter) with time passed in by the caller and
// randomness injected, so it is tested without sockets or sleeps. Packet
// encodes and decodes Control packets without allocating. Server runs
// sessions on UDP port 3784: packets are sent with TTL 255 from a source
// port in 49152-65535, and received packets whose TTL is not 255 are
// dropped (GTSM, RFC 5881 section 5).
//
// Not implemented: authentication (packets with the A bit are discarded),
// Demand mode on the local side, the Echo function, multihop sessions.
package bfd
