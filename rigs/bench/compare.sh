#!/usr/bin/env bash
# Runs the Rust benchmark (rigs/examples/bench.rs) and its Curator counterpart (rigs/bench/CuratorBench.java,
# Apache Curator 5.4 from Debian's jars) back to back against ONE ZooKeeper, and prints every
# figure side by side with the ratio rust/curator.
#
#   rigs/bench/compare.sh                        the default workloads (below)
#   rigs/bench/compare.sh "handover 5 20" ...    these workloads instead, each on both sides
#   rigs/bench/compare.sh "idle 1" "idle 1000"   (`idle N [T]`: N leading latches on one session of
#                                           timeout T s, default 10: the server's packets/s)
#   BENCH_ROUNDS=5 rigs/bench/compare.sh ...     rounds per workload and side (default 3)
#   rigs/bench/compare.sh "fleet 2000"           (`fleet N [T]`: N sessions in one election on the
#                                           followers of a three-server ensemble: the quorum
#                                           leader's requests/s)
#
# The ZooKeeper is the Rust bench's embedded server (`bench server`: standalone, tickTime 500,
# fsync on), started once and stopped at the end; `fleet` workloads run on a three-server
# ensemble (`bench cluster`, tickTime 2 s), started before the first of them. Each workload runs
# BENCH_ROUNDS times on each side, the sides alternating. After them the Rust bench's `floor`
# workload measures what the server alone needs for a handover's requests and for a lock's,
# printed under the table with each side's figure over its floor. A run that fails, or takes
# longer than $BENCH_TIMEOUT seconds (default 900), counts no value for its round (a row with
# none shows `-`) and the script carries on (Curator may not cope with 1,000 clients on a small
# machine).
# Progress and each side's diagnostics go to stderr; the table goes to stdout.
#
# Needs: cargo, a JDK (java and javac; $JAVA_HOME/bin first, else PATH) and the jars listed in
# rigs/java/curator-jars.txt in $CURATOR_JAR_DIR (default /usr/share/java).
set -euo pipefail
cd "$(dirname "$0")/../.." # the workspace root

install_hint="sudo apt-get install -y zookeeper libcurator-recipes-java default-jdk-headless"
die() {
    printf 'compare.sh: %s\n' "$*" >&2
    exit 1
}

