# shellcheck shell=bash
# lab/lib.sh: shared helpers for the vipd network-namespace labs (demo, bench).
# Source it; it defines functions and the LAB_* globals, and runs nothing.
#
# Rules the helpers keep: everything lives in namespaces this lab creates (the
# bridge too, inside the switch namespace); the root namespace only gets the
# names under /run/netns; only processes started here are stopped, by PID;
# every wait is bounded. Call lab_init first and install the cleanup trap:
#
#   . lab/lib.sh
#   lab_init "vd-$$"
#   trap lab_cleanup EXIT; trap 'exit 130' INT; trap 'exit 143' TERM

LAB_PREFIX=""     # namespace name prefix (for scripts sourcing this file)
export LAB_PREFIX
LAB_DIR=""        # temp dir: configs, state, logs
LAB_PIDS=()       # processes started by lab_spawn
LAB_NSS=()        # namespaces created by lab_netns_add
LAB_LAST_PID=""   # PID of the last lab_spawn
LAB_BRIDGE=br0    # bridge name inside the switch namespace
LAB_IFACE=eth0    # host-side interface name inside every namespace

# lab_go_toolchain ROOT: export GOTOOLCHAIN as ROOT/go.mod's go line names
# it (go1.27.3), as the Makefile does: the machine's own Go may be older, and
# GOTOOLCHAIN=local ignores go.mod. Every script that runs go calls it first.
lab_go_toolchain() {
	local v
	v=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$1/go.mod")
	[[ -n $v ]] || { echo "no go line in $1/go.mod" >&2; return 1; }
	export GOTOOLCHAIN=go$v
}

lab_log() { printf '%s  %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
lab_die() { lab_log "error: $*"; exit 1; }
lab_now_ms() { date +%s%3N; }

# lab_init PREFIX: set up the globals and the temp dir.
lab_init() {
	LAB_PREFIX=$1
	LAB_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
}

# lab_alive PID: the process exists and is not a zombie.
lab_alive() {
	local st
	st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && $st != Z ]]
}

# lab_stop_pid PID [SIGNAL] [TIMEOUT_S]: signal a lab process and wait for it
# (bounded); SIGKILL it if it does not exit in time.
lab_stop_pid() {
	local pid=$1 sig=${2:-TERM} t=${3:-12} i
	lab_alive "$pid" || return 0
	kill "-$sig" "$pid" 2>/dev/null || return 0
	# wait returns the process's status (143 after SIGTERM): never let it
	# end a caller running under set -e.
	for ((i = 0; i < t * 20; i++)); do
		lab_alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.05
	done
	lab_log "pid $pid did not exit ${t}s after SIG$sig; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	return 0
}

# lab_cleanup: stop every process started here (newest first, SIGTERM then
# SIGKILL), delete the namespaces (newest first), remove LAB_DIR unless
# LAB_KEEP=1. Safe to call twice.
lab_cleanup() {
	local i rc=$?
	trap - EXIT INT TERM
	for ((i = ${#LAB_PIDS[@]} - 1; i >= 0; i--)); do
		lab_stop_pid "${LAB_PIDS[i]}" TERM 12
	done
	LAB_PIDS=()
	for ((i = ${#LAB_NSS[@]} - 1; i >= 0; i--)); do
		ip netns del "${LAB_NSS[i]}" 2>/dev/null || lab_log "could not delete namespace ${LAB_NSS[i]}"
	done
	LAB_NSS=()
	if [[ -n $LAB_DIR && -d $LAB_DIR ]]; then
		if [[ ${LAB_KEEP:-0} == 1 ]]; then
			lab_log "lab files kept in $LAB_DIR"
		else
			rm -rf "$LAB_DIR"
		fi
	fi
	return "$rc"
}

# lab_netns_add NS: create a namespace with lo up, remembered for cleanup.
lab_netns_add() {
	ip netns add "$1" || lab_die "ip netns add $1"
	LAB_NSS+=("$1")
	ip -n "$1" link set lo up
}

# lab_switch NS: the switch namespace with the bridge (no STP, no snooping).
lab_switch() {
	lab_netns_add "$1"
	ip -n "$1" link add "$LAB_BRIDGE" type bridge mcast_snooping 0
	ip -n "$1" link set "$LAB_BRIDGE" up
}

# lab_host SWITCH_NS NS PORT IP4/LEN MAC [IP6/LEN]: a host namespace linked to
# the bridge by a veth pair created inside the switch namespace (PORT there,
# LAB_IFACE in NS).
lab_host() {
	local sw=$1 ns=$2 port=$3 ip4=$4 mac=$5 ip6=${6:-}
	lab_netns_add "$ns"
	ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.keep_addr_on_down=1 net.ipv6.conf.default.keep_addr_on_down=1
	ip -n "$sw" link add "$port" type veth peer name "$LAB_IFACE" netns "$ns"
	ip -n "$sw" link set "$port" master "$LAB_BRIDGE" up
	ip -n "$ns" link set "$LAB_IFACE" address "$mac"
	ip -n "$ns" addr add "$ip4" dev "$LAB_IFACE"
	[[ -z $ip6 ]] || ip -n "$ns" addr add "$ip6" dev "$LAB_IFACE" nodad
	ip -n "$ns" link set "$LAB_IFACE" up
}

# lab_spawn NS LOG CMD...: start CMD in NS in the background, output appended
# to LOG; its PID goes to LAB_LAST_PID and LAB_PIDS. (`ip netns exec` execs
# CMD in place, so the PID is CMD's.)
lab_spawn() {
	local ns=$1 log=$2
	shift 2
	ip netns exec "$ns" "$@" >>"$log" 2>&1 </dev/null &
	LAB_LAST_PID=$!
	LAB_PIDS+=("$LAB_LAST_PID")
}

# lab_has_addr NS ADDR: ADDR is on LAB_IFACE in NS.
lab_has_addr() {
	ip -n "$1" -o addr show dev "$LAB_IFACE" 2>/dev/null | grep -Fq " $2/"
}

# lab_wait TIMEOUT_S CMD...: run CMD every 50ms until it succeeds or TIMEOUT_S
# passes (then return 1).
lab_wait() {
	local t=$1 i
	shift
	for ((i = 0; i < t * 20; i++)); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
