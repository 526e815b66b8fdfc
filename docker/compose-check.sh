#!/usr/bin/env bash
# CI's check of docker-compose.yml: brings the ensemble up (waiting for the health checks), runs
# `cargo run --example demo` against it with ZK_CONNECT, starts the `job` profile's three
# replicas and checks that exactly one runs the job, kills that one (`kill`) and checks that
# another takes over with a higher fencing token in the fenced log, then `down -v` and checks
# that no container, network or volume of the project is left.
#
# Usage: docker/compose-check.sh   (ZKR_ZOOKEEPER_IMAGE chooses the image, as in the compose file)
set -euo pipefail
cd "$(dirname "$0")/.."
project=zkr-compose-check
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose -p "$project")
else
    compose=(docker-compose -p "$project") # Compose v1 (Debian bookworm's docker-compose)
fi
export ZKR_BIN=${ZKR_BIN:-$PWD/target/debug/zkr}
started=$(date +%s)
say() { printf '[compose-check %3ss] %s\n' "$(($(date +%s) - started))" "$*"; }
fail() { say "FAILED: $*"; "${compose[@]}" --profile job logs --no-color --tail 30 >&2 || true; exit 1; }
cleanup() { "${compose[@]}" --profile job down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT

# Waits (bounded) until every named service's container is healthy (Compose v1 has no --wait).
wait_healthy() {
    local deadline=$(($(date +%s) + 120)) service id status
    for service in "$@"; do
        while :; do
            id=$("${compose[@]}" ps -q "$service")
            status=$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || echo none)
            [ "$status" = healthy ] && break
            [ "$(date +%s)" -lt "$deadline" ] || fail "$service is not healthy after 120 s ($status)"
            sleep 1
        done
    done
}

# The `cmd_started` events of a replica (zkr run's JSON lines on its stderr): "TOKEN".
starts() { "${compose[@]}" logs --no-color "$1" 2>/dev/null | sed -n 's/.*"event":"cmd_started".*"token":\([0-9]*\).*/\1/p'; }
joblog() { "${compose[@]}" exec -T "$1" cat /shared/job.log 2>/dev/null || true; }

say "image ${ZKR_ZOOKEEPER_IMAGE:-zookeeper:3.9}, zkr binary $ZKR_BIN"
[ -x "$ZKR_BIN" ] || fail "no zkr binary at $ZKR_BIN (cargo build -p zkr)"
cleanup
"${compose[@]}" up -d zk1 zk2 zk3 >/dev/null 2>&1 || fail "compose up"
wait_healthy zk1 zk2 zk3
say "ensemble healthy: $(for s in zk1 zk2 zk3; do "${compose[@]}" exec -T "$s" zkServer.sh status 2>/dev/null | sed -n "s/^Mode: /$s=/p"; done | paste -sd' ')"

say "cargo run --example demo against it"
ZK_CONNECT=127.0.0.1:${ZKR_ZK1_PORT:-2181},127.0.0.1:${ZKR_ZK2_PORT:-2182},127.0.0.1:${ZKR_ZK3_PORT:-2183} \
    cargo run --quiet --example demo >/tmp/zkr-compose-demo.log 2>&1 || { cat /tmp/zkr-compose-demo.log; fail "the demo"; }
tail -n 5 /tmp/zkr-compose-demo.log | sed 's/^/    demo: /'

say "profile job: three replicas of the singleton job"
"${compose[@]}" --profile job up -d job1 job2 job3 >/dev/null 2>&1 || fail "compose up of the job profile"
deadline=$(($(date +%s) + 60))
while :; do
    runners=()
    for s in job1 job2 job3; do [ -n "$(starts "$s")" ] && runners+=("$s"); done
    [ "${#runners[@]}" -ge 1 ] && [ -n "$(joblog job1)" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "no replica started the job within 60 s"
    sleep 1
done
sleep 3 # let the others settle: a second runner would show up now
runners=()
for s in job1 job2 job3; do [ -n "$(starts "$s")" ] && runners+=("$s"); done
[ "${#runners[@]}" -eq 1 ] || fail "expected exactly one replica running the job, got: ${runners[*]}"
leader=${runners[0]}
first_token=$(starts "$leader" | tail -n 1)
writers=$(joblog "$leader" | cut -d' ' -f2 | sort -u | paste -sd,)
say "exactly one replica runs the job: $leader (token $first_token); fenced log writers: $writers"
[ "$writers" = "$leader" ] || fail "the fenced log has writers other than $leader: $writers"

say "docker compose kill $leader"
"${compose[@]}" kill "$leader" >/dev/null 2>&1
others=()
for s in job1 job2 job3; do [ "$s" != "$leader" ] && others+=("$s"); done
deadline=$(($(date +%s) + 60))
while :; do
    next=""
    for s in "${others[@]}"; do [ -n "$(starts "$s")" ] && next=$s; done
    [ -n "$next" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "no replica took over within 60 s of the kill"
    sleep 1
done
next_token=$(starts "$next" | tail -n 1)
[ "$next_token" -gt "$first_token" ] || fail "the successor's token $next_token is not above $first_token"
sleep 2
log=$(joblog "$next")
tokens_sorted=$(echo "$log" | cut -d' ' -f1 | sort -c -n 2>&1 && echo yes || echo no)
say "$next took over with token $next_token > $first_token; fenced log: $(echo "$log" | wc -l) lines, tokens non-decreasing: $tokens_sorted"
[ "$tokens_sorted" = yes ] || fail "the fenced log's tokens go down"
"${compose[@]}" logs --no-color "$leader" "$next" 2>/dev/null | grep -E '"event":"(leader|cmd_started)"' | sed 's/^/    /' | head -n 6

say "down -v"
"${compose[@]}" --profile job down -v --remove-orphans >/dev/null 2>&1 || fail "compose down"
trap - EXIT
left=$(
    docker ps -aq --filter "label=com.docker.compose.project=$project"
    docker network ls -q --filter "label=com.docker.compose.project=$project"
    docker volume ls -q --filter "label=com.docker.compose.project=$project"
)
[ -z "$left" ] || fail "left behind after down -v: $left"
say "nothing left behind (no container, network or volume of project $project)"
say "ok"
