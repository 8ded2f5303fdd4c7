// Package conns finds, closes and resets the TCP connections of clients of
// a virtual IP, so that a failover costs them a reconnect instead of a
// stall.
//
// A client whose connection lived on a VIP's previous holder learns
// nothing when the VIP moves: an idle connection waits for its own
// keepalive or request timeout (client-go: 30 s read-idle and a 15 s ping
// timeout), the new holder having no socket for it. This package gives the
// holders what they need to end such connections at once:
//
//   - Table.List lists the established TCP connections whose local end is
//     one of some addresses (and ports), IPv4 and IPv6, through the
//     kernel's sock_diag netlink interface with a filter program, so the
//     holder can tell its peers which clients it has (30 ms of the lab
//     VM's CPU for 20,000 connections, nearly all of it the kernel's dump;
//     docs/benchmarks.md).
//   - Table.Destroy closes such connections as `ss -K` does (SOCK_DESTROY):
//     on a planned release the old holder resets its own clients once the
//     new holder has the VIP, so they reconnect to it at once.
//   - Poker.Poke makes the new holder reset the previous holder's
//     connections after an unplanned failover (the previous holder crashed,
//     lost its link or was cut off): one bare ACK per connection from the
//     VIP, with arbitrary sequence numbers, from a raw socket, paced. The
//     client answers an unacceptable segment with an ACK (RFC 9293 section
//     3.10.7.4; RFC 5961 section 5.2's challenge ACK), the new holder's
//     kernel, having no such connection, answers that with a reset whose
//     sequence number is the one the client expects (RFC 9293 section
//     3.5.2), and the client's connection fails at once.
//   - Unlisted finds the connections a client opened after the previous
//     holder's last list (a kubectl's, which lives for one request): the
//     ports just below the client's first connection to the new holder,
//     Linux counting a client's source ports up per destination.
//   - Set and Delta are connection sets and the change between two, with a
//     compact, canonical binary encoding (grouped by VIP and port, client
//     addresses front-coded), for the holders to publish to their peers.
//     Feed and Mirror carry them (sans-IO): a holder's successive listings
//     become numbered deltas with a full set now and then, and a peer's
//     copy notices a lost message and asks for a full set.
//   - Pokable is the safety rule: which of a previous holder's connections
//     a node may poke (only VIPs it holds, only once the previous holder
//     released the VIP or its fence expired, never a connection it has).
//
// Limits. A poke reaches only a client whose answer comes back to the VIP:
// a client behind a NAT or a stateful firewall that has dropped the flow's
// state (or drops unsolicited ACKs) is not reset, and waits for its own
// timeout as before. A client stack that stays silent is not reset either
// (RFC 9293 requires the answer; only Linux clients were tested, and Linux
// answers at most one such segment per connection every 500 ms,
// net.ipv4.tcp_invalid_ratelimit). A listener on the VIP's port whose SYN
// queue overflowed in the last two minutes checks an unknown ACK as a SYN
// cookie and drops it instead of answering with a reset.
//
// Sockets (netlink and raw) are created in the network namespace of the
// calling thread: the netlink socket in Open, the raw sockets in each Poke
// call. The package never imports vipd's agent. Its unit tests need no
// privileges (Poker's sockets and clock are unexported seams; the filter
// program is checked by an interpreter of the kernel's rules); tests
// enabled by VIPD_NETNS_TESTS=1 as root run the real kernel paths in
// network namespaces they create.
package conns
