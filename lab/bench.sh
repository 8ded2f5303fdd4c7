#!/usr/bin/env bash
# make bench: measure vipd in network-namespace labs, side by side with
# keepalived, and write docs/benchmarks.md and docs/benchmarks.svg from the
# measurements (nothing in them is edited by hand).
#
#   RUNS=5          trials per failover scenario, per BGP scenario, READY samples
#   SCENARIOS=all   failover scenarios: handoff,crash,linkdown,partition,health,addrdel,ifrecreate,
#                   membership cuts (fencing): membercut,membercut-in,membercut-out, and stress
#   SYSTEMS=all     vipd,keepalived
#   PARTS=all       failover,bgp,footprint,scale,coldstart,upgrade,k8s (gobench: the agent and conns Go benchmarks;
#                   kubeclient: lab/kubeclient.sh, vipd with and without a Kubernetes client;
#                   upgrade: lab/upgrade's TestRollingUpgrade, one go test per run, RUNS runs, each a new
#                   lab rolled from the previous release, built from git, to this tree, restarted in place
#                   and rolled back: about 45 s a run; needs a clone that has the previous release)
#   K8S_RUNS=3      trials per Kubernetes clients scenario (part k8s: real kube-apiserver, etcd, client-go)
#   K8S_SCENARIOS=all  handoff,sigterm,rolling,crash,nodedown,linkdown,partition,unhealthy
#   BENCH_DOCS=docs where the report goes (e.g. /tmp for a quick look)
#   BENCH_LOGS=DIR  keep a copy of every lab's daemon logs under DIR
#   VIPD_BENCH_EXTRA=TOML  appended to vipd's configuration in the failover labs (a [hooks]
#                   section: docs/benchmarks.md, "Hooks and the failover time")
#
# Needs root, go, ip, keepalived, bird2 (bird, birdc), curl. Uses bin/vipd and
# bin/vipctl (make build) or VIPD_BIN. Every lab lives in namespaces it creates
# (prefix vt-<pid>-) and is removed at the end, Ctrl-C included.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=lab/lib.sh
. lab/lib.sh
lab_go_toolchain "$ROOT"

die() { echo "bench: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (network namespaces)"
for p in go ip keepalived bird birdc curl; do
	command -v "$p" >/dev/null || die "$p not installed"
done
BIN=${VIPD_BIN:-$ROOT/bin}
[[ -x $BIN/vipd && -x $BIN/vipctl ]] || die "$BIN/vipd or vipctl missing: run make build"

RUNS=${RUNS:-5}
K8S_RUNS=${K8S_RUNS:-3}
K8S_SCENARIOS=${K8S_SCENARIOS:-all}
SCENARIOS=${SCENARIOS:-all}
SYSTEMS=${SYSTEMS:-all}
PARTS=${PARTS:-all}
DOCS=${BENCH_DOCS:-$ROOT/docs}

# The command line as the report shows it: make bench with the knobs that
# differ from the defaults.
CMD="make bench"
for k in RUNS SCENARIOS SYSTEMS PARTS K8S_RUNS K8S_SCENARIOS; do
	case "$k=${!k}" in
	RUNS=5 | SCENARIOS=all | SYSTEMS=all | PARTS=all | K8S_RUNS=3 | K8S_SCENARIOS=all) ;;
	*) CMD="$k=${!k} $CMD" ;;
	esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vipd-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

CGO_ENABLED=0 go build -o "$WORK/vipbench" ./lab/bench/cmd/vipbench

: >"$WORK/gobench.txt"
if [[ $PARTS == all || ,$PARTS, == *,gobench,* ]]; then
	echo "bench: go test -run '^\$' -bench . -benchmem ./agent/" >&2
	go test -run '^$' -bench . -benchmem ./agent/ | tee "$WORK/gobench.txt" >&2
	# conns lists, destroys and pokes real connections in namespaces of its own.
	echo "bench: VIPD_NETNS_TESTS=1 go test -run '^\$' -bench . -benchmem ./conns/" >&2
	VIPD_NETNS_TESTS=1 go test -run '^$' -bench . -benchmem ./conns/ | tee -a "$WORK/gobench.txt" >&2
fi
KUBECLIENT=()
if [[ $PARTS == all || ,$PARTS, == *,kubeclient,* ]]; then
	echo "bench: lab/kubeclient.sh" >&2
	OUT=$WORK/kubeclient.json ROUNDS=$RUNS "$ROOT/lab/kubeclient.sh"
	KUBECLIENT=(-kubeclient "$WORK/kubeclient.json")
fi
# gobench and kubeclient are not vipbench parts.
RUN_PARTS=$(echo "$PARTS" | tr ',' '\n' | grep -vx 'gobench\|kubeclient' | paste -sd, -)

if [[ -n $RUN_PARTS ]]; then
	VIPD_NETNS_TESTS=1 VIPD_BIN=$BIN "$WORK/vipbench" run -runs "$RUNS" -scenarios "$SCENARIOS" \
		-systems "$SYSTEMS" -parts "$RUN_PARTS" -k8s-runs "$K8S_RUNS" -k8s-scenarios "$K8S_SCENARIOS" \
		-bin "$BIN" -logs "${BENCH_LOGS:-}" -out "$WORK/results.json"
else
	echo '{"Runs": '"$RUNS"'}' >"$WORK/results.json"
fi
mkdir -p "$DOCS"
"$WORK/vipbench" report -results "$WORK/results.json" -gobench "$WORK/gobench.txt" "${KUBECLIENT[@]}" -command "$CMD" \
	-md "$DOCS/benchmarks.md" -svg "$DOCS/benchmarks.svg"
cp "$WORK/results.json" "$DOCS/benchmarks.json"
echo "bench: wrote $DOCS/benchmarks.md, benchmarks.svg and benchmarks.json (raw results)" >&2
