// Package faults proves how vipd behaves under faults, with real vipd
// processes in a network-namespace lab (lab/netlab): a flapping owner link,
// full and rolling restarts, the apiserver down on every node while
// membership churns, wrong or missing cluster keys, corrupt state files, a
// full state disk, and what metrics and the event stream show. The tests
// need root and VIPD_NETNS_TESTS=1; VIPD_BIN points at the vipd and vipctl
// to test (built from ./cmd when unset). Measurements are logged with
// t.Logf; run with -v to see them.
package faults
