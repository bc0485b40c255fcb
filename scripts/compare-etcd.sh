#!/usr/bin/env bash
# xce and etcd side by side on this machine, in interleaved rounds: each round
# starts a fresh three-member etcd and runs etcd's `benchmark` at each client
# count, then `xce bench --local 3` at the same counts. The table at the end
# gives the medians over the rounds.
#
#   scripts/compare-etcd.sh [writes|reads|watch] [rounds]     (default: writes 3)
#
#   writes  etcd `benchmark put` against the leader (8-byte keys over 100,000,
#           256-byte values) vs `xce bench`; clients 1 16 64.
#   reads   etcd `benchmark range KEY --consistency=l` (linearizable) of one
#           key with a 128-byte value vs `xce bench --reads 1.0` (linearizable
#           GetTask of a task another client created); clients 16 64 256.
#   watch   etcd `benchmark watch-latency`: C watchers of one key, one stream
#           each, while one client puts the key WATCH_PUT_RATE times a second
#           (default 100); latency from a put's answer to each watcher's
#           event (0 for an event that comes first). vs `xce bench --watchers C`
#           with XCE_WATCH_ARGS (default `--clients 4 --rate WATCH_PUT_RATE`:
#           tasks created at the same rate, each a new generation to watch;
#           latency from each generation's commit to each watcher's message);
#           watchers 16 64 256. An xce without --watchers
#           runs the etcd half only, and says so.
#
# Environment:
#   ETCD_BIN_DIR  holds `etcd` and etcd's `benchmark`; default
#                 .tools/etcd-v3.7.1, which `make etcd-tools` builds.
#   CLIENTS       client (watch: watcher) counts, e.g. "16 64"
#   DURATION      seconds per run (default 10). xce runs that long; etcd's
#                 runs are counted in requests, so reads first runs a short
#                 warm-up and sizes the run from its rate, and watch puts
#                 WATCH_PUT_RATE*DURATION times. writes keeps its fixed
#                 totals (3,000 / 20,000 / 50,000 puts at 1 / 16 / 64 clients).
#   ETCD_READS_TO all (default: the client spreads reads over the three
#                 members, followers answering through the leader's read
#                 index) or leader (every read to the leader, as xce's go to
#                 its primary).
#   XCE           an xce binary to use instead of building ./cmd/xce.
#
# etcd's members listen on free loopback ports picked per round, their data in
# a temp dir removed at exit. Figures move with the disk's fsync latency and
# with whatever else runs on the machine: compare within a round.
set -euo pipefail

mode=writes
case ${1:-} in
writes | reads | watch) mode=$1; shift ;;
-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [writes|reads|watch] [rounds]" >&2; exit 2; }
duration=${DURATION:-10}
[[ $duration =~ ^[1-9][0-9]*$ ]] || { echo "DURATION is whole seconds, got $duration" >&2; exit 2; }
case $mode in
writes) default_clients="1 16 64" ;;
*) default_clients="16 64 256" ;;
esac
read -r -a clients <<<"${CLIENTS:-$default_clients}"
reads_to=${ETCD_READS_TO:-all}
[[ $reads_to == all || $reads_to == leader ]] || { echo "ETCD_READS_TO is all or leader" >&2; exit 2; }
put_rate=${WATCH_PUT_RATE:-100}
read -r -a xce_watch_args <<<"${XCE_WATCH_ARGS:---clients 4 --rate $put_rate}"

cd "$(dirname "$0")/.."
dir=${ETCD_BIN_DIR:-$PWD/.tools/etcd-v3.7.1}
for b in etcd benchmark; do
	[[ -x $dir/$b ]] || {
		echo "missing $dir/$b: run \`make etcd-tools\`, or set ETCD_BIN_DIR to a directory with etcd and benchmark" >&2
		exit 2
	}
done

