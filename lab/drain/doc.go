// Package drain holds the issue 3 proofs: network-namespace tests that run
// the real vipd and vipctl binaries on three nodes and a client probing the
// VIP every 20 ms, and check what operators rely on when they drain,
// restart or lose a control-plane node:
//
//   - vipctl withdraw --wait is make-before-break: no failed probe, exit 0,
//     the VIP ends on another node;
//   - after vipctl restore the VIP does not move back (preempt = false);
//   - withdraw on the last eligible node is refused (exit 3) and --force
//     drops the VIP everywhere;
//   - a failing health check moves the VIP within fall x interval + 1 s,
//     and with every health check failing from the start (bootstrap) exactly
//     one node holds it;
//   - a node cut off at the switch releases the VIP (no quorum) while the
//     majority takes it, and after the heal there is never a second holder;
//   - after SIGKILL, vipd cleanup leaves no address behind, a peer takes
//     over, and the restarted vipd converges to one holder;
//   - SIGTERM hands the VIP off without a failed probe and does not persist
//     a withdraw.
//
// The tests need root and VIPD_NETNS_TESTS=1 and skip otherwise; run them
// with
//
//	make build && VIPD_NETNS_TESTS=1 VIPD_BIN=$PWD/bin go test -count=1 -v ./lab/drain/
//
// The labs come from lab/netlab: everything they create is removed in
// t.Cleanup, processes are killed by PID, every wait is bounded, and the
// vipd logs are written to the test log when a test fails. Measured numbers
// (gaps, move times, two-holder samples) are logged with t.Logf.
package drain
