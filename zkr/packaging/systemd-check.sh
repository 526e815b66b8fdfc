#!/usr/bin/env bash
# zkr's systemd units started by a real systemd: check.sh verifies the units with
# `systemd-analyze verify` and runs their command line by hand, this starts them with systemd as
# PID 1 in a container, as an operator's host would.
#
# It builds zkr's .deb (build-deb.sh, from the binary given), builds (once per set of inputs)
# the image zookeeper-recipes/zkr-systemd-test: the image zookeeper-recipes/zookeeper:3.8 (a
# Debian bookworm root file system with Debian's ZooKeeper, built by docker/zookeeper/build.sh)
# plus Debian's `systemd` from the mirror, systemd as its command. It starts it (no --privileged
# on cgroup v1: the host's cgroup hierarchy read-only and a tmpfs on /run are what systemd needs;
# on cgroup v2, untried here, --privileged with a private cgroup namespace), and
# in it installs the .deb, starts ZooKeeper (a plain process, as the image runs it), and:
#   zkr-cron@demo  from /etc/zkr/cron/demo.env: a slot every second that appends its slot and
#                  token to a file; two slots recorded; the service runs as user `zkr` and is
#                  active; a `kill -9` of zkr restarts it (Restart=on-failure) and slots go on;
#                  `systemctl stop` while a slot runs (4 s long) drains: the slot's command was
#                  not signalled (KillMode=mixed), finished, its end is in `zkr cron history`, and
#                  the stop took less than TimeoutStopSec;
#   zkr-run@demo   from /etc/zkr/run/demo.env: started, its command runs as `zkr`, stopped: the
#                  command got zkr's SIGTERM and the stop took less than TimeoutStopSec; started
#                  again, `dpkg --remove zkr` stops it (the prerm).
# Each check prints what it measured; every wait is bounded and fails saying what it waited for.
# The container is removed at the end, also on failure (the image is kept: it is the cache).
#
# Usage: zkr/packaging/systemd-check.sh [--binary PATH] [--session-timeout D] [--keep]
#   --binary           the zkr to package [target/debug/zkr]
#   --session-timeout  ZKR_SESSION_TIMEOUT in both env files [10s, the units' default]; a
#                      term that ends otherwise than `closed` fails the check (at 7 s or less
#                      every first term ended `deadline_passed` until the library's heartbeats
#                      kept their grid from a run's first one on: 4s passes since)
#   --keep             leave the container running on failure, to look inside
#                      (docker exec -it NAME bash; remove it with docker rm -f NAME)
# Environment: ZKR_SYSTEMD_IMAGE [zookeeper-recipes/zkr-systemd-test], ZKR_ZOOKEEPER_IMAGE
# [zookeeper-recipes/zookeeper:3.8] (the base; build it with docker/zookeeper/build.sh).
# Needs a Docker engine whose containers reach the Debian mirror (for the image's first build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary="$root/target/debug/zkr" keep=false session_timeout=10s
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=${2:?--binary needs a path}; shift 2 ;;
        --session-timeout) session_timeout=${2:?--session-timeout needs a duration}; shift 2 ;;
        --keep) keep=true; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "systemd-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
image=${ZKR_SYSTEMD_IMAGE:-zookeeper-recipes/zkr-systemd-test}
base=${ZKR_ZOOKEEPER_IMAGE:-zookeeper-recipes/zookeeper:3.8}
label=org.zookeeper-recipes.inputs

started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
step() { echo "systemd-check.sh [$(elapsed)]: $*" >&2; }
fail() { echo "systemd-check.sh: FAILED: $*" >&2; exit 1; }
# Seconds since $1 (an $EPOCHREALTIME), one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

