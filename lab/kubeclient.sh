#!/usr/bin/env bash
# lab/kubeclient.sh: what a Kubernetes client costs vipd, measured for the
# choice of nodewatch's client (docs/benchmarks.md, "Kubernetes client").
#
# Builds cmd/vipd three ways from a copy of HEAD: without a Node watch;
# with nodewatch (the small REST watch vipd uses); with client-go v0.37.2
# as such a watch would use it (the typed core/v1 client, clientcmd for the
# kubeconfig, an informer with a field selector). In the copy, a file with a
# build tag starts the watch from an init function, so the same daemon runs
# around it. Then, in a network namespace of its own, it runs
# lab/kubeclient/fakeapiserver (one Node, cordoned and uncordoned every
# 2 s) and each vipd in turn with one L2 VIP, idle, and samples its RSS.
#
#   ROUNDS=3   rounds over the three builds
#   SECS=40    seconds sampled per run (after 10 s of start-up)
#   OUT=FILE   write the figures as JSON (vipbench report -kubeclient FILE)
#
# Needs root, go, ip, /usr/bin/time; the Go module proxy (or a warm module
# cache) for client-go. Everything is removed at the end, Ctrl-C included.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lab/lib.sh
. "$ROOT/lab/lib.sh"
lab_go_toolchain "$ROOT"
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-40}
OUT=${OUT:-}
die() { echo "kubeclient: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (a network namespace)"
for p in go ip /usr/bin/time git; do command -v "$p" >/dev/null || die "$p not installed"; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vipd-kubeclient.XXXXXX")
NS=vk-$$
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

SRC=$WORK/src
mkdir -p "$SRC" "$WORK/bin" "$WORK/api"
git -C "$ROOT" archive HEAD | tar -x -C "$SRC"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)

cat >"$SRC/cmd/vipd/kube_nodewatch.go" <<'GO'
//go:build kube_nodewatch

package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/vipd/vipd/nodewatch"
)

func init() {
	go nodewatch.New(nodewatch.Config{Kubeconfigs: []string{os.Getenv("KUBECLIENT_KUBECONFIG")}}).Run(context.Background(),
		func(s nodewatch.State) { slog.Info("node watch", "verdict", s.Verdict.String(), "reachable", s.Reachable) })
}
GO
cat >"$SRC/cmd/vipd/kube_clientgo.go" <<'GO'
//go:build kube_clientgo

package main

import (
	"context"
	"log/slog"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func init() {
	go func() {
		cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECLIENT_KUBECONFIG"))
		if err != nil {
			slog.Error("client-go", "err", err)
			return
		}
		c, err := corev1client.NewForConfig(cfg)
		if err != nil {
			slog.Error("client-go", "err", err)
			return
		}
		lw := cache.NewListWatchFromClient(c.RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", "cp-1"))
		_, ctl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.Node{},
			Handler: cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, n any) {
				slog.Info("node watch", "unschedulable", n.(*corev1.Node).Spec.Unschedulable)
			}}})
		ctl.Run(context.Background().Done())
	}()
}
GO
echo "kubeclient: building vipd three ways from $COMMIT" >&2
(
	cd "$SRC"
	# Only in the copy: vipd's own go.mod never requires client-go.
	GOFLAGS=-mod=mod go get k8s.io/client-go@v0.37.2 k8s.io/api@v0.37.2 k8s.io/apimachinery@v0.37.2 >&2
	go mod tidy >&2
	for v in none kube_nodewatch kube_clientgo; do
		CGO_ENABLED=0 go build -tags "$v" -trimpath -ldflags '-s -w' -o "$WORK/bin/vipd.$v" ./cmd/vipd
		go list -deps -tags "$v" -f '{{with .Module}}{{.Path}}{{end}}' ./cmd/vipd | sort -u | wc -l >"$WORK/bin/modules.$v"
	done
	go build -o "$WORK/bin/fakeapiserver" ./lab/kubeclient/fakeapiserver
)

ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add eth0 type veth peer name eth1
ip -n "$NS" addr add 192.0.2.11/24 dev eth0
ip -n "$NS" link set eth0 up
ip -n "$NS" link set eth1 up
ip netns exec "$NS" "$WORK/bin/fakeapiserver" -dir "$WORK/api" >"$WORK/api.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s $WORK/api/kubelet.conf ]] && break; sleep 0.1; done
[[ -s $WORK/api/kubelet.conf ]] || die "fake apiserver did not start: $(cat "$WORK/api.log")"

declare -A RSS CPU
TCK=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
	for v in none kube_nodewatch kube_clientgo; do
		d=$WORK/run.$v
		rm -rf "$d"
		mkdir -p "$d/state"
		cat >"$d/vipd.toml" <<CFG
node_name = "cp-1"
state_dir = "$d/state"
[api]
socket = "$d/vipd.sock"
[cluster]
bind_address = "192.0.2.11"
failure_detection = "fast"
[[vip]]
name = "apiserver"
address = "192.0.2.10"
mode = "l2"
interface = "eth0"
CFG
		KUBECLIENT_KUBECONFIG=$WORK/api/kubelet.conf ip netns exec "$NS" "$WORK/bin/vipd.$v" --config "$d/vipd.toml" >"$d/log" 2>&1 &
		pid=$!
		PIDS+=($pid)
		sleep 10
		kill -0 "$pid" 2>/dev/null || die "vipd.$v exited: $(tail -5 "$d/log")"
		c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
		max=0
		for _ in $(seq "$SECS"); do
			r=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status")
			((r > max)) && max=$r
			sleep 1
		done
		c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
		cpu=$(awk -v t=$((c1 - c0)) -v hz="$TCK" -v s="$SECS" 'BEGIN{printf "%.2f", 100*t/hz/s}')
		events=$(grep -c "node watch" "$d/log" || true)
		echo "kubeclient: round $round $v: RSS $max KiB, CPU $cpu%, $events node watch log lines" >&2
		[[ $v == none || $events -gt 0 ]] || die "vipd.$v logged no node watch: $(grep -i 'error\|warn' "$d/log" | head -5)"
		RSS[$v]+="$max,"
		CPU[$v]+="$cpu,"
		kill "$pid"
		wait "$pid" 2>/dev/null || true
	done
done

json() {
	local first=1
	local cpu
	cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
	printf '{"Source":"`lab/kubeclient.sh` (ROUNDS=%s SECS=%s) on vipd %s, %s, %s CPUs (%s)","Seconds":%s,"Variants":[' \
		"$ROUNDS" "$SECS" "$COMMIT" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "${cpu:-unknown}" "$SECS"
	for v in none kube_nodewatch kube_clientgo; do
		case $v in
		none) name="no Node watch" ;;
		kube_nodewatch) name="nodewatch (net/http REST watch)" ;;
		kube_clientgo) name="client-go v0.37.2 (typed core/v1, clientcmd, informer)" ;;
		esac
		start=$(/usr/bin/time -f %M "$WORK/bin/vipd.$v" --version 2>&1 >/dev/null | tail -1)
		[[ $first == 1 ]] || printf ','
		first=0
		printf '{"Name":"%s","Bytes":%s,"Modules":%s,"StartRSSKiB":%s,"IdleRSSKiB":[%s],"CPUPercent":[%s]}' \
			"$name" "$(stat -c %s "$WORK/bin/vipd.$v")" "$(cat "$WORK/bin/modules.$v")" "$start" "${RSS[$v]%,}" "${CPU[$v]%,}"
	done
	printf ']}\n'
}
if [[ -n $OUT ]]; then json >"$OUT"; else json; fi
