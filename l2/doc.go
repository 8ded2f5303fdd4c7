// Package l2 binds a virtual IP to a network interface and advertises it on
// the local link, so that neighbours send traffic for the VIP to this host.
//
// An Announcer manages the VIPs of one interface:
//
//   - Announce adds the VIP's host prefix (/32 for IPv4, /128 for IPv6) and
//     sends a burst of advertisements: gratuitous ARP for IPv4 (an ARP
//     request and an ARP reply, both broadcast, with sender and target IP set
//     to the VIP) and, for IPv6, unsolicited neighbor advertisements to the
//     all-nodes group ff02::1 with the Override flag set and a Target
//     Link-Layer Address option. The address is added so that the kernel
//     never takes it as the source of the host's own connections, while it
//     still accepts connections to it and answers ARP and neighbor
//     solicitations for it: an IPv4 VIP with scope host (source address
//     selection only considers addresses of at most the route's scope, link
//     or global), an IPv6 VIP deprecated (preferred lifetime 0, valid
//     lifetime forever: RFC 6724 rule 3 avoids it) and with IFA_F_NODAD, so
//     it is usable at once instead of after duplicate address detection.
//     Verify reports false for a VIP found with other attributes (re-added
//     as a plain address by a network manager), and Announce sets them again.
//     The first advertisement is sent before Announce returns; the rest of the
//     burst is spaced by Config.GARPInterval in a goroutine the Announcer owns.
//     With Config.RefreshInterval set, the same goroutine then sends one more
//     advertisement every RefreshInterval for as long as the VIP is announced
//     and its host prefix is on the interface (the refresh: a neighbour that
//     missed the burst, or whose entry went back to an old holder's MAC,
//     is corrected within one period). Announce is idempotent: a host
//     prefix that is already present is left as it is, and calling Announce
//     again restarts the burst (useful after a conflicting owner was seen, or
//     after the address was put back).
//
//   - Withdraw stops the burst and refresh for the VIP, then removes the
//     VIP's host prefix from the interface. Removing an absent address, or an
//     address on an interface that no longer exists, is not an error.
//
//   - Silence stops the burst and refresh and keeps the address: a holder
//     handing the VIP off make-before-break stays silent while its successor
//     announces. Announce starts them again.
//
//     Every advertisement after the first is sent under the Announcer's lock
//     after its goroutine checked that it was not stopped, so none leaves
//     once Withdraw, Quiesce, Silence, Announce or Close returned.
//
//   - Held reports whether the VIP's host prefix is configured on the
//     interface.
//
//   - WatchConflicts reports other hosts that claim the VIP: ARP packets sent
//     from the VIP by a different hardware address, and IPv6 neighbor
//     advertisements for the VIP whose target link-layer address is not this
//     interface's.
//
//   - Quiesce, Forward and StopForward hand an IPv4 VIP over to a successor
//     on the same link without cutting the clients' connections
//     (daisy-chaining): the old holder quiesces the VIP (keeps it, answers no
//     ARP request for it, sends no more gratuitous ARP: no burst, no
//     refresh), the successor
//     forwards to the old holder the TCP segments of connections it does not
//     know (nftables dup, then drop) before it announces the VIP. The rules
//     live in vipd's nftables tables ForwardTable (ip) and QuiesceTable
//     (arp); Close removes an Announcer's, CleanupNftables removes both
//     tables. See Forward.
//
// The Announcer owns exactly the host prefix, never another address with the
// VIP's IP: with the VIP equal to the host's own 192.0.2.11/24, Announce adds
// 192.0.2.11/32 beside it and Withdraw removes only that /32. (The kernel holds
// an IPv6 address once per interface, so an IPv6 VIP already configured with
// another prefix length cannot be announced; Announce returns an error.)
//
// The interface is looked up by name on every call, so an interface deleted
// and created again under the same name (a new index, perhaps a new MAC) is
// used as soon as it exists: Announce reopens its advertisement sockets on
// the new index, and a running WatchConflicts returns an error once its
// interface is removed, for the caller to start it again.
//
// Functions outside an Announcer read and watch the kernel state a caller
// converges on: HasAddress and RemoveAddress check and remove a host prefix
// (HasAddress reports what Held does; RemoveAddress is Withdraw for cleanup);
// LinkUp reads whether an interface is up with carrier; WatchLinks and
// WatchAddrs wake a caller when interfaces or addresses change, including
// changes made behind vipd's back (`ip addr del`, `ip addr flush`,
// NetworkManager), so it can check and put a VIP back at once instead of at
// its next periodic check.
//
// With Config.Quiet the Announcer only adds and removes addresses and sends
// nothing; BGP mode uses this to bind the VIP on "lo".
//
// Sockets (netlink, packet and ICMPv6) are created in the network namespace of
// the calling thread: the netlink sockets (rtnetlink and nftables) in New, the advertisement sockets on
// first use by Announce, a fresh listening socket and link subscription per
// WatchConflicts call, and a fresh netlink socket per call of the package
// functions. Callers that run in a namespace other than their process's must
// call those from a goroutine locked (runtime.LockOSThread) to a thread in
// that namespace. Nothing reads /sys, whose view is that of the namespace
// sysfs was mounted in, not the calling thread's.
//
// The kernel is reached through small unexported interfaces, so the package's
// unit tests run without privileges against in-memory fakes; a separate test,
// enabled by VIPD_NETNS_TESTS=1 when run as root, exercises the real kernel
// between two network namespaces joined by a veth pair.
package l2
