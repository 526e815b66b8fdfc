#!/usr/bin/env bash
# CI check of the Debian package: builds it (debug profile by default, for CI time: the binary
# the tests already built is reused by cargo), installs it with dpkg -i, verifies the installed
# package with lintian when it is installed (errors fail), the installed units with
# systemd-analyze verify, alone and with the example credentials drop-in (any warning fails),
# runs one scheduled job from the installed /usr/bin/zkr as the package's `zkr` user against a
# standalone ZooKeeper started here from Debian's jars (as the test harness starts one, with no
# zkr involved), waits (bounded) for a succeeded slot in `zkr cron history`, scrapes the replica's --metrics-addr,
# stops it with SIGTERM, and purges the package. Needs root (or sudo), java and Debian's
# ZooKeeper jars in /usr/share/java.
#
# Usage: zkr/packaging/check.sh [--profile release|debug] [--binary PATH]
#   --binary packages a zkr already built (e.g. target/debug/zkr) instead of running cargo.
# Exit 0 when every step passed; each step prints its elapsed time on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
profile=debug binary=()
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=${2:?--profile needs release or debug}; shift 2 ;;
        --binary) binary=(--binary "${2:?--binary needs a path}"); shift 2 ;;
        *) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
step() { echo "check.sh [$(elapsed)]: $*" >&2; }
fail() { echo "check.sh: FAILED: $*" >&2; exit 1; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

work=$(mktemp -d)
chmod 755 "$work"
zk_pid="" zkr_pid="" installed=false dropins=()
cleanup() {
    [ "${#dropins[@]}" -eq 0 ] || $sudo rm -rf "${dropins[@]}"
    [ -n "$zkr_pid" ] && kill -KILL "$zkr_pid" 2>/dev/null || true
    [ -n "$zk_pid" ] && kill -KILL "$zk_pid" 2>/dev/null || true
    if $installed; then $sudo dpkg --purge zkr >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
if dpkg-query -W -f='${Status}' zkr 2>/dev/null | grep -q 'install ok installed'; then
    fail "zkr is installed on this machine already: purge it first (dpkg --purge zkr)"
fi

# --- Build and install.
step "building the package (--profile $profile)"
deb=$("$here/build-deb.sh" --profile "$profile" "${binary[@]}" --out "$work/deb" | tail -n1)
dpkg-deb --info "$deb" >/dev/null
contents=$(dpkg-deb --contents "$deb")
grep -q '\./usr/bin/zkr$' <<<"$contents" || fail "no /usr/bin/zkr in $deb"
if command -v lintian >/dev/null; then
    # Errors fail; the two known warnings are explained in build-deb.sh.
    step "lintian"
    lint=$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep -v 'root privileges' || true)
    [ -n "$lint" ] && echo "$lint" >&2
    ! grep -q '^E:' <<<"$lint" || fail "lintian reports errors"
fi
step "installing $(basename "$deb")"
$sudo dpkg -i "$deb" >&2
installed=true
getent passwd zkr >/dev/null || fail "the postinst created no zkr user"
/usr/bin/zkr --version >&2

# --- The installed units, as instances (a template alone is not checked for its commands).
step "systemd-analyze verify"
if ! command -v systemd-analyze >/dev/null; then
    # A machine without systemd (a container): Debian's package brings systemd-analyze.
    step "installing systemd for systemd-analyze"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q systemd >/dev/null \
        || fail "systemd-analyze is missing and apt-get install systemd failed (run as root or with sudo)"
fi
out=$(cd / && systemd-analyze verify zkr-cron@check.service zkr-run@check.service 2>&1) \
    || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
# And with the credentials drop-in the package ships as an example (LoadCredential=).
dropins=()
for unit in zkr-cron@check.service zkr-run@check.service; do
    [ -e "/etc/systemd/system/$unit.d" ] && fail "/etc/systemd/system/$unit.d exists already"
    dropins+=("/etc/systemd/system/$unit.d")
    $sudo install -D -m 644 /usr/share/doc/zkr/examples/credentials.conf \
        "/etc/systemd/system/$unit.d/credentials.conf"
done
out=$(cd / && systemd-analyze verify zkr-cron@check.service zkr-run@check.service 2>&1) \
    || fail "systemd-analyze verify with credentials.conf: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns with credentials.conf: $out"
$sudo rm -rf "${dropins[@]}"
dropins=()

# --- A standalone ZooKeeper from Debian's jars.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/zk/data"
cat > "$work/zk/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$work/zk/data
clientPort=$port
clientPortAddress=127.0.0.1
4lw.commands.whitelist=ruok
admin.enableServer=false
CFG
cp=""
for jar in zookeeper zookeeper-jute slf4j-api slf4j-nop netty-handler netty-common netty-buffer \
    netty-transport netty-codec netty-resolver netty-transport-native-epoll \
    netty-transport-native-unix-common; do
    [ -f "/usr/share/java/$jar.jar" ] || fail "no /usr/share/java/$jar.jar (Debian's ZooKeeper)"
    cp="$cp${cp:+:}/usr/share/java/$jar.jar"
done
step "starting ZooKeeper on 127.0.0.1:$port"
java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true \
    -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zk/zoo.cfg" \
    >"$work/zk/log" 2>&1 &
zk_pid=$!
ruok() { exec 3<>"/dev/tcp/127.0.0.1/$port" && printf ruok >&3 && timeout 2 cat <&3; exec 3<&- 3>&-; }
for _ in $(seq 1 120); do
    [ "$(ruok 2>/dev/null || true)" = imok ] && break
    kill -0 "$zk_pid" 2>/dev/null || fail "ZooKeeper exited: $(tail -n 20 "$work/zk/log")"
    sleep 0.5
done
[ "$(ruok 2>/dev/null || true)" = imok ] || fail "ZooKeeper did not answer ruok within 60s"

# --- One job from the installed binary, as the zkr user, as the unit would run it.
job=/pkg-check-$$-$RANDOM
export ZK_CONNECT=127.0.0.1:$port
step "running $job from /usr/bin/zkr as zkr"
# setpriv execs: $zkr_pid is zkr itself, and its exit code is zkr's (runuser would forward the
# signal and exit 143 itself).
setpriv --reuid=zkr --regid=zkr --init-groups /usr/bin/zkr --session-timeout 4s \
    cron run "$job" --id pkg-check --every 1s --drain 10s --metrics-addr 127.0.0.1:0 \
    -- /bin/sh -c 'echo "slot $ZK_SLOT as $(id -un)"' >"$work/job.out" 2>"$work/job.err" &
zkr_pid=$!
succeeded=false
for _ in $(seq 1 60); do
    history=$(/usr/bin/zkr cron history "$job" 2>/dev/null || true)
    if grep -q '"state":"succeeded"' <<<"$history"; then succeeded=true; break; fi
    kill -0 "$zkr_pid" 2>/dev/null || fail "zkr cron run exited: $(cat "$work/job.err")"
    sleep 0.5
done
$succeeded || fail "no succeeded slot in zkr cron history $job within 30s: $(cat "$work/job.err")"
grep -q "as zkr" "$work/job.out" || fail "the job did not run as zkr: $(cat "$work/job.out")"
addr=$(sed -n 's/.*"event":"metrics_listening".*"addr":"\([^"]*\)".*/\1/p;s/.*"addr":"\([^"]*\)".*"event":"metrics_listening".*/\1/p' "$work/job.err" | head -n1)
[ -n "$addr" ] || fail "no metrics_listening line: $(cat "$work/job.err")"
metrics=$(curl -fsS --max-time 10 "http://$addr/metrics") || fail "GET /metrics on $addr"
# At 1 or more: the job's counters are exported at 0 from the start.
grep -qE '^zookeeper_recipes_job_slots_ended_total\{.*outcome="succeeded".*\} [1-9]' <<<"$metrics" \
    || fail "no succeeded slot in /metrics: $metrics"
curl -fsS --max-time 10 "http://$addr/leader" >/dev/null || fail "/leader is not 200 on the leader"
kill -TERM "$zkr_pid"
code=0
timeout 30 tail --pid="$zkr_pid" -f /dev/null || fail "zkr did not exit within 30s of SIGTERM"
wait "$zkr_pid" || code=$?
zkr_pid=""
case "$code" in 0|143) ;; *) fail "zkr exited $code after SIGTERM: $(cat "$work/job.err")" ;; esac
slots=$(grep -o '"state":"succeeded"' <<<"$(/usr/bin/zkr cron history "$job")" | wc -l)
step "the job ran: $slots succeeded slot(s); zkr exited $code after SIGTERM"

# --- Purge.
kill -TERM "$zk_pid" 2>/dev/null || true
step "purging"
$sudo dpkg --purge zkr >&2
installed=false
[ ! -e /usr/bin/zkr ] || fail "/usr/bin/zkr is still there after the purge"
[ ! -e /lib/systemd/system/zkr-cron@.service ] || fail "the unit is still there after the purge"
step "passed"
