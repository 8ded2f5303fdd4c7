// Package fence proves, with real vipd processes in network-namespace labs
// (lab/netlab), the lease's two promises (docs/design.md, "The lease: fast
// detection and fencing"; issues 15 and 17):
//
//   - Fencing: an owner that loses only its membership traffic (UDP and TCP
//     port 7946 dropped by nftables in its own namespace, inbound, outbound
//     or both, while clients still reach it) releases the VIP before any
//     other node claims it. Holders are sampled every 10 ms through netlink
//     for 10 s after the cut and after the heal: not one sample may show two
//     holders, the VIP must end on another node, and the client's gap stays
//     under 0.5 s (median of VIPD_FENCE_RUNS runs per direction, 2 by
//     default; `make fence-proof` runs 20 and writes docs/fence-proof.md).
//   - No false failover: with at least three CPU burners per core and 30 %
//     of the packets arriving at the owner dropped for 30 s, the VIP never
//     moves and no member is declared dead or gone.
//   - Health hysteresis: an owner whose /readyz flaps (every other check
//     failing, or two of every three) keeps the VIP with the default rise 2
//     and fall 3, and one that fails three checks in a row loses it.
//
// The tests need root, nft (Debian's nftables) and VIPD_NETNS_TESTS=1;
// VIPD_BIN points at the vipd and vipctl to test (built from ./cmd when
// unset). Every measurement is logged with t.Logf; run with -v to see them.
// With VIPD_FENCE_SUMMARY=FILE the membership-cut test also writes its
// per-run numbers as markdown into FILE (one section per direction, the
// others kept); VIPD_FENCE_CUT (a duration, 10s by default) sets how long
// the cut lasts.
package fence
