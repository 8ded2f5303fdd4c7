package bench

// RefreshSection is the report's section on the L2 refresh's cost
// (l2.refresh_interval): not measured by a bench run but by the l2 netns
// test it names, whose log prints the counts; the numbers below are that
// test's, and the per-minute figures follow from the packets per refresh.
const RefreshSection = "## Gratuitous ARP and NA refresh\n\n" +
	"Measured by an l2 network-namespace test, not by `make bench`: `VIPD_NETNS_TESTS=1 go test -count=1 -run TestNetnsRefreshCorrectsStaleNeighbour -v ./l2/` (as root), " +
	"on vipd dc28695, 2026-11-28, the machine above.\n\n" +
	"While it holds an L2 VIP a node sends the VIP's advertisement again every `l2.refresh_interval` (docs/design.md, \"Gratuitous ARP and NA refresh\"): " +
	"for IPv4 a gratuitous ARP request and reply (2 broadcast frames of 42 bytes, 60 on the wire), for IPv6 one unsolicited neighbor advertisement " +
	"to ff02::1 (an 86-byte frame). The test refreshes every 2 s and counts, on a packet socket in the neighbour's namespace, what arrives in 6 s: " +
	"6 ARP frames per IPv4 VIP and 3 NAs per IPv6 VIP, none for the VIPs of an announcer without refresh, none after Withdraw.\n\n" +
	"| refresh_interval | IPv4: frames (bytes) per VIP per minute | IPv6: frames (bytes) per VIP per minute | 100 IPv4 VIPs (the most vipd holds): frames per second |\n" +
	"|---|---|---|---|\n" +
	"| 1s (the shortest) | 120 (7,200) | 60 (5,160) | 200 |\n" +
	"| 3s (default) | 40 (2,400) | 20 (1,720) | 67 |\n" +
	"| 10s | 12 (720) | 6 (516) | 20 |\n" +
	"| 0s (off) | 0 | 0 | 0 |\n\n" +
	"In the same test a neighbour whose entry for the VIP pointed at a former holder's MAC (STALE or REACHABLE, arp_accept 0, " +
	"accept_untracked_na 0) pointed at the holder again 2.0 s after it was set, one period: the entries were set just after a refresh, " +
	"the worst case. A PERMANENT entry stays wrong. Without the refresh, such a neighbour with a STALE entry reaches the VIP again " +
	"only after about 8 s (8.2 s measured by hand between two namespaces: `ip neigh replace VIP lladdr OLD-MAC nud stale`, then " +
	"`ping -i 0.1 -c 1 -w 12 VIP`; 5 s delay_first_probe_time, 3 unicast probes a second apart to the old MAC, then a broadcast request).\n\n"