work=$(mktemp -d)
pids=()  # etcd members
child="" # the benchmark or xce bench running now
stop_etcd() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
cleanup() {
	if [[ -n $child ]]; then
		kill "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	stop_etcd
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run OUT ERR CMD...: CMD with its stdout in OUT and stderr in ERR, in the
# background so that a signal reaches the trap (which stops it) at once.
run() {
	local out=$1 err=$2 rc=0
	shift 2
	"$@" >"$out" 2>"$err" &
	child=$!
	wait "$child" || rc=$?
	child=""
	return "$rc"
}

cat >"$work/helper.py" <<'EOF'
import base64, json, re, socket, statistics, sys, urllib.request

def etcd_report(path, section=""):
    """rate p50_ms p99_ms from etcd benchmark's report (after SECTION's title)."""
    text = open(path, errors="replace").read().replace("\r", "\n")
    if section:
        i = text.find(section)
        if i < 0:
            sys.exit("no %r in %s" % (section, path))
        text = text[i:]
    num = r"([0-9][0-9.e+-]*)"
    rate = re.search(r"Requests/sec:\s*" + num, text)
    if not rate or "Latency distribution" not in text:
        sys.exit("no summary in %s" % path)
    # The report leaves out percentiles of 0 s (a watch event that came
    # before the put's answer counts as 0).
    pct = {p: float(s) * 1000 for p, s in re.findall(r"^\s*([0-9.]+)% in " + num + " secs", text, re.M)}
    print(rate.group(1), pct.get("50", 0.0), pct.get("99", 0.0))

def find_watch(d, under_watch=False):
    """The first {p99, ...} at or under a key that names watch, latency first:
    {"watch_latency_ms": {"p50": ..., "p99": ...}} or {"watch": {"latency_ms": {...}}}."""
    if not isinstance(d, dict):
        return None
    if under_watch and "p99" in d:
        return d
    items = sorted(d.items(), key=lambda kv: "latency" not in kv[0].lower())
    for k, v in items:
        r = find_watch(v, under_watch or "watch" in k.lower())
        if r:
            return r
    return None

def xce_report(path, mode):
    """rate p50_ms p99_ms from `xce bench --json`."""
    d = json.load(open(path))
    if mode == "watch":
        w = find_watch(d)
        if not w:
            sys.exit("no watch latency (a key naming watch with p50/p99) in %s" % path)
        print("nan", w.get("p50", float("nan")), w["p99"])
    elif mode == "reads" and "reads_per_sec" in d:
        print(d["reads_per_sec"], d["read_latency_ms"]["p50"], d["read_latency_ms"]["p99"])
    else:
        print(d["ops_per_sec"], d["latency_ms"]["p50"], d["latency_ms"]["p99"])

def call(endpoint, path, body):
    req = urllib.request.Request("http://%s%s" % (endpoint, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2) as r:
        return json.load(r)

def leader(*endpoints):
    """The client endpoint of the member that leads, through etcd's JSON gateway."""
    for e in endpoints:
        try:
            s = call(e, "/v3/maintenance/status", {})
        except Exception:
            continue
        if s.get("leader") and s["leader"] == s["header"]["member_id"]:
            print(e)
            return
    sys.exit(1)

def put(endpoint, key, value):
    b64 = lambda s: base64.b64encode(s.encode()).decode()
    call(endpoint, "/v3/kv/put", {"key": b64(key), "value": b64(value)})

def ports(n):
    """n loopback ports free now, held together so that they differ."""
    ss = [socket.socket() for _ in range(int(n))]
    for s in ss:
        s.bind(("127.0.0.1", 0))
    print(*[s.getsockname()[1] for s in ss])
    for s in ss:
        s.close()

def summary(path, mode, etcd_version):
    rows = [l.split("\t") for l in open(path).read().splitlines() if l]
    med = {}
    for who, c, rate, p50, p99 in rows:
        med.setdefault((who, int(c)), []).append((float(rate), float(p50), float(p99)))
    m = lambda who, c, i: statistics.median(r[i] for r in med[(who, c)]) if (who, c) in med else float("nan")
    n = max(len(v) for v in med.values())
    print("\nmedians over %d round(s), etcd %s vs xce" % (n, etcd_version))
    if mode == "watch":
        print("%8s %12s %12s %12s %12s" % ("watchers", "etcd p50 ms", "etcd p99 ms", "xce p50 ms", "xce p99 ms"))
        for c in sorted({c for _, c in med}):
            print("%8d %12.2f %12.2f %12.2f %12.2f" % (c, m("etcd", c, 1), m("etcd", c, 2), m("xce", c, 1), m("xce", c, 2)))
        return
    what = "reads/s" if mode == "reads" else "writes/s"
    print("%8s %14s %12s %14s %12s %9s" % ("clients", "etcd " + what, "etcd p99 ms", "xce " + what, "xce p99 ms", "xce/etcd"))
    for c in sorted({c for _, c in med}):
        e, x = m("etcd", c, 0), m("xce", c, 0)
        print("%8d %14.0f %12.2f %14.0f %12.2f %9.2f" % (c, e, m("etcd", c, 2), x, m("xce", c, 2), x / e if e else float("nan")))

getattr(sys.modules[__name__], sys.argv[1].replace("-", "_"))(*sys.argv[2:])
EOF
helper() { python3 "$work/helper.py" "$@"; }

if [[ -n ${XCE:-} ]]; then
	xce=$XCE
else
	xce=$work/xce
	go build -o "$xce" ./cmd/xce
fi
xce_watch=1
if [[ $mode == watch ]] && ! "$xce" bench --help 2>&1 | grep -q -- '--watchers'; then
	xce_watch=0
	echo "note: this xce's bench has no --watchers flag: the watch comparison runs etcd's half only" >&2
fi

endpoints=""
all_endpoints=()
start_etcd() {
	local p cluster="" n
	res=$(helper ports 6)
	read -r -a p <<<"$res"
	all_endpoints=("127.0.0.1:${p[0]}" "127.0.0.1:${p[1]}" "127.0.0.1:${p[2]}")
	endpoints=$(IFS=,; echo "${all_endpoints[*]}")
	for n in 1 2 3; do cluster+=${cluster:+,}m$n=http://127.0.0.1:${p[n+2]}; done
	rm -rf "$work"/data-*
	for n in 1 2 3; do
		"$dir/etcd" --name "m$n" --data-dir "$work/data-$n" \
			--listen-client-urls "http://127.0.0.1:${p[n-1]}" --advertise-client-urls "http://127.0.0.1:${p[n-1]}" \
			--listen-peer-urls "http://127.0.0.1:${p[n+2]}" --initial-advertise-peer-urls "http://127.0.0.1:${p[n+2]}" \
			--initial-cluster "$cluster" --initial-cluster-state new --log-outputs "$work/m$n.log" \
			>/dev/null 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 150); do
		if leader=$(helper leader "${all_endpoints[@]}" 2>/dev/null) &&
			helper put "$leader" xce-compare-ready 1 2>/dev/null; then
			return
		fi
		sleep 0.2
	done
	echo "etcd did not start within 30 s; its logs:" >&2
	tail -n 5 "$work"/m*.log >&2
	exit 1
}

# bench OUT ENDPOINTS ARGS...: one run of etcd's benchmark tool.
bench() {
	local out=$1 ep=$2
	shift 2
	run "$out" "$out" "$dir/benchmark" --precise --endpoints="$ep" "$@" || {
		echo "etcd benchmark failed ($*):" >&2
		tail -n 20 "$out" >&2
		exit 1
	}
}

record() { # WHO CLIENTS RATE P50 P99
	printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$work/results.tsv"
	printf '%-6s %-5s %8s %12.0f %10.2f %10.2f\n' "$round" "$1" "$2" "$3" "$4" "$5"
}

etcd_run() { # CLIENTS
	local c=$1 out=$work/etcd.out total rate p50 p99 ep res
	ep=$(helper leader "${all_endpoints[@]}")
	case $mode in
	writes)
		case $c in 1) total=3000 ;; 16) total=20000 ;; 64) total=50000 ;; *) total=$((c * 800)) ;; esac
		bench "$out" "$ep" --conns="$c" --clients="$c" \
			put --key-size=8 --val-size=256 --sequential-keys --key-space-size=100000 --total="$total"
		res=$(helper etcd-report "$out")
		read -r rate p50 p99 <<<"$res"
		;;
	reads)
		[[ $reads_to == all ]] && ep=$endpoints
		total=$((c * 20 > 2000 ? c * 20 : 2000))
		bench "$out" "$ep" --conns="$c" --clients="$c" range xce-compare-read --consistency=l --total="$total"
		res=$(helper etcd-report "$out")
		read -r rate _ <<<"$res"
		total=$(python3 -c 'import sys; r, d, c = map(float, sys.argv[1:]); print(int(max(r * d, c * 10)))' "$rate" "$duration" "$c")
		bench "$out" "$ep" --conns="$c" --clients="$c" range xce-compare-read --consistency=l --total="$total"
		res=$(helper etcd-report "$out")
		read -r rate p50 p99 <<<"$res"
		;;
	watch)
		bench "$out" "$endpoints" --conns="$c" --clients="$c" watch-latency --streams="$c" --watchers-per-stream=1 \
			--put-rate="$put_rate" --put-total=$((put_rate * duration))
		res=$(helper etcd-report "$out" "Watch events summary")
		read -r rate p50 p99 <<<"$res"
		rate=nan
		;;
	esac
	record etcd "$c" "$rate" "$p50" "$p99"
}

