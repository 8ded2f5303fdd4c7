// Package converge proves, with real vipd processes in network-namespace
// labs (lab/netlab), that vipd converges on what is true and keeps its trust
// boundaries:
//
//   - a VIP address removed behind vipd's back (ip addr del, ip addr flush)
//     is put back, and the client sees the VIP again within 1 s;
//   - the owner's interface deleted and created again: the VIP answers again
//     within 2 s and exactly one node holds it;
//   - SIGHUP with an unchanged file, or with only log_level changed, moves
//     nothing and loses no probe while a health check runs;
//   - a member that left gracefully stays in the quorum base, so the two
//     remaining nodes, partitioned, never both hold the VIP;
//   - vipd processes of a stranger (not a configured peer, no key) that join
//     and vanish change neither the holder, nor quorum, nor peers.json;
//     garbage at the membership port logs a bounded number of lines;
//   - a node whose bind address appears only after vipd started waits for
//     it and then joins and holds normally.
//
// The tests need root and VIPD_NETNS_TESTS=1; VIPD_BIN points at the vipd
// and vipctl to test (built from ./cmd when unset). Measurements are logged
// with t.Logf; run with -v to see them.
package converge