name=zkr-systemd-test-$$
work=$(mktemp -d)
cleanup() {
    code=$?
    if [ "$code" -ne 0 ] && docker inspect "$name" >/dev/null 2>&1; then
        echo "--- journal of the units (last 60 lines)" >&2
        docker exec "$name" journalctl --no-pager -n 60 -u 'zkr-cron@*' -u 'zkr-run@*' 2>/dev/null >&2 || true
        if $keep; then
            echo "--keep: the container $name is left running" >&2
            rm -rf "$work"
            return
        fi
    fi
    docker rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
# A TERM or INT (CI's trap, ^C) ends the script through its EXIT trap too: the container goes.
trap 'exit 143' TERM
trap 'exit 130' INT
inside() { docker exec -i "$name" "$@"; }
# Waits up to $1 seconds (every 0.2 s) for the command after it to succeed; fails with $2.
wait_for() {
    local limit=$1 what=$2 until
    shift 2
    until=$(awk -v a="$EPOCHREALTIME" -v l="$limit" 'BEGIN { printf "%.3f", a + l }')
    until "$@"; do
        awk -v a="$EPOCHREALTIME" -v u="$until" 'BEGIN { exit !(a > u) }' \
            && fail "waited ${limit}s for $what"
        sleep 0.2
    done
}

[ -x "$binary" ] || fail "$binary is not an executable (build zkr first, or give --binary)"
docker image inspect "$base" >/dev/null 2>&1 \
    || fail "no image $base: build it with docker/zookeeper/build.sh"

# --- The package, and the image (built when its inputs changed: the base image and the recipe).
step "building the package from $binary"
# Uncompressed: the package goes no further than the container, and xz would cost 7 s of CPU.
deb=$("$here/build-deb.sh" --binary "$binary" --compress none --out "$work/deb" | tail -n1)

dockerfile="FROM $base
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends systemd procps \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
ENTRYPOINT []
CMD [\"/lib/systemd/systemd\"]"
inputs=$( { docker image inspect -f '{{.Id}}' "$base"; echo "$dockerfile"; } | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null)" = "$inputs" ]; then
    step "image $image is up to date (inputs $inputs)"
else
    step "building $image from $base plus Debian's systemd (inputs $inputs)"
    built=$EPOCHREALTIME
    printf '%s\nLABEL %s=%s\n' "$dockerfile" "$label" "$inputs" \
        | docker build -q -t "$image" - >"$work/build.log" 2>&1 \
        || { cat "$work/build.log" >&2; fail "docker build of $image"; }
    step "built $image in $(since "$built")s"
fi

# --- systemd as PID 1.
# cgroup v1 (this machine's engine): the host's hierarchy read-only is enough, systemd makes its
# own below the container's cgroup. cgroup v2 (not tried here): systemd must write to its
# cgroup, which a non-privileged container mounts read-only, so it gets --privileged and a
# cgroup namespace of its own.
case "$(docker info -f '{{.CgroupVersion}}' 2>/dev/null)" in
    2) cgroup=(--privileged --cgroupns=private) ;;
    *) cgroup=(-v /sys/fs/cgroup:/sys/fs/cgroup:ro) ;;
esac
step "starting $name (systemd as PID 1; ${cgroup[*]})"
booted=$EPOCHREALTIME
docker run -d --name "$name" --tmpfs /run --tmpfs /run/lock "${cgroup[@]}" \
    -e container=docker --stop-signal SIGRTMIN+3 "$image" >/dev/null
running() { [ "$(inside systemctl is-system-running 2>/dev/null || true)" = running ]; }
# `degraded` (a unit failed while booting) is not enough: the units below must not share the
# blame with one that failed.
wait_for 60 "systemd to boot (systemctl is-system-running = running)" running
[ "$(inside cat /proc/1/comm)" = systemd ] || fail "PID 1 in the container is not systemd"
step "systemd $(inside systemctl --version | head -n1 | cut -d' ' -f2) is PID 1 and running after $(since "$booted")s"

docker cp "$deb" "$name:/tmp/zkr.deb"
inside dpkg -i /tmp/zkr.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
inside getent passwd zkr >/dev/null || fail "the postinst created no zkr user"
step "installed $(basename "$deb")"

# ZooKeeper as the image runs it (a plain process under `docker exec`, not a unit).
docker exec -d -e ZOO_4LW_COMMANDS_WHITELIST=ruok,srvr -e ZOO_ADMINSERVER_ENABLED=false \
    -e ZK_SERVER_HEAP=256 "$name" \
    /docker-entrypoint.sh zkServer.sh start-foreground
zk_up() { inside zkServer.sh status >/dev/null 2>&1; }
wait_for 60 "ZooKeeper in the container to serve (zkServer.sh status)" zk_up
step "ZooKeeper serves on 127.0.0.1:2181"