xce_run() { # CLIENTS
	local c=$1 args=() rate p50 p99 res
	case $mode in
	writes) args=(--clients "$c") ;;
	reads) args=(--clients "$c" --reads 1.0) ;;
	watch) args=(--watchers "$c" "${xce_watch_args[@]}") ;;
	esac
	if ! run "$work/xce.json" "$work/xce.err" "$xce" bench --local 3 "${args[@]}" --duration "${duration}s" --json; then
		echo "xce bench ${args[*]} failed:" >&2
		tail -n 20 "$work/xce.err" >&2
		exit 1
	fi
	res=$(helper xce-report "$work/xce.json" "$mode")
	read -r rate p50 p99 <<<"$res"
	record xce "$c" "$rate" "$p50" "$p99"
}

case $mode in
writes) unit=writes/s ;; reads) unit=reads/s ;; watch) unit=- ;;
esac
version=$("$dir/etcd" --version | sed -n 's/^etcd Version: //p')
echo "$mode: etcd $version ($dir) vs xce, ${duration}s runs" >&2
if [[ $mode == reads ]]; then
	case $reads_to in
	all) echo "etcd's reads spread over its three members" >&2 ;;
	leader) echo "etcd's reads all go to its leader" >&2 ;;
	esac
fi
printf '%-6s %-5s %8s %12s %10s %10s\n' round who clients "$unit" p50_ms p99_ms
for round in $(seq "$rounds"); do
	start_etcd
	if [[ $mode == reads ]]; then
		leader=$(helper leader "${all_endpoints[@]}")
		helper put "$leader" xce-compare-read "$(printf 'v%.0s' {1..128})"
	fi
	for c in "${clients[@]}"; do etcd_run "$c"; done
	stop_etcd
	if [[ $mode != watch || $xce_watch == 1 ]]; then
		for c in "${clients[@]}"; do xce_run "$c"; done
	fi
done
helper summary "$work/results.tsv" "$mode" "$version"
