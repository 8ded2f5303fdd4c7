#!/usr/bin/env bash
# make demo: a 3-node vipd failover lab in network namespaces.
#
# A switch namespace holds a bridge; nodes n1..n3 (192.0.2.11-13,
# 2001:db8::11-13) and a client (192.0.2.100) hang off it by veth pairs. Each
# node runs vipd (VIPs 192.0.2.10 and 2001:db8::10 on eth0) and a small HTTP
# server on :6443 answering with its name. The client probes both VIPs every
# 20 ms while the demo
#   1. runs `vipctl withdraw` on the owner,
#   2. sets the new owner's link down,
#   3. sets that link up again and runs `vipctl restore` on the first owner,
# then prints a timeline with the gap the client saw after each event.
#
# Needs root, go, ip. Uses bin/vipd and bin/vipctl (make build), or VIPD_BIN.
# Everything it creates is removed on exit, Ctrl-C included; LAB_KEEP=1 keeps
# the files (configs, logs, probe output).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lab/lib.sh
. "$ROOT/lab/lib.sh"
lab_go_toolchain "$ROOT"

[[ $(id -u) == 0 ]] || lab_die "the demo needs root (network namespaces)"
BIN=${VIPD_BIN:-$ROOT/bin}
[[ -x $BIN/vipd && -x $BIN/vipctl ]] || lab_die "$BIN/vipd or vipctl missing: run make build"
command -v go >/dev/null || lab_die "go is needed to build the prober"

P="vd-$$"
VIP4=192.0.2.10
VIP6=2001:db8::10
INTERVAL=20ms
NODES=(n1 n2 n3)

lab_init "$P"
trap lab_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

lab_log "building the prober and the HTTP server"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$LAB_DIR/bin/" ./lab/netlab/cmd/probe ./lab/netlab/cmd/httpd)
PROBE=$LAB_DIR/bin/probe

ns() { echo "$P-$1"; }
ip4() { echo "192.0.2.$((10 + ${1#n}))"; }
ip6() { echo "2001:db8::$((10 + ${1#n}))"; }
vipctl() { local n=$1; shift; "$BIN/vipctl" --socket "$LAB_DIR/$n/vipd.sock" "$@"; }