# The demo job's command: its slot and token on a line when it starts and when it ends (with the
# exit status of its `sleep`: a signal to the whole group would end the sleep early, not 0);
# 4 s long while /var/lib/zkr/demo.slow exists. A SIGTERM it gets is written down (the drain
# must not send one). /var/lib/zkr is the units' StateDirectory: PrivateTmp hides /tmp.
inside sh -c 'cat > /usr/local/bin/zkr-demo-slot && chmod 755 /usr/local/bin/zkr-demo-slot' <<'SLOT'
#!/bin/sh
out=/var/lib/zkr/demo.out
trap 'echo "term $ZK_SLOT $ZK_FENCING_TOKEN" >>$out; exit 143' TERM
echo "start $ZK_SLOT $ZK_FENCING_TOKEN $(id -un)" >>$out
rc=0
if [ -e /var/lib/zkr/demo.slow ]; then sleep 4 & wait $!; rc=$?; fi
echo "end $ZK_SLOT $ZK_FENCING_TOKEN $rc" >>$out
SLOT
inside sh -c 'cat > /usr/local/bin/zkr-demo-run && chmod 755 /usr/local/bin/zkr-demo-run' <<'RUN'
#!/bin/sh
out=/var/lib/zkr/run.out
trap 'echo "term $ZK_FENCING_TOKEN" >>$out; exit 143' TERM
echo "start $ZK_FENCING_TOKEN $(id -un)" >>$out
while :; do sleep 1 & wait $!; done
RUN
inside sh -c 'install -d /etc/zkr/cron /etc/zkr/run && cat > /etc/zkr/cron/demo.env' <<ENV
ZK_CONNECT=127.0.0.1:2181
ZKR_CRON="* * * * * *"
ZKR_COMMAND=/usr/local/bin/zkr-demo-slot
ZKR_SESSION_TIMEOUT=$session_timeout
ENV
inside sh -c 'cat > /etc/zkr/run/demo.env' <<ENV
ZK_CONNECT=127.0.0.1:2181
ZKR_COMMAND=/usr/local/bin/zkr-demo-run
ZKR_SESSION_TIMEOUT=$session_timeout
ENV

prop() { inside systemctl show -p "$2" --value "$1"; }
# The seconds of a systemd time span as `systemctl show` prints it (1min 15s, 15s, 500ms).
span() {
    awk '{ t = 0; for (i = 1; i <= NF; i++) { v = $i + 0; u = $i; sub(/^[0-9.]+/, "", u)
        t += v * (u == "min" ? 60 : u == "ms" ? 0.001 : u == "h" ? 3600 : 1) } printf "%.1f", t }' <<<"$1"
}
# Lines of the job's output file starting with $1.
lines() { inside sh -c "cat /var/lib/zkr/demo.out 2>/dev/null | grep -c '^$1 ' || :"; }

# --- zkr-cron@demo.
unit=zkr-cron@demo.service
step "systemctl start $unit"
t=$EPOCHREALTIME
inside systemctl start "$unit" || fail "systemctl start $unit"
# `systemctl stop UNIT` within BOUND seconds; fails unless it stopped cleanly (inactive, success)
# within the unit's TimeoutStopSec. Sets `took` (seconds) and `timeout_stop`, and says WHAT.
stop_unit() {
    local unit=$1 bound=$2 what=$3 t state result status
    timeout_stop=$(span "$(prop "$unit" TimeoutStopUSec)")
    step "systemctl stop $unit $what (TimeoutStopSec=${timeout_stop}s, KillMode=$(prop "$unit" KillMode))"
    t=$EPOCHREALTIME
    inside timeout "$bound" systemctl stop "$unit" || fail "systemctl stop $unit did not return within ${bound}s"
    took=$(since "$t")
    state=$(prop "$unit" ActiveState) result=$(prop "$unit" Result) status=$(prop "$unit" ExecMainStatus)
    step "stopped in ${took}s: ActiveState=$state Result=$result ExecMainStatus=$status"
    awk -v a="$took" -v b="$timeout_stop" 'BEGIN { exit !(a < b) }' \
        || fail "the stop took ${took}s, not less than TimeoutStopSec=${timeout_stop}s"
    [ "$state" = inactive ] && [ "$result" = success ] \
        || fail "after the stop: ActiveState=$state Result=$result (want inactive, success)"
}
two_slots() { [ "$(lines end)" -ge 2 ]; }
wait_for 30 "two slots of $unit recorded in /var/lib/zkr/demo.out" two_slots
step "two slots ended $(since "$t")s after the start:"
inside tail -n 4 /var/lib/zkr/demo.out | sed 's/^/    /' >&2
pid=$(prop "$unit" MainPID)
user=$(inside ps -o user= -p "$pid" | tr -d ' ')
[ "$user" = zkr ] || fail "$unit's main process $pid runs as '$user', not zkr"
inside sh -c '! grep "^start " /var/lib/zkr/demo.out | grep -qv " zkr$"' \
    || fail "a slot's command ran as another user than zkr: $(inside cat /var/lib/zkr/demo.out)"
