#!/usr/bin/env bash
# How long a new member takes to catch up and be promoted, and how big a
# backup is, with N tasks in the registry.
#
#   scripts/joinbench.sh [tasks...]      (default: 100000 1000000)
#
# For each size it starts a fresh three-node `xce dev` cluster (no Kafka, no
# workers) on ports 7301-7303/7401-7403, fills it with `xce bench --ops`,
# starts a fourth node with `join:` and an empty data dir, and polls
# `xce members list` until the PRIMARY reports it healthy (caught up: within
# autopilot.max_lag entries and in contact) and then a voter (after
# autopilot.stabilization_time, 10 s by default). It then saves a backup with
# `xce snapshot save` and prints its size per task.
set -euo pipefail

sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(100000 1000000)
cd "$(dirname "$0")/.."
work=$(mktemp -d)
xce=$work/xce
go build -o "$xce" ./cmd/xce
addrs=127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303
dev=""
n4=""
cleanup() {
	[[ -n $n4 ]] && kill "$n4" 2>/dev/null && wait "$n4" 2>/dev/null
	[[ -n $dev ]] && kill "$dev" 2>/dev/null && wait "$dev" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

for n in "${sizes[@]}"; do
	dir=$work/dev-$n
	"$xce" dev --no-kafka --workers 0 --dir "$dir" --base-port 7300 --fresh >"$work/dev.log" 2>&1 &
	dev=$!
	until "$xce" status --addr 127.0.0.1:7301 --json 2>/dev/null | grep -q '"PRIMARY"\|"STANDBY"'; do sleep 0.2; done
	"$xce" bench --addr "$addrs" --clients 64 --ops "$n" --duration 1h --json >"$work/fill.json" 2>>"$work/fill.log"
	cat >"$dir/n4.yaml" <<EOF
node_id: n4
cluster_id: dev
data_dir: $dir/data/n4
client_addr: 127.0.0.1:7304
peer_addr: 127.0.0.1:7404
peers:
  - {id: n4, peer_addr: 127.0.0.1:7404, client_addr: 127.0.0.1:7304}
join: [127.0.0.1:7301, 127.0.0.1:7302, 127.0.0.1:7303]
log: {format: json}
EOF
	t0=$(now)
	"$xce" server --config "$dir/n4.yaml" >"$dir/n4.log" 2>&1 &
	n4=$!
	caught="" promoted=""
	while [[ -z $promoted ]]; do
		st=$("$xce" members list --addr "$addrs" --json 2>/dev/null | python3 -c '
import json, sys
for m in json.load(sys.stdin)["members"]:
    if m["id"] == "n4":
        print(m["healthy"], m["voter"])' || true)
		case $st in
		"True True") [[ -n $caught ]] || caught=$(since "$t0"); promoted=$(since "$t0") ;;
		"True False") [[ -n $caught ]] || caught=$(since "$t0") ;;
		esac
		sleep 0.1
	done
	"$xce" snapshot save "$work/backup" --addr "$addrs" >/dev/null
	bytes=$(stat -c %s "$work/backup")
	echo "tasks=$n caught_up_s=$caught promoted_s=$promoted backup_bytes=$bytes bytes_per_task=$((bytes / n))"
	kill "$n4" && wait "$n4" 2>/dev/null || true
	n4=""
	kill "$dev" && wait "$dev" 2>/dev/null || true
	dev=""
done
