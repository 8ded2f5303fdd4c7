# shellcheck shell=bash
# packaging/systemd-test/lib.sh: the machinery of systemd-test.sh — a cached
# Debian rootfs, containers booted from it with systemd-nspawn, commands run
# inside them, and steps reported PASS/FAIL/XFAIL/XPASS. Source it after
# lab/lib.sh (namespaces, PIDs, cleanup); it defines functions and ST_*
# globals and runs nothing.
#
# Rules kept here: a container's network is a namespace this test created
# (lab_host: a veth to the test's own bridge), never the host's; every
# container runs on an overlay of the read-only cached rootfs, so the cache is
# never written after it is built; only the nspawn processes started here and
# the containers' own PID 1 are ever signalled; every wait is bounded.

ST_SUITE=bookworm
ST_MIRROR=${VIPD_SYSTEMD_TEST_MIRROR:-http://deb.debian.org/debian}
ST_CACHE=${VIPD_SYSTEMD_TEST_CACHE:-/var/cache/vipd-systemd-test}
# What the rootfs needs besides minbase; the package's own Depends are added
# by st_rootfs, so a dependency the package forgets to declare is missing here
# as it would be on a minimal host.
ST_BASE_PKGS=(systemd systemd-sysv dbus iproute2)
ST_ROOTFS=""     # the cached rootfs in use (read-only lower layer)
ST_ROOTFS_FD=""  # shared lock on it while this run uses it
ST_MOUNTS=()     # overlay mounts, unmounted by st_cleanup
declare -A ST_NSPAWN=() # container name -> PID of its systemd-nspawn
declare -A ST_PID1=()   # container name -> host PID of its systemd (PID 1 inside)
declare -A ST_ROOT=()   # container name -> its root directory (the overlay)
ST_MACHINE_PREFIX=""    # machine names: PREFIX-NAME (set by st_init)
ST_PASS=0 ST_FAIL=0 ST_XFAIL=0 ST_XPASS=0
declare -A ST_XFAIL_REASON=() # step id -> why it is expected to fail (the daemon change it waits for)

st_now() { echo "${EPOCHREALTIME/./}" | cut -c1-13; } # ms since the epoch
st_secs() { printf '%d.%01d' $(($1 / 1000)) $(($1 % 1000 / 100)); } # ms -> "1.2"

# st_skip REASON: the test cannot run here; say why and succeed (fail when
# VIPD_SYSTEMD_TEST_REQUIRE=1).
st_skip() {
	echo "SKIP systemd-test: $*"
	if [ "${VIPD_SYSTEMD_TEST_REQUIRE:-0}" = 1 ]; then
		echo "systemd-test: VIPD_SYSTEMD_TEST_REQUIRE=1: a skip is a failure"
		exit 1
	fi
	exit 0
}

# st_init PREFIX: machine names and the lab (namespaces, temp dir).
st_init() {
	lab_init "$1"
	ST_MACHINE_PREFIX=$1
}

# st_wait TIMEOUT_S CMD...: run CMD every 50 ms until it succeeds (0) or
# TIMEOUT_S seconds of wall time pass (1).
st_wait() {
	local deadline=$(($(st_now) + $1 * 1000))
	shift
	while :; do
		"$@" && return 0
		[ "$(st_now)" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

# --- the rootfs cache -------------------------------------------------------

# st_rootfs_build DIR PKGS: the recipe. Its text is part of the cache key, so
# any change to it builds a new rootfs.
st_rootfs_build() {
	local dir=$1 pkgs=$2
	debootstrap --variant=minbase --include="$pkgs" "$ST_SUITE" "$dir" "$ST_MIRROR"
	# The test drives the containers through nsenter: no getty on the console.
	ln -sf /dev/null "$dir/etc/systemd/system/console-getty.service"
	: >"$dir/etc/machine-id" # a new one per boot (nspawn)
	rm -f "$dir/etc/hostname"
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
}

# st_rootfs EXTRA_PKGS...: makes ST_ROOTFS a rootfs with minbase, the base
# packages and EXTRA_PKGS, from the cache when one was built by the same
# recipe (key: suite, architecture, packages, the recipe's text), otherwise
# built now (debootstrap, about a minute). Other keys' rootfs are pruned when
# no run uses them. Holds a shared lock on the one in use until exit.
st_rootfs() {
	local pkgs key dir lock tmp t0 old
	pkgs=$(printf '%s\n' "${ST_BASE_PKGS[@]}" "$@" | sort -u | paste -sd, -)
	key=$(printf '%s\n' "$ST_SUITE" "$(dpkg --print-architecture)" "$pkgs" "$(declare -f st_rootfs_build)" |
		sha256sum | cut -c1-16)
	dir=$ST_CACHE/rootfs-$key
	mkdir -p "$ST_CACHE"
	chmod 0700 "$ST_CACHE"
	exec {lock}>"$ST_CACHE/build.lock"
	flock -w 900 "$lock" || { echo "rootfs: cache $ST_CACHE is locked by another build" >&2; return 1; }
	if [ -f "$dir/.complete" ]; then
		echo "rootfs: cached $dir ($pkgs)"
	else
		rm -rf "$dir"
		tmp=$(mktemp -d "$ST_CACHE/.build-$key.XXXXXX")
		t0=$(st_now)
		echo "rootfs: debootstrap $ST_SUITE minbase + $pkgs into $dir (cold cache)"
		if ! st_rootfs_build "$tmp" "$pkgs" >"$ST_CACHE/debootstrap.log" 2>&1; then
			echo "rootfs: debootstrap failed; the end of $ST_CACHE/debootstrap.log:" >&2
			tail -15 "$ST_CACHE/debootstrap.log" | sed 's/^/    /' >&2
			rm -rf "$tmp"
			return 1
		fi
		touch "$tmp/.complete"
		mv "$tmp" "$dir"
		echo "rootfs: built in $(st_secs $(($(st_now) - t0)))s"
	fi
	exec {ST_ROOTFS_FD}>"$dir.lock"
	flock -s "$ST_ROOTFS_FD"
	# Prune rootfs of other recipes that no run holds.
	for old in "$ST_CACHE"/rootfs-*; do
		case $old in "$dir" | *.lock) continue ;; esac
		[ -d "$old" ] || continue
		if (flock -n 9 && rm -rf "$old" "$old.lock") 9>"$old.lock"; then
			echo "rootfs: pruned $old (another recipe)"
		fi
	done
	flock -u "$lock"
	exec {lock}>&-
	ST_ROOTFS=$dir
}

# --- containers -------------------------------------------------------------

# st_ct_start NAME NETNS: boots NAME from an overlay of ST_ROOTFS in the
# network namespace NETNS (created by the caller, e.g. lab_host). Does not
# wait; st_ct_booted does. Files may be put under ${ST_ROOT[NAME]} meanwhile.
st_ct_start() {
	local name=$1 ns=$2 d=$LAB_DIR/ct/$1
	mkdir -p "$d/upper" "$d/work" "$d/root"
	mount -t overlay "st-$name" -o "lowerdir=$ST_ROOTFS,upperdir=$d/upper,workdir=$d/work" "$d/root" || return 1
	ST_MOUNTS+=("$d/root")
	# shellcheck disable=SC2034 # read by systemd-test.sh
	ST_ROOT[$name]=$d/root
	echo "$name" >"$d/root/etc/hostname"
	# --network-namespace-path instead of --private-network: the namespace is
	# this test's (lab_host wired it to the test's bridge before boot), and
	# `ip -n` sees the VIP from outside. nspawn grants CAP_NET_ADMIN only with
	# its own private network, so ask for it: vipd needs it to add the VIP.
	systemd-nspawn --quiet -D "$d/root" --machine="$ST_MACHINE_PREFIX-$name" --hostname="$name" \
		--boot --register=no --keep-unit --link-journal=no --resolv-conf=off --timezone=off \
		--network-namespace-path="/run/netns/$ns" --capability=CAP_NET_ADMIN \
		--console=read-only >"$d/console.log" 2>&1 </dev/null &
	ST_NSPAWN[$name]=$!
}

# st_pid1 NAME: prints the host PID of the container's init: the child of
# its nspawn that lives in another PID namespace.
st_pid1() {
	local np=${ST_NSPAWN[$1]} c
	for c in $(cat "/proc/$np/task/$np/children" 2>/dev/null); do
		if [ "$(readlink "/proc/$c/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

# st_ct_booted NAME TIMEOUT_S: waits until the container's systemd finished
# booting (running or degraded); prints why not and fails otherwise.
st_ct_booted() {
	local name=$1 t=$2 p state
	if ! st_wait "$t" st_pid1 "$name" >/dev/null; then
		echo "container $name: no init process ${t}s after systemd-nspawn started; its output:"
		tail -20 "$LAB_DIR/ct/$name/console.log" | sed 's/^/    /'
		return 1
	fi
	p=$(st_pid1 "$name")
	ST_PID1[$name]=$p
	# Until systemd listens on its private socket, systemctl cannot connect.
	booted() {
		state=$(timeout 10 nsenter -t "$p" -a systemctl is-system-running 2>&1) || true
		case $state in running | degraded) return 0 ;; esac
		return 1
	}
	st_wait "$t" booted || true
	case $state in
	running) return 0 ;;
	degraded)
		echo "container $name booted degraded; failed units:"
		nsenter -t "$p" -a systemctl --failed --no-legend --no-pager | sed 's/^/    /'
		return 0
		;;
	esac
	echo "container $name: systemd did not finish booting in ${t}s (state: ${state:-none}); its output:"
	tail -20 "$LAB_DIR/ct/$name/console.log" | sed 's/^/    /'
	return 1
}

# ct NAME CMD...: runs CMD inside container NAME (all its namespaces, a clean
# environment), bounded by CT_TIMEOUT seconds (default 60).
ct() {
	local name=$1
	shift
	timeout -k 5 "${CT_TIMEOUT:-60}" nsenter -t "${ST_PID1[$name]}" -a \
		env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}

# st_ct_stop NAME: powers the container off (SIGTERM to its nspawn), kills
# it if that takes over 30 s, and removes its mount and nspawn leftovers.
st_ct_stop() {
	local name=$1 np=${ST_NSPAWN[$1]:-} p1=${ST_PID1[$1]:-} d
	if [ -n "$np" ]; then
		lab_stop_pid "$np" TERM 30
		# The container's init dies with nspawn; make sure (it is ours).
		[ -z "$p1" ] || ! lab_alive "$p1" || lab_stop_pid "$p1" KILL 5
	fi
	unset "ST_NSPAWN[$name]" "ST_PID1[$name]"
	d=$LAB_DIR/ct/$name/root
	if mountpoint -q "$d"; then umount "$d" || umount -l "$d"; fi
	# nspawn leaves its (empty) propagation directory behind per machine.
	rm -rf "/run/systemd/nspawn/propagate/$ST_MACHINE_PREFIX-$name"
}

# st_cleanup: every container, then the helper processes started by steps
# (pid files), then lab_cleanup (processes, namespaces, temp dir).
st_cleanup() {
	local rc=$? name f
	trap - EXIT INT TERM
	set +e # clean up everything, whatever fails
	for name in "${!ST_NSPAWN[@]}"; do st_ct_stop "$name"; done
	for f in "$LAB_DIR"/*.pid; do
		[ ! -f "$f" ] || lab_stop_pid "$(cat "$f")" TERM 15
	done
	for f in "${ST_MOUNTS[@]}"; do
		if mountpoint -q "$f"; then umount "$f" || umount -l "$f"; fi
	done
	(exit "$rc")
	lab_cleanup
}

# --- steps ------------------------------------------------------------------

# st_step ID DESCRIPTION FUNC [ARGS...]: runs FUNC in a subshell with set -e
# (a step ends at its first failed command), then reports one line:
#   PASS ID: DESCRIPTION                   FUNC succeeded
#   FAIL ID: DESCRIPTION                   it failed (its output and the
#                                          journal of vipd follow)
#   XFAIL ID: DESCRIPTION (reason)         it failed and is listed in
#                                          ST_XFAIL_REASON: no failure
#   XPASS ID: ... remove it from ...       it passed although listed: a
#                                          failure, so the list cannot go stale
# Lines the step prints starting with "info:" are shown in every case.
# ST_JOURNAL_CT names the container whose vipd journal a failure shows.
st_step() {
	local id=$1 desc=$2 out=$LAB_DIR/step-$1.out rc t0 took
	shift 2
	t0=$(st_now)
	set +e
	(
		set -euo pipefail
		[ "${VIPD_SYSTEMD_TEST_TRACE:-0}" != 1 ] || set -x
		"$@"
	) >"$out" 2>&1
	rc=$?
	set -e
	took=$(st_secs $(($(st_now) - t0)))s
	local xf=${ST_XFAIL_REASON[$id]:-}
	if [ "$rc" -eq 0 ] && [ -z "$xf" ]; then
		ST_PASS=$((ST_PASS + 1))
		echo "PASS $id: $desc ($took)"
	elif [ "$rc" -eq 0 ]; then
		ST_XPASS=$((ST_XPASS + 1))
		echo "XPASS $id: $desc ($took): remove it from the expected-to-fail list (ST_XFAIL_REASON in packaging/systemd-test/systemd-test.sh)"
	elif [ -n "$xf" ]; then
		ST_XFAIL=$((ST_XFAIL + 1))
		echo "XFAIL $id: $desc ($took) ($xf)"
		{ grep -v '^info:' "$out" || true; } | tail -3 | sed 's/^/      observed: /'
	else
		ST_FAIL=$((ST_FAIL + 1))
		echo "FAIL $id: $desc ($took)"
		{ grep -v '^info:' "$out" || true; } | tail -25 | sed 's/^/      /'
		if [ -n "${ST_JOURNAL_CT:-}" ] && [ -n "${ST_PID1[$ST_JOURNAL_CT]:-}" ]; then
			echo "      journal of vipd in $ST_JOURNAL_CT (last 30 lines):"
			{ CT_TIMEOUT=10 ct "$ST_JOURNAL_CT" journalctl -u vipd --no-pager -o short-precise -n 30 2>&1 || true; } | sed 's/^/        /'
		fi
	fi
	{ grep '^info:' "$out" || true; } | sed 's/^info: */      /'
}

# st_summary: the totals; fails on any FAIL or XPASS.
st_summary() {
	echo "systemd-test: $ST_PASS passed, $ST_FAIL failed, $ST_XFAIL expected failures, $ST_XPASS unexpected passes"
	[ "$ST_FAIL" -eq 0 ] && [ "$ST_XPASS" -eq 0 ]
}

# fail MESSAGE: inside a step, explain and end it.
fail() {
	echo "$*"
	exit 1
}