inside systemctl status --no-pager "$unit" >"$work/status" 2>&1 || fail "systemctl status $unit: $(cat "$work/status")"
grep -q 'Active: active (running)' "$work/status" || fail "systemctl status: $(cat "$work/status")"
step "main process $pid runs as $user, the slots' commands as zkr; systemctl status: $(grep -o 'Active: [^;]*' "$work/status")"

restart=$(prop "$unit" Restart)
if [ "$restart" != no ]; then
    ended=$(lines end)
    step "kill -9 of zkr (main process $pid; Restart=$restart, RestartSec=$(prop "$unit" RestartUSec))"
    t=$EPOCHREALTIME
    inside kill -9 "$pid"
    restarted() {
        [ "$(prop "$unit" NRestarts)" -ge 1 ] && [ "$(prop "$unit" ActiveState)" = active ] \
            && [ "$(prop "$unit" MainPID)" != "$pid" ] && [ "$(prop "$unit" MainPID)" != 0 ]
    }
    wait_for 30 "$unit to be restarted after kill -9 (NRestarts >= 1, active, a new main PID)" restarted
    step "restarted after $(since "$t")s: main process $(prop "$unit" MainPID), NRestarts=$(prop "$unit" NRestarts)"
    # The new zkr takes the job over once the killed one's session has expired (4 s).
    more_slots() { [ "$(lines end)" -ge $((ended + 2)) ]; }
    wait_for 30 "two more slots after the restart" more_slots
    step "two more slots ended $(since "$t")s after the kill"
fi

# The drain: a slot of 4 s runs when the stop comes.
inside touch /var/lib/zkr/demo.slow
slow_running() {
    # The newest start has no end yet, and started after the flag (the file's last line).
    local last
    last=$(inside tail -n 1 /var/lib/zkr/demo.out)
    case "$last" in start\ *) ;; *) return 1 ;; esac
    # A start written after the flag was set sleeps 4 s: wait for a fresh one.
    [ "$(lines start)" -gt "$starts_before" ]
}
starts_before=$(lines start)
wait_for 30 "a 4 s slot to start" slow_running
slot=$(inside tail -n 1 /var/lib/zkr/demo.out | cut -d' ' -f2)
stop_unit "$unit" 120 "while slot $slot runs (4 s)"
# Every term of the unit ended because zkr closed it (the stop), or with the process (kill -9):
# with ZooKeeper healthy throughout, a term that ended otherwise (`deadline_passed`: the lease
# lapsed) would cut a slot off and fail the drain below for a reason that is not the unit's.
ends=$(inside journalctl -u "$unit" -o cat --no-pager | grep '"event":"not_leader"' \
    | grep -o '"reason":"[a-z_]*"' | sort | uniq -c | tr -s ' \n' ' ' || true)
if grep -v '"reason":"closed"' <<<"$(inside journalctl -u "$unit" -o cat --no-pager | grep '"event":"not_leader"')" | grep -q .; then
    fail "a term of $unit ended for another reason than the stop (not_leader:$ends) with ZooKeeper healthy"
fi
step "terms ended:$ends"
inside grep -q "^end $slot [0-9]* 0$" /var/lib/zkr/demo.out \
    || fail "slot $slot's command did not finish during the drain: $(inside cat /var/lib/zkr/demo.out)"
! inside grep -q "^term " /var/lib/zkr/demo.out \
    || fail "a slot's command got SIGTERM (the drain must let it finish): $(inside grep '^term ' /var/lib/zkr/demo.out)"
