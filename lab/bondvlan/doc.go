// Package bondvlan runs vipd where control-plane VIPs usually live: on an
// 802.1Q VLAN interface (bond0.100) over a bond in active-backup mode of two
// links, each to its own bridge port (lab/netlab, Options.BondVLAN). It
// checks that the VIP fails over there as on a plain interface, that a
// failed bond slave on the owner moves nothing (the bond switches links,
// vipd keeps the VIP and no client probe fails), and that vipd --check
// names the interface's settings in the form sysctl takes for a name with
// a dot.
//
// The tests need root and VIPD_NETNS_TESTS=1, and a kernel that creates
// bonds and VLAN interfaces (CONFIG_BONDING, CONFIG_VLAN_8021Q): they skip
// with that reason otherwise. VIPD_BIN points at the vipd and vipctl to
// test (built from ./cmd when unset).
package bondvlan
