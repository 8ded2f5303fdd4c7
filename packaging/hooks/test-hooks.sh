#!/usr/bin/env bash
# test-hooks.sh — checks the drain hooks' behaviour and exit codes against
# fake vipctl, kubectl and ssh commands (no root, no vipd, no cluster).
# Run by `make package-test`; prints "N passed, N failed".
set -euo pipefail

hooks=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
log=$work/calls.log
sock=$work/vipd.sock
pass=0
fail=0

# Fake vipctl: logs its arguments; exit codes come from FAKE_* variables.
cat >"$work/bin/vipctl" <<'FAKE'
#!/bin/sh
echo "vipctl $*" >>"$FAKE_LOG"
for a in "$@"; do
	case $a in
	status) exit "${FAKE_STATUS_RC:-0}" ;;
	withdraw) exit "${FAKE_WITHDRAW_RC:-0}" ;;
	restore) exit "${FAKE_RESTORE_RC:-0}" ;;
	decommission) exit "${FAKE_DECOMMISSION_RC:-0}" ;;
	esac
done
exit 99
FAKE
# Fake kubectl: "get" prints $FAKE_MACHINES, "annotate" logs and exits FAKE_ANNOTATE_RC.
cat >"$work/bin/kubectl" <<'FAKE'
#!/bin/sh
echo "kubectl $*" >>"$FAKE_LOG"
for a in "$@"; do
	case $a in
	get) printf '%b' "$FAKE_MACHINES"; exit 0 ;;
	annotate) exit "${FAKE_ANNOTATE_RC:-0}" ;;
	esac
done
exit 99
FAKE
# Fake ssh: logs the target and command, exits FAKE_SSH_RC.
cat >"$work/bin/ssh" <<'FAKE'
#!/bin/sh
echo "ssh $*" >>"$FAKE_LOG"
exit "${FAKE_SSH_RC:-0}"
FAKE
chmod +x "$work/bin/"*
export FAKE_LOG=$log VIPD_SOCKET=$sock VIPD_READY_INTERVAL=0
export PATH=$work/bin:$PATH

# expect NAME WANT_RC CMD...: runs CMD with a fresh call log, compares its exit code.
got=0
expect() {
	local name=$1 want=$2
	shift 2
	: >"$log"
	got=0
	"$@" >"$work/out" 2>&1 || got=$?
	if [ "$got" -eq "$want" ]; then
		pass=$((pass + 1))
		echo "ok   $name"
	else
		fail=$((fail + 1))
		echo "FAIL $name: exit $got, want $want; output:"
		sed 's/^/     /' "$work/out"
	fi
}
# logged NAME PATTERN / notlogged NAME PATTERN: asserts on the last call log.
logged() {
	if grep -qF -- "$2" "$log"; then pass=$((pass + 1)); echo "ok   $1"; else
		fail=$((fail + 1)); echo "FAIL $1: no call matching '$2' in:"; sed 's/^/     /' "$log"; fi
}
notlogged() {
	if ! grep -qF -- "$2" "$log"; then pass=$((pass + 1)); echo "ok   $1"; else
		fail=$((fail + 1)); echo "FAIL $1: unexpected call '$2' in:"; sed 's/^/     /' "$log"; fi
}

# vipd-drain
expect "drain: bad argument is a usage error" 2 "$hooks/vipd-drain" --bogus
expect "drain: vipctl missing" 3 env VIPCTL=no-such-vipctl "$hooks/vipd-drain"
expect "drain: not running (vipctl 5) means vipd not reachable" 4 env FAKE_STATUS_RC=5 "$hooks/vipd-drain"
notlogged "drain: not running, no withdraw" "withdraw"
expect "drain: not running allowed by --allow-not-running" 0 env FAKE_STATUS_RC=5 "$hooks/vipd-drain" --allow-not-running
notlogged "drain: not running, allowed, no withdraw" "withdraw"
# No socket file in sight ($sock does not exist) must not pass for "not
# running" either: a directory the user may not search hides the socket.
expect "drain: permission denied (vipctl 6) fails despite --allow-not-running" 11 env FAKE_STATUS_RC=6 "$hooks/vipd-drain" --allow-not-running
notlogged "drain: permission denied, no withdraw" "withdraw"
expect "drain: permission denied (vipctl 6)" 11 env FAKE_STATUS_RC=6 "$hooks/vipd-drain"
expect "drain: other status error fails despite --allow-not-running" 4 env FAKE_STATUS_RC=1 "$hooks/vipd-drain" --allow-not-running
notlogged "drain: status fails, no withdraw" "withdraw"
expect "drain: status fails" 4 env FAKE_STATUS_RC=1 "$hooks/vipd-drain"
expect "drain: withdraw times out (vipctl 4)" 5 env FAKE_WITHDRAW_RC=4 "$hooks/vipd-drain"
expect "drain: withdraw refused, no eligible node (vipctl 3)" 5 env FAKE_WITHDRAW_RC=3 "$hooks/vipd-drain"
expect "drain: vipd unreachable during withdraw (vipctl 5)" 4 env FAKE_WITHDRAW_RC=5 "$hooks/vipd-drain"
expect "drain: withdraw denied by vipd (vipctl 6)" 11 env FAKE_WITHDRAW_RC=6 "$hooks/vipd-drain"
expect "drain: other vipctl error (flag not saved)" 5 env FAKE_WITHDRAW_RC=1 "$hooks/vipd-drain"
expect "drain: handed off" 0 "$hooks/vipd-drain"
logged "drain: waits with default timeout" "vipctl --socket $sock withdraw --wait --timeout 30s"
notlogged "drain: no --force by default" "--force"
notlogged "drain: no --no-persist by default" "--no-persist"
expect "drain: timeout and force passed on" 0 "$hooks/vipd-drain" --timeout 10s --force
logged "drain: timeout and force in call" "withdraw --wait --timeout 10s --force"
expect "drain: --no-persist passed on" 0 "$hooks/vipd-drain" --no-persist
logged "drain: --no-persist in call" "withdraw --wait --timeout 30s --no-persist"

