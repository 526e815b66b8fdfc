#!/usr/bin/env bash
# CI's check of docker-compose.yml: brings the ensemble up (waiting for the health checks), runs
# `cargo run --example demo` against it with ZK_CONNECT, starts the `job` profile's three
# replicas and checks that exactly one runs the job, kills that one (`kill`) and checks that
# another takes over with a higher fencing token in the fenced log; starts the `cron` profile's
# three `zkr cron run` replicas and checks that one replica runs the slots, as the zkr user,
# kills it and checks that a later slot runs on another replica with a higher token, no slot
# twice; then `down -v` and checks that no container, network or volume of the project is left.
# The replicas run on the zkr image (docker/zkr/build.sh), which must exist.
#
# Usage: docker/compose-check.sh
# Environment, as in the compose file: ZKR_ZOOKEEPER_IMAGE, ZKR_IMAGE (the zkr image),
# ZKR_ZK1_PORT.., ZKR_CRON1_METRICS_PORT..; ZKR_COMPOSE_PROJECT, the project's name
# [zkr-compose-check] (two checks on one machine need two names, and other ports).
set -euo pipefail
cd "$(dirname "$0")/.."
project=${ZKR_COMPOSE_PROJECT:-zkr-compose-check}
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose -p "$project")
else
    compose=(docker-compose -p "$project") # Compose v1 (Debian bookworm's docker-compose)
fi
zkr_image=${ZKR_IMAGE:-zookeeper-recipes/zkr:latest}
profiles=(--profile job --profile cron)
started=$(date +%s)
say() { printf '[compose-check %3ss] %s\n' "$(($(date +%s) - started))" "$*"; }
fail() { say "FAILED: $*"; "${compose[@]}" "${profiles[@]}" logs --no-color --tail 30 >&2 || true; exit 1; }
cleanup() { "${compose[@]}" "${profiles[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; }
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
joblog() { "${compose[@]}" exec -T "$1" cat /var/lib/zkr/job.log 2>/dev/null || true; }
# The cron job's shared log: "SLOT TOKEN ID USER ATTEMPT" per slot run.
cronlog() { "${compose[@]}" exec -T "$1" cat /var/lib/zkr/cron.log 2>/dev/null || true; }

docker image inspect "$zkr_image" >/dev/null 2>&1 \
    || fail "no image $zkr_image: build it with docker/zkr/build.sh (--binary target/debug/zkr)"
say "images ${ZKR_ZOOKEEPER_IMAGE:-zookeeper:3.9} and $zkr_image ($(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}, user {{.Config.User}}' "$zkr_image"))"
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

"${compose[@]}" --profile job rm -fsv job1 job2 job3 >/dev/null 2>&1 || fail "removing the job profile's replicas"

say "profile cron: three zkr cron run replicas, a slot every 10 s"
"${compose[@]}" --profile cron up -d cron1 cron2 cron3 >/dev/null 2>&1 || fail "compose up of the cron profile"
deadline=$(($(date +%s) + 60))
until [ "$(cronlog cron1 | wc -l)" -ge 2 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "fewer than two slots ran within 60 s: $(cronlog cron1)"
    sleep 1
done
log=$(cronlog cron1)
runners=$(cut -d' ' -f3 <<<"$log" | sort -u | paste -sd,)
users=$(cut -d' ' -f4 <<<"$log" | sort -u | paste -sd,)
say "slots so far: $(paste -sd';' <<<"$log")"
[ "$users" = zkr ] || fail "the slots ran as $users, not as the zkr user"
# The replicas' zkr processes, as the host sees them: the zkr user's uid in the image.
zkr_uid=$(docker run --rm --entrypoint id "$zkr_image" -u zkr)
for s in cron1 cron2 cron3; do
    top=$(docker top "$("${compose[@]}" ps -q "$s")" -o pid,uid,comm) || fail "docker top of $s"
    [ "$(awk 'NR > 1 && $3 == "zkr" { print $2 }' <<<"$top" | sort -u)" = "$zkr_uid" ] \
        || fail "$s's zkr does not run as the zkr user (uid $zkr_uid): $top"
done
[[ $runners != *,* ]] || fail "more than one replica ran slots before any failure: $runners"
leader=$runners
leader_token=$(tail -n 1 <<<"$log" | cut -d' ' -f2)
say "one replica runs the slots: $leader (token $leader_token); every replica's zkr runs as zkr (uid $zkr_uid)"

say "docker compose kill $leader"
"${compose[@]}" kill "$leader" >/dev/null 2>&1
killed_at=$(date +%s)
reader=cron1
[ "$leader" = cron1 ] && reader=cron2
deadline=$(($(date +%s) + 60))
while :; do
    next_line=$(cronlog "$reader" | awk -v l="$leader" '$3 != l' | head -n 1)
    [ -n "$next_line" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "no other replica ran a slot within 60 s of the kill: $(cronlog "$reader")"
    sleep 1
done
read -r next_slot next_token next user next_attempt <<<"$next_line"
[ "$next_token" -gt "$leader_token" ] || fail "$next's token $next_token is not above $leader_token"
[ "$user" = zkr ] || fail "$next ran the slot as $user"
log=$(cronlog "$reader")
# A slot started twice as its first attempt ran twice; a kill during a run may legitimately
# have it run again as attempt 2 (--on-crash), which is not a duplicate.
duplicates=$(awk '$5 == 1 { print $1 }' <<<"$log" | sort | uniq -d | paste -sd,)
[ -z "$duplicates" ] || fail "slots ran twice: $duplicates"
tokens_sorted=$(cut -d' ' -f2 <<<"$log" | sort -c -n 2>&1 && echo yes || echo no)
[ "$tokens_sorted" = yes ] || fail "the cron log's tokens go down: $(paste -sd';' <<<"$log")"
say "$next ran slot $next_slot (attempt $next_attempt) with token $next_token > $leader_token, $(($(date +%s) - killed_at)) s after the kill (seen within 1 s); $(wc -l <<<"$log") runs, no slot's first attempt twice, tokens non-decreasing"

say "down -v"
"${compose[@]}" "${profiles[@]}" down -v --remove-orphans >/dev/null 2>&1 || fail "compose down"
trap - EXIT
left=$(
    docker ps -aq --filter "label=com.docker.compose.project=$project"
    docker network ls -q --filter "label=com.docker.compose.project=$project"
    docker volume ls -q --filter "label=com.docker.compose.project=$project"
)
[ -z "$left" ] || fail "left behind after down -v: $left"
say "nothing left behind (no container, network or volume of project $project)"
say "ok"