lab_log "creating namespaces $P-{sw,n1,n2,n3,client}"
lab_switch "$(ns sw)"
for n in "${NODES[@]}"; do
	i=${n#n}
	lab_host "$(ns sw)" "$(ns "$n")" "p-$n" "$(ip4 "$n")/24" "$(printf '02:00:00:00:00:%02x' $((10 + i)))" "$(ip6 "$n")/64"
done
lab_host "$(ns sw)" "$(ns client)" p-client 192.0.2.100/24 02:00:00:00:00:64 2001:db8::100/64

write_config() {
	local n=$1 peers="" m
	for m in "${NODES[@]}"; do
		[[ $m == "$n" ]] || peers+="${peers:+, }\"$(ip4 "$m")\""
	done
	mkdir -p "$LAB_DIR/$n"
	cat >"$LAB_DIR/$n/vipd.toml" <<-TOML
		node_name = "$n"
		state_dir = "$LAB_DIR/$n/state"

		[api]
		socket = "$LAB_DIR/$n/vipd.sock"

		[cluster]
		bind_address = "$(ip4 "$n")"
		peers = [$peers]
		rejoin_interval = "5s"
		failure_detection = "fast"

		[[vip]]
		name = "apiserver"
		address = "$VIP4"
		interface = "eth0"

		[[vip]]
		name = "apiserver6"
		address = "$VIP6"
		interface = "eth0"
	TOML
}

for n in "${NODES[@]}"; do
	write_config "$n"
	lab_spawn "$(ns "$n")" "$LAB_DIR/$n/httpd.log" "$LAB_DIR/bin/httpd" -name "$n" -listen :6443
	lab_spawn "$(ns "$n")" "$LAB_DIR/$n/vipd.log" "$BIN/vipd" --config "$LAB_DIR/$n/vipd.toml"
	lab_log "started vipd on $n ($(ip4 "$n")), pid $LAB_LAST_PID"
done

# holders ADDR: the nodes that have ADDR on eth0.
holders() {
	local n out=()
	for n in "${NODES[@]}"; do
		if lab_has_addr "$(ns "$n")" "$1"; then out+=("$n"); fi
	done
	echo "${out[*]:-}"
}
# one_holder / moved_from FROM: exactly one node (not FROM) holds VIP4; it is
# left in HOLDER.
HOLDER=""
one_holder() { HOLDER=$(holders "$VIP4"); [[ -n $HOLDER && $HOLDER != *" "* ]]; }
moved_from() { one_holder && [[ $HOLDER != "$1" ]]; }
# member_state OBSERVER NODE: NODE's state as OBSERVER's vipd sees it.
member_state() { vipctl "$1" status 2>/dev/null | awk -v n="$2" '$1 == n {print $3; exit}'; }
all_alive() {
	local a b
	for a in "${NODES[@]}"; do
		for b in "${NODES[@]}"; do
			[[ $a == "$b" || $(member_state "$a" "$b") == alive ]] || return 1
		done
	done
}

lab_wait 20 all_alive || lab_die "the cluster did not form within 20s (logs in $LAB_DIR/n*/vipd.log)"
lab_wait 15 one_holder || lab_die "no single holder of $VIP4 within 15s: [$(holders "$VIP4")]"
OWNER=$HOLDER
lab_log "cluster formed; $VIP4 on $OWNER, $VIP6 on $(holders "$VIP6")"

EVENTS=$LAB_DIR/events.txt
: >"$EVENTS"
event() { echo "$(lab_now_ms) $*" >>"$EVENTS"; lab_log "EVENT: $*"; }

lab_log "probing $VIP4 and [$VIP6] from the client every $INTERVAL"
lab_spawn "$(ns client)" "$LAB_DIR/probe4.txt" "$PROBE" -target "$VIP4:6443" -interval "$INTERVAL" -timeout 200ms -duration 90s
PROBE4=$LAB_DIR/probe4.txt PROBE4_PID=$LAB_LAST_PID
lab_spawn "$(ns client)" "$LAB_DIR/probe6.txt" "$PROBE" -target "[$VIP6]:6443" -interval "$INTERVAL" -timeout 200ms -duration 90s
PROBE6=$LAB_DIR/probe6.txt PROBE6_PID=$LAB_LAST_PID
sleep 1.5

event "withdraw $OWNER"
vipctl "$OWNER" withdraw
lab_wait 15 moved_from "$OWNER" || lab_die "$VIP4 did not leave $OWNER within 15s: [$(holders "$VIP4")]"
NEW=$HOLDER
lab_log "$VIP4 now on $NEW"
sleep 2

event "link down $NEW"
ip -n "$(ns "$NEW")" link set eth0 down
lab_wait 15 moved_from "$NEW" || lab_die "$VIP4 did not leave $NEW within 15s: [$(holders "$VIP4")]"
THIRD=$HOLDER
lab_log "$VIP4 now on $THIRD"
sleep 2

event "link up $NEW, restore $OWNER"
ip -n "$(ns "$NEW")" link set eth0 up
vipctl "$OWNER" restore
lab_wait 15 all_alive || lab_die "$NEW did not rejoin within 15s"
lab_log "$NEW rejoined; $VIP4 on [$(holders "$VIP4")], $VIP6 on [$(holders "$VIP6")]"
sleep 2

lab_stop_pid "$PROBE4_PID" TERM 5
lab_stop_pid "$PROBE6_PID" TERM 5
grep -E '^[0-9]+ (ok|fail) ' "$PROBE4" >"$PROBE4.clean" || true
grep -E '^[0-9]+ (ok|fail) ' "$PROBE6" >"$PROBE6.clean" || true

echo
echo "=== client view of $VIP4 ==="
"$PROBE" -report "$PROBE4.clean" -events "$EVENTS" -interval "$INTERVAL"
echo
echo "=== client view of [$VIP6] ==="
"$PROBE" -report "$PROBE6.clean" -events "$EVENTS" -interval "$INTERVAL"
echo
echo "=== vipctl status on $THIRD ==="
vipctl "$THIRD" status
echo
lab_log "cleaning up"