# vipd-undrain
expect "undrain: restores" 0 "$hooks/vipd-undrain"
logged "undrain: restore called" "vipctl --socket $sock restore"
expect "undrain: not ready in time" 7 "$hooks/vipd-undrain" --wait-ready false --ready-timeout 0
notlogged "undrain: not ready, no restore" "restore"
expect "undrain: ready then restore" 0 "$hooks/vipd-undrain" --wait-ready true
logged "undrain: restore after ready" "restore"
expect "undrain: restore fails" 8 env FAKE_RESTORE_RC=1 "$hooks/vipd-undrain"
expect "undrain: bad timeout" 2 "$hooks/vipd-undrain" --ready-timeout soon
expect "undrain: not running (vipctl 5)" 4 env FAKE_STATUS_RC=5 "$hooks/vipd-undrain"
expect "undrain: permission denied (vipctl 6)" 11 env FAKE_STATUS_RC=6 "$hooks/vipd-undrain"
notlogged "undrain: permission denied, no restore" "restore"
expect "undrain: restore denied by vipd (vipctl 6)" 11 env FAKE_RESTORE_RC=6 "$hooks/vipd-undrain"

# kubeadm-pre-reset
marker=$work/reset-ran
expect "kubeadm: withdraw fails, command not run" 5 env FAKE_WITHDRAW_RC=1 "$hooks/kubeadm-pre-reset" -- touch "$marker"
if [ ! -e "$marker" ]; then pass=$((pass + 1)); echo "ok   kubeadm: reset not run"; else fail=$((fail + 1)); echo "FAIL kubeadm: reset ran after failed withdraw"; fi
expect "kubeadm: withdraw then command" 0 "$hooks/kubeadm-pre-reset" --timeout 5s -- touch "$marker"
if [ -e "$marker" ]; then pass=$((pass + 1)); echo "ok   kubeadm: reset ran"; else fail=$((fail + 1)); echo "FAIL kubeadm: reset did not run"; fi
logged "kubeadm: drain options passed on" "withdraw --wait --timeout 5s"
expect "kubeadm: command fails" 6 "$hooks/kubeadm-pre-reset" -- false
expect "kubeadm: withdraw only" 0 "$hooks/kubeadm-pre-reset"
logged "kubeadm: decommissions after the withdraw" "vipctl --socket $sock decommission"
rm -f "$marker"
expect "kubeadm: decommission fails, command not run" 12 env FAKE_DECOMMISSION_RC=1 "$hooks/kubeadm-pre-reset" -- touch "$marker"
if [ ! -e "$marker" ]; then pass=$((pass + 1)); echo "ok   kubeadm: reset not run when not decommissioned"; else fail=$((fail + 1)); echo "FAIL kubeadm: reset ran although the node was not decommissioned"; fi
expect "drain: no decommission without the option" 0 "$hooks/vipd-drain"
if ! grep -q "decommission" "$FAKE_LOG" 2>/dev/null || [ "$(tail -1 "$FAKE_LOG")" != "vipctl --socket $sock decommission" ]; then pass=$((pass + 1)); echo "ok   drain: maintenance does not decommission"; else fail=$((fail + 1)); echo "FAIL drain: vipd-drain without --decommission decommissioned"; fi
expect "kubeadm: permission denied, command not run" 11 env FAKE_STATUS_RC=6 "$hooks/kubeadm-pre-reset" -- touch "$marker"
if [ ! -e "$marker" ]; then pass=$((pass + 1)); echo "ok   kubeadm: reset not run when denied"; else fail=$((fail + 1)); echo "FAIL kubeadm: reset ran although permission was denied"; fi

