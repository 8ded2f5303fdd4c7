// Package upgrade holds the rolling-upgrade lab: a three-node cluster runs
// the previous release of vipd, built from git, and is rolled to the
// current tree one node at a time, restarted once more on it, and rolled
// back, under client load, the way an operator upgrades (and downgrades) a
// control plane. Each node runs vipd from a path of its own that each step
// replaces, as a package upgrade does.
//
// The previous release is the commit previousRelease. The test extracts it
// with `git archive` into a temporary directory and builds its vipd and
// vipctl there (the module cache and build cache are shared, so only what
// changed since is compiled); it fails with a message saying how to fetch
// the commit when the clone does not have it (a shallow CI checkout).
// VIPD_PREV_BIN, a directory holding that release's vipd and vipctl, skips
// the build.
//
// What it checks, in each pass (upgrade, restart, downgrade):
//
//   - the client (lab/netlab's prober, one HTTP request through the VIP
//     every 20 ms) loses no request, except one connection reset per time
//     the VIP moved (a connection open to the old holder when the
//     successor's gratuitous ARP repoints the client; see lab/drain's
//     maxPlannedGap);
//   - one node holds the VIP at every sample (holders read through netlink
//     every 20 ms): never none, and two only while a stopping node hands
//     its VIP to its successor (make-before-break);
//   - after each step every node, whatever its version, names the same
//     owner in `vipctl status`, that node alone has the address, and every
//     node runs the version the step says (status reports it);
//   - the restart pass (this release restarting in place, SIGUSR2) moves
//     the VIP not once and fails no request; the upgrade (the previous
//     release stops with SIGTERM) and the downgrade (this release, asked
//     to restart, finds that the binary installed now does not adopt VIPs,
//     and hands off) may move it.
//
// docs/operations.md ("Upgrading vipd") holds the rule for what may change
// on the wire and in state files between releases, which this lab
// enforces for the previous one.
//
// With $VIPD_UPGRADE_RESULTS set to a path, the test writes each pass's
// figures there as JSON (Result: probes, failed probes, resets, holder
// samples, samples with two holders and with none, moves, duration), pass
// or fail; `make bench` (part upgrade) runs it that way and reports them
// in docs/benchmarks.md.
//
// The test needs root and VIPD_NETNS_TESTS=1 and skips otherwise; run it
// with
//
//	make build && VIPD_NETNS_TESTS=1 VIPD_BIN=$PWD/bin go test -count=1 -v ./lab/upgrade/
package upgrade