if (($# > 0)); then
    workloads=("$@")
else
    workloads=(
        "handover 20 200"
        "handover 200 200"
        "handover 1000 200"
        "join 200"
        "lock 1 10"
        "lock 4 10"
        "lock 16 10"
        "many 1000"
        "many 10000"
        "idle 1"
        "idle 100"
        "idle 1000"
        "idle 10000"
        "fleet 100"
        "fleet 1000"
    )
fi
timeout_s=${BENCH_TIMEOUT:-900}
rounds=${BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a whole number >= 1, got '$rounds'"
# A ratio whose rounds spread wider than this (percent either side of the median) is marked.
noisy_pct=15

# ---- Java and the Curator jars ---------------------------------------------------------------
find_tool() {
    if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/$1" ]]; then
        printf '%s\n' "$JAVA_HOME/bin/$1"
    else
        command -v "$1" || true
    fi
}
java=$(find_tool java)
javac=$(find_tool javac)
jar_dir=${CURATOR_JAR_DIR:-/usr/share/java}
missing=()
[[ -n "$java" ]] || missing+=("java")
[[ -n "$javac" ]] || missing+=("javac")
classpath=""
while read -r jar; do
    [[ -z "$jar" || "$jar" == \#* ]] && continue
    if [[ -f "$jar_dir/$jar" ]]; then
        classpath+="${classpath:+:}$jar_dir/$jar"
    else
        missing+=("$jar_dir/$jar")
    fi
done <rigs/java/curator-jars.txt
if ((${#missing[@]})); then
    die "the Curator side needs a JDK and Apache Curator's jars; missing: ${missing[*]}; install them with \`$install_hint\` (or set JAVA_HOME / CURATOR_JAR_DIR)"
fi

# ---- build both sides ------------------------------------------------------------------------
target_dir=${CARGO_TARGET_DIR:-target}
classes="$target_dir/curator-bench"
echo "compare.sh: compiling rigs/bench/CuratorBench.java into $classes" >&2
rm -rf "$classes"
mkdir -p "$classes"
"$javac" -encoding UTF-8 -Xlint:all,-path -d "$classes" -cp "$classpath" rigs/bench/CuratorBench.java
echo "compare.sh: building the Rust bench (release)" >&2
cargo build --release --example bench >&2
bench="$target_dir/release/examples/bench"
[[ -x "$bench" ]] || die "no $bench after the build"

# ---- one ZooKeeper ---------------------------------------------------------------------------
coproc SERVER { exec "$bench" server; }
server_in=${SERVER[1]}
server_pid=$SERVER_PID
stop_server() {
    exec {server_in}>&- 2>/dev/null || true # EOF on its stdin: it stops and cleans up
    wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT
line=""
read -r -t 120 line <&"${SERVER[0]}" || true
[[ "$line" == connect\ * ]] || die "the bench server did not start (it printed '${line}'); is ZooKeeper installed? ($install_hint)"
hosts=${line#connect }
echo "compare.sh: ZooKeeper at $hosts" >&2

zk_version() {
    local host=${hosts%%,*} port
    port=${host##*:}
    host=${host%:*}
    exec 3<>"/dev/tcp/$host/$port" || return 0
    printf mntr >&3
    awk -F'\t' '$1 == "zk_version" { split($2, v, "-"); print v[1] }' <&3
    exec 3<&-
}

# ---- the ensemble of the fleet workloads, started when the first one runs ---------------------
cluster_hosts=""
cluster_out=$(mktemp)
start_cluster() {
    [[ -n "$cluster_hosts" ]] && return 0
    # Its stdin is this script's descriptor cluster_in: closing it stops the ensemble.
    exec {cluster_in}> >(exec "$bench" cluster >"$cluster_out")
    cluster_pid=$!
    local waited=0
    until grep -q '^connect ' "$cluster_out" 2>/dev/null; do
        ((waited < 1200)) || die "the bench's ensemble did not start within 120 s"
        kill -0 "$cluster_pid" 2>/dev/null || die "the bench's ensemble exited before it started"
        sleep 0.1
        waited=$((waited + 1))
    done
    cluster_hosts=$(sed -n 's/^connect //p' "$cluster_out" | head -n 1)
    echo "compare.sh: a three-server ensemble at $cluster_hosts" >&2
}
stop_cluster() {
    [[ -n "$cluster_hosts" ]] || return 0
    exec {cluster_in}>&- 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
    rm -f "$cluster_out"
}
trap 'stop_cluster; stop_server' EXIT

# ---- run -------------------------------------------------------------------------------------
declare -A value unit
run_side() { # side workload...
    local side=$1 out
    shift
    echo "compare.sh: [$side] $*" >&2
    local cmd on=$hosts
    if [[ $1 == fleet ]]; then
        start_cluster
        on=$cluster_hosts
    fi
    if [[ $side == rust ]]; then
        cmd=("$bench" --connect "$on" "$@")
    else
        cmd=("$java" -cp "$classes:$classpath" CuratorBench --connect "$on" "$@")
    fi
    if ! out=$(timeout "$timeout_s" "${cmd[@]}"); then
        echo "compare.sh: [$side] $* failed or timed out after ${timeout_s}s" >&2
    fi
    local name val u
    while read -r name val u; do
        [[ -n "$name" ]] || continue
        # One value per round, in round order.
        value["$*|$name|$side"]+="${value["$*|$name|$side"]:+ }$val"
        unit["$*|$name"]=$u
    done <<<"$out"
}

# Stall time (microseconds) from /proc/pressure: `full` for I/O (every task waited on the disk),
# `some` for CPU (a task waited for a core). The table's header says how loaded the machine was.
stall_us() { # io|cpu some|full
    awk -v kind="$2" '$1 == kind { sub("total=", "", $5); print $5 }' "/proc/pressure/$1" 2>/dev/null || echo 0
}
io0=$(stall_us io full)
cpu0=$(stall_us cpu some)
started=$(date +%s)
# Each workload runs $rounds times on each side, the sides alternating (Rust first in odd
# rounds, Curator first in even ones), so that a machine that gets busier or quieter during a
# workload weighs on both sides alike.
for w in "${workloads[@]}"; do
    read -ra args <<<"$w"
    for ((round = 1; round <= rounds; round++)); do
        if ((round % 2)); then
            run_side rust "${args[@]}"
            run_side curator "${args[@]}"
        else
            run_side curator "${args[@]}"
            run_side rust "${args[@]}"
        fi
    done
done
# The server's own floor for a handover (its two requests on the raw client, same pacing): what
# neither client can go below on this server.
floor_workload="floor 200"
for ((round = 1; round <= rounds; round++)); do
    run_side rust $floor_workload
done

# ---- table -----------------------------------------------------------------------------------
figures_of() {
    case $1 in
        handover) echo handover_ms_p50 handover_ms_p99 requests_per_handover_p50 ;;
        join) echo join_all_ms join_requests ;;
        lock) echo lock_ops_per_s ;;
        many) echo many_start_ms rss_kb_per_latch ;;
        idle) echo idle_packets_per_s ;;
        fleet) echo leader_requests_per_s leader_requests_per_s_per_session follower_packets_per_s rss_kb_per_session ;;
    esac
}
better_of() {
    case $1 in
        lock_ops_per_s) echo higher ;;
        *) echo lower ;;
    esac
}

elapsed=$(($(date +%s) - started))
pressure() { # stall before, stall after: percent of the run
    awk -v a="$1" -v b="$2" -v t="$elapsed" 'BEGIN { if (t > 0 && b >= a) printf "%.0f%%", (b - a) / 1e4 / t; else print "?" }'
}
printf '\n%s, %s cores, %s, ZooKeeper %s standalone (tickTime 500, fsync on), %ss\n' \
    "$(date -u +%Y-%m-%d)" "$(nproc)" "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")" \
    "$(zk_version || true)" "$elapsed"
printf 'machine load during the run: every task stalled on I/O %s of the time, some task waiting for a core %s\n' \
    "$(pressure "$io0" "$(stall_us io full)")" "$(pressure "$cpu0" "$(stall_us cpu some)")"
# The median of a space-separated list of numbers ("-" when empty).
median() {
    awk -v list="$1" 'BEGIN {
        n = split(list, v, " "); if (n == 0) { print "-"; exit }
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
        m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        print m + 0 }'
}
# "median-ratio spread": the per-round ratios rust/curator (rounds paired in order), their
# median, and how far the farthest lies from it, in percent ("-" without a pair).
ratio_spread() { # rust-values curator-values
    awk -v a="$1" -v b="$2" 'BEGIN {
        n = split(a, r, " "); m = split(b, c, " "); if (m < n) n = m
        k = 0; for (i = 1; i <= n; i++) if (c[i] + 0 != 0) q[++k] = r[i] / c[i]
        if (k == 0) { print "- -"; exit }
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
        med = (k % 2) ? q[(k + 1) / 2] : (q[k / 2] + q[k / 2 + 1]) / 2
        far = 0; for (i = 1; i <= k; i++) { d = q[i] - med; if (d < 0) d = -d; if (d > far) far = d }
        if (k < 2) printf "%.2f -\n", med; else printf "%.2f %.0f\n", med, (med > 0 ? 100 * far / med : 0) }'
}
printf 'rounds per side: %s, the sides alternating; each figure is the median of its rounds, rust/curator\n' "$rounds"
printf "the median of the rounds' ratios, with the farthest round's distance from it (wider than +-%s%%: noisy)\n" "$noisy_pct"
printf '\n| %-17s | %-36s | %10s | %10s | %12s | %-13s | %-6s |\n' workload figure rust curator rust/curator spread better
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..19})" "$(printf -- '-%.0s' {1..38})" \
    "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..14})" \
    "$(printf -- '-%.0s' {1..15})" "$(printf -- '-%.0s' {1..8})"
