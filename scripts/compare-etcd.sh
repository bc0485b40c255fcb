#!/usr/bin/env bash
# Interleaved write throughput of xce and etcd on this machine: rounds of
# 1, 16 and 64 clients, etcd first, then `xce bench --local 3`.
#
#   ETCD_BIN_DIR=/path/with/etcd/and/benchmark scripts/compare-etcd.sh [rounds]
#
# ETCD_BIN_DIR holds `etcd` and etcd's `benchmark` tool, built from an etcd
# source tree (e.g. v3.6.14: `go build -o $DIR/etcd ./server` and
# `go build -o $DIR/benchmark ./tools/benchmark`). Each etcd round starts
# three fresh members on 127.0.0.1:23x1-23x3 in a temp dir. Figures vary with
# the disk's fsync latency from minute to minute: compare within a round.
set -euo pipefail

rounds=${1:-3}
dir=${ETCD_BIN_DIR:?set ETCD_BIN_DIR to a directory with etcd and benchmark}
for b in etcd benchmark; do
	[[ -x $dir/$b ]] || { echo "missing $dir/$b" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
xce=$(mktemp -d)/xce
go build -o "$xce" ./cmd/xce
work=$(mktemp -d)
pids=()
stop_etcd() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop_etcd; rm -rf "$work" "$(dirname "$xce")"' EXIT

cluster=m1=http://127.0.0.1:2381,m2=http://127.0.0.1:2382,m3=http://127.0.0.1:2383
endpoints=127.0.0.1:2371,127.0.0.1:2372,127.0.0.1:2373
start_etcd() {
	rm -rf "$work"/data-*
	for n in 1 2 3; do
		"$dir/etcd" --name "m$n" --data-dir "$work/data-$n" \
			--listen-client-urls "http://127.0.0.1:237$n" --advertise-client-urls "http://127.0.0.1:237$n" \
			--listen-peer-urls "http://127.0.0.1:238$n" --initial-advertise-peer-urls "http://127.0.0.1:238$n" \
			--initial-cluster "$cluster" --initial-cluster-state new --log-outputs "$work/m$n.log" \
			>/dev/null 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 100); do
		"$dir/benchmark" --endpoints="$endpoints" --target-leader put --total=1 >/dev/null 2>&1 && return
		sleep 0.2
	done
	echo "etcd did not start; logs in $work" >&2
	exit 1
}

printf '%-6s %-5s %8s %10s %10s\n' round who clients writes/s p99_ms
for r in $(seq "$rounds"); do
	start_etcd
	for spec in "1 3000" "16 20000" "64 50000"; do
		set -- $spec
		out=$("$dir/benchmark" --endpoints="$endpoints" --target-leader --conns="$1" --clients="$1" \
			put --key-size=8 --val-size=256 --sequential-keys --key-space-size=100000 --total="$2" 2>&1 | tr -d '\r')
		rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
		p99=$(awk '/ 99% in/{print $3*1000}' <<<"$out")
		printf '%-6s %-5s %8s %10.0f %10s\n' "$r" etcd "$1" "$rps" "$p99"
	done
	stop_etcd
	for c in 1 16 64; do
		"$xce" bench --local 3 --clients "$c" --duration 10s --json 2>/dev/null |
			python3 -c 'import json,sys; d=json.load(sys.stdin); print("%-6s %-5s %8s %10.0f %10s" % (sys.argv[1], "xce", sys.argv[2], d["ops_per_sec"], d["latency_ms"]["p99"]))' "$r" "$c"
	done
done
