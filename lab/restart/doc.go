// Package restart holds the proofs of restarts in place (issue 25) with the
// real vipd on three nodes in network namespaces, a client probing the VIP
// every 20 ms and a client holding one HTTP/1.1 connection open through it:
//
//   - the owner restarts in place (SIGUSR2, the new process started at
//     once): the VIP never leaves it (every 20 ms sample: exactly the
//     owner), no probe fails, one connection held open carries a request
//     every 20 ms throughout (no reset), and every node names the owner;
//   - the owner stops for a restart and no process comes back: its address
//     goes with its kernel lifetime, the peers claim as for a crash once
//     the grace has run out, never two holders;
//   - the new process fails to start and cleanup runs as systemd's
//     ExecStopPost would ($SERVICE_RESULT=exit-code): the address goes at
//     once and the peers take over at grace + the crash figure;
//   - the new process starts while its bind address is not on the host
//     (it waits, without membership or lease), the address added 2 s after
//     the grace: the adopted address goes with its kernel lifetime, the
//     peers claim once the grace has run out, the new process gives the
//     VIP up instead of putting it back, never two holders.
//
// Under systemd the same restart is `systemctl restart vipd`
// (packaging/systemd-test); SIGUSR2 is the way for other supervisors, and
// for this lab, which has none (under systemd SIGUSR2 hands off unless
// systemd runs a restart job).
//
// The tests need root and VIPD_NETNS_TESTS=1 and skip otherwise; run them
// with
//
//	make build && VIPD_NETNS_TESTS=1 VIPD_BIN=$PWD/bin go test -count=1 -v ./lab/restart/
package restart