# rke2-upgrade
expect "rke2: run drains, upgrades, restores" 0 env VIPD_READY_CMD=true "$hooks/rke2-upgrade" run -- sh -c "echo upgrade >>$log"
if [ "$(grep -oE 'withdraw|upgrade|restore' "$log" | tr '\n' ' ')" = "withdraw upgrade restore " ]; then
	pass=$((pass + 1)); echo "ok   rke2: order withdraw, upgrade, restore"
else
	fail=$((fail + 1)); echo "FAIL rke2: wrong order:"; sed 's/^/     /' "$log"
fi
expect "rke2: upgrade fails, stays withdrawn" 6 env VIPD_READY_CMD=true "$hooks/rke2-upgrade" run -- false
notlogged "rke2: failed upgrade, no restore" "restore"
expect "rke2: withdraw fails, no upgrade" 5 env FAKE_WITHDRAW_RC=1 "$hooks/rke2-upgrade" run -- sh -c "echo upgrade >>$log"
notlogged "rke2: no upgrade after failed withdraw" "upgrade"
expect "rke2: post waits for readiness" 7 env VIPD_READY_CMD=false "$hooks/rke2-upgrade" post --ready-timeout 0
expect "rke2: pre is vipd-drain" 5 env FAKE_WITHDRAW_RC=1 "$hooks/rke2-upgrade" pre
expect "rke2: unknown mode" 2 "$hooks/rke2-upgrade" sideways
expect "rke2: run without command" 2 "$hooks/rke2-upgrade" run

# capi-pre-drain; machines: cp-a deleting with hook (two InternalIPs),
# cp-b not deleting with hook, cp-c deleting without hook.
export FAKE_MACHINES='cp-a|2025-01-01T00:00:00Z|node-a|192.0.2.10 192.0.2.11|198.51.100.9|vipd\ncp-b||node-b|192.0.2.20||vipd\ncp-c|2025-01-01T00:00:00Z|node-c|192.0.2.30||\n'
hook=pre-drain.delete.hook.machine.cluster.x-k8s.io/vipd
expect "capi: --all releases deleting machines" 0 "$hooks/capi-pre-drain" -n capi --all
logged "capi: drains on first InternalIP, decommissioning" "root@192.0.2.10 /usr/share/vipd/hooks/vipd-drain --decommission --timeout 30s"
logged "capi: annotation removed" "kubectl --namespace capi annotate machines.cluster.x-k8s.io cp-a $hook-"
notlogged "capi: machine not being deleted left alone" "cp-b"
notlogged "capi: machine without hook left alone" "192.0.2.30"
expect "capi: drain fails on node" 5 env FAKE_SSH_RC=5 "$hooks/capi-pre-drain" --all
notlogged "capi: failed drain keeps annotation" "annotate"
expect "capi: permission denied on node" 11 env FAKE_SSH_RC=11 "$hooks/capi-pre-drain" --all
notlogged "capi: permission denied keeps annotation" "annotate"
expect "capi: node unreachable" 9 env FAKE_SSH_RC=255 "$hooks/capi-pre-drain" --all
notlogged "capi: unreachable keeps annotation" "annotate"
expect "capi: unreachable allowed" 0 env FAKE_SSH_RC=255 "$hooks/capi-pre-drain" --all --allow-unreachable
logged "capi: unreachable allowed removes annotation" "annotate machines.cluster.x-k8s.io cp-a $hook-"
expect "capi: --machine works before deletion" 0 "$hooks/capi-pre-drain" --machine cp-b
logged "capi: --machine drains its node" "root@192.0.2.20"
expect "capi: --machine without hook" 0 "$hooks/capi-pre-drain" --machine cp-c
notlogged "capi: no hook, no drain" "ssh"
expect "capi: unknown machine" 10 "$hooks/capi-pre-drain" --machine cp-z
expect "capi: annotate fails" 10 env FAKE_ANNOTATE_RC=1 "$hooks/capi-pre-drain" --machine cp-a
expect "capi: dry run" 0 "$hooks/capi-pre-drain" --all --dry-run
notlogged "capi: dry run touches nothing" "annotate"
notlogged "capi: dry run runs no ssh" "ssh"
expect "capi: needs --machine or --all" 2 "$hooks/capi-pre-drain"

echo "hooks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