inside env ZK_CONNECT=127.0.0.1:2181 zkr cron history demo --limit 50 >"$work/history" \
    || fail "zkr cron history demo"
record=$(python3 - "$slot" "$work/history" <<'PY'
import json, sys
slot, path = sys.argv[1], sys.argv[2]
for r in json.load(open(path)):
    if r.get("slot") == slot:
        print(r.get("state"), r.get("ended_ms"), r.get("exit_code"), len(r.get("attempts") or []))
        break
PY
)
read -r rstate rended rcode rattempts <<<"${record:-none none none 0}"
[ "$rstate" = succeeded ] && [ "$rended" != None ] && [ "$rcode" = 0 ] \
    || fail "zkr cron history: slot $slot is '$record' (state ended_ms exit_code attempts), want succeeded with an end"
step "drained: slot $slot's command finished (no SIGTERM reached it), history: $rstate, ended_ms $rended, exit code $rcode"

# --- zkr-run@demo, lighter: start, the command runs, stop.
unit=zkr-run@demo.service
step "systemctl start $unit"
t=$EPOCHREALTIME
inside systemctl start "$unit" || fail "systemctl start $unit"
run_started() { inside grep -q '^start ' /var/lib/zkr/run.out 2>/dev/null; }
wait_for 30 "$unit's command to start (/var/lib/zkr/run.out)" run_started
line=$(inside grep '^start ' /var/lib/zkr/run.out)
[ "${line##* }" = zkr ] || fail "$unit's command runs as '${line##* }', not zkr"
[ "$(inside ps -o user= -p "$(prop "$unit" MainPID)" | tr -d ' ')" = zkr ] || fail "$unit's zkr is not user zkr"
[ "$(prop "$unit" ActiveState)" = active ] || fail "$unit is $(prop "$unit" ActiveState)"
token=${line#start }
step "the command runs $(since "$t")s after the start, as zkr (token ${token%% *}): $unit active"
stop_unit "$unit" 60 "(its command gets zkr's SIGTERM)"
inside grep -q '^term ' /var/lib/zkr/run.out || fail "$unit's command got no SIGTERM from zkr: $(inside cat /var/lib/zkr/run.out)"
inside sh -c '[ -z "$(ps -u zkr -o pid=)" ]' || fail "processes of user zkr left after the stops: $(inside ps -u zkr -o pid,args)"

# --- The package's removal stops running instances (prerm, under a running systemd).
inside systemctl start "$unit" || fail "systemctl start $unit (again)"
wait_for 30 "$unit active again" sh -c "[ \"\$(docker exec $name systemctl show -p ActiveState --value $unit)\" = active ]"
t=$EPOCHREALTIME
inside dpkg --remove zkr >"$work/remove.log" 2>&1 || { cat "$work/remove.log" >&2; fail "dpkg --remove zkr"; }
state=$(prop "$unit" ActiveState)
[ "$state" = inactive ] || fail "after dpkg --remove zkr, $unit is $state (the prerm stops running instances)"
inside sh -c '[ -z "$(ps -u zkr -o pid=)" ]' || fail "processes of user zkr left after the removal: $(inside ps -u zkr -o pid,args)"
inside test ! -e /lib/systemd/system/zkr-run@.service || fail "the unit file is still there after the removal"
step "dpkg --remove zkr stopped the running $unit (prerm) in $(since "$t")s"
# What the check cost the machine's cores: the container's processes (systemd, ZooKeeper, zkr;
# cgroup v1's cpuacct, when the host shows it) and this script's children (build-deb.sh's strip
# and xz, docker's client).
cid=$(docker inspect -f '{{.Id}}' "$name")
usage=$(cat "/sys/fs/cgroup/cpuacct/docker/$cid/cpuacct.usage" 2>/dev/null || echo "")
times >"$work/times"    # not in a pipeline: a subshell's `times` has no children
read -r cuser csys < <(tail -n1 "$work/times" | tr 'ms' '  ' | awk '{ print $1 * 60 + $2, $3 * 60 + $4 }')
step "passed; CPU: ${usage:+$(awk -v n="$usage" 'BEGIN { printf "%.1f", n / 1e9 }')s in the container, }${cuser}s user + ${csys}s system in this script's children"