for w in "${workloads[@]}"; do
    read -ra args <<<"$w"
    for f in $(figures_of "${args[0]}"); do
        rv=${value["$w|$f|rust"]:-}
        cv=${value["$w|$f|curator"]:-}
        u=${unit["$w|$f"]:-}
        read -r ratio spread <<<"$(ratio_spread "$rv" "$cv")"
        case $spread in
            -) shown=- ;;
            *) if ((spread > noisy_pct)); then shown="+-$spread% noisy"; else shown="+-$spread%"; fi ;;
        esac
        printf '| %-17s | %-36s | %10s | %10s | %12s | %-13s | %-6s |\n' "$w" "$f ($u)" "$(median "$rv")" \
            "$(median "$cv")" "$ratio" "$shown" "$(better_of "$f")"
    done
done
fv() { median "${value["$floor_workload|$1|rust"]:-}"; }
printf '\nthe server floors (%s, raw client, no recipe):\n' "$floor_workload"
printf -- '- a handover in which the successor claims on the event (one fsynced delete, its event): p50 %s ms, p99 %s ms\n' \
    "$(fv floor_handover_ms_p50)" "$(fv floor_handover_ms_p99)"
printf -- '- a handover in which the successor lists first (delete, event, listing): p50 %s ms, p99 %s ms\n' \
    "$(fv floor_listed_handover_ms_p50)" "$(fv floor_listed_handover_ms_p99)"
