// Package bgplab holds end-to-end tests of vipd's BGP mode against real
// routers (BIRD 2 and FRR) in network namespaces.
//
// Each test builds a router namespace with a bridge (192.0.2.1/24) that three
// node namespaces (192.0.2.11-13) are attached to, and a client namespace
// behind the router (198.51.100.100, router side 198.51.100.1). Every node
// runs the real vipd and vipctl binaries (from $VIPD_BIN, else <repo>/bin)
// and a small HTTP server on port 6443; the VIP 203.0.113.10 is announced by
// BGP (nodes AS 64513, router AS 64512, hold time 3s, TCP MD5 password from a
// file). The tests read the router's BGP table (birdc / vtysh) and its kernel
// table (ip route) to prove:
//
//   - announce = "owner": one path, via the owner vipctl status names;
//   - announce = "all": ECMP over all three nodes in the router's kernel;
//   - vipctl withdraw removes the node's path, after announcing it with the
//     GRACEFUL_SHUTDOWN community (65535:0) for bgp.graceful_shutdown;
//   - a frozen (SIGSTOP) or killed (SIGKILL) vipd loses its path within the
//     3s hold time plus one second;
//   - a client probing the VIP through the router every 20ms loses no probe
//     while a node drains with vipctl withdraw --wait;
//   - vipd --check reports bad BGP settings as PATH:LINE:COL lines;
//   - the fence (TestFRR, subtest owner-fence): an owner whose membership
//     traffic (UDP and TCP port 7946, both ways) is dropped by nftables in
//     its own namespace, its BGP session up, withdraws its path and leaves
//     lo before any other node announces, and the VIP moves to another
//     node. Holders (the VIP on lo, read through netlink in every node
//     namespace every 10 ms) and the router's paths (read in a loop) never
//     show two holders or two paths, in the cut or after the heal.
//
// TestFRRBFD and TestBIRDBFD run the same lab with BFD (100ms x 3) on both
// sides (FRR bfdd with `neighbor NODES bfd profile vipd`, BIRD `protocol
// bfd` and `bfd yes`), announce = "all" and one path in the router's
// kernel (maximum-paths 1 / no merge paths): a cut of the node in use
// (its bridge port detached and its ingress dropped, both carriers up)
// moves the client to another node within the BFD detection time; a
// planned withdraw loses no probe and leaves BFD up; SIGTERM loses no
// probe, closes BGP with a CEASE and then BFD with AdminDown. "Loses no
// probe" in a planned step allows the one connection that may be open
// across the router's path change, which the next node resets (plannedLoss).
//
// TestPolicy peers one vipd with two routers of different AS: BIRD sending
// 10,000 IPv6 and 257 IPv4 routes (the VIP prefixes among them) and FRR
// receiving. The FRR router gets exactly the two VIP prefixes, never
// BIRD's routes (also while the node has withdrawn), vipd's RSS stays
// under 60 MiB, and with the default max_prefixes (100) BIRD's sessions
// are closed by the prefix limit and stay down.
//
// TestFRRMultihop and TestBIRDMultihop put a Linux router (the hop)
// between one node and two routers, eBGP and iBGP, every BGP address on a
// loopback behind static /32 routes: without ebgp_multihop the eBGP session
// stays down (the hop counts vipd's TTL 1 segments), with it both come up
// and the routers show the peers' and the VIPs' MED and LOCAL_PREF (iBGP)
// on the VIP paths, next hop the node's loopback; with TTL security
// (GTSM) for one hop the node's kernel drops the router's TTL 254
// segments and the session stays down, for two hops it comes up.
// TestCheckMultihopConfig runs `vipd --check` on those keys.
//
// The namespace tests need root and VIPD_NETNS_TESTS=1 and skip otherwise;
// run them with
//
//	make build && VIPD_NETNS_TESTS=1 VIPD_BIN=$PWD/bin go test -count=1 -v ./lab/bgplab/
//
// Everything they create (namespaces, links, processes) is removed in
// t.Cleanup; processes are killed by PID. Every wait is bounded.
package bgplab