printf -- '- the same with 200 and 1,000 candidates in the listed line: p50 %s ms and %s ms\n' \
    "$(fv floor_listed_handover200_ms_p50)" "$(fv floor_listed_handover1000_ms_p50)"
printf -- '- a lock cycle (create + delete, both fsynced): %s ops/s with 1 client, %s ops/s with 4\n' \
    "$(fv floor_lock_ops_per_s)" "$(fv floor_lock4_ops_per_s)"
printf -- '- a contended lock (each hand-over: fsynced delete, event, listing when it must list): %s ops/s with 4 clients, %s with 16\n' \
    "$(fv floor_contended_lock_ops_per_s)" "$(fv floor_contended_lock16_ops_per_s)"

# Each side's figure over the floor it cannot go below.
ratio() { # a b
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}
printf '\n| %-17s | %-52s | %10s | %10s |\n' workload "figure over the server's floor" rust curator
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..19})" "$(printf -- '-%.0s' {1..54})" \
    "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..12})"
for w in "${workloads[@]}"; do
    read -ra args <<<"$w"
    case ${args[0]} in
        # A rolling handover's successor lists on the event (recipes/leader-latch.md, "Requests
        # per handover"): its floor is the listed one.
        # Its listing is as long as the line: 200 and 1,000 candidates have floors of their own.
        handover)
            f=handover_ms_p50
            case ${args[1]} in
                200 | 1000) floor=floor_listed_handover${args[1]}_ms_p50 ;;
                *) floor=floor_listed_handover_ms_p50 ;;
            esac
            ;;
        # One client's mutex is bounded by its own create+delete; clients that queue, by the
        # contended lock's hand-over chain (the 4-client create+delete figure, parallel with
        # fsyncs batched, is printed above for scale only).
        lock)
            f=lock_ops_per_s
            case ${args[1]} in
                1) floor=floor_lock_ops_per_s ;;
                4) floor=floor_contended_lock_ops_per_s ;;
                16) floor=floor_contended_lock16_ops_per_s ;;
                *) continue ;;
            esac
            ;;
        *) continue ;;
    esac
    printf '| %-17s | %-52s | %10s | %10s |\n' "$w" "$f / $floor" \
        "$(ratio "$(median "${value["$w|$f|rust"]:-}")" "$(fv $floor)")" \
        "$(ratio "$(median "${value["$w|$f|curator"]:-}")" "$(fv $floor)")"
done
