#!/usr/bin/env bash
# Checks the alert rules with Prometheus's own tool, and the Kubernetes manifest against the
# API's schemas (docs/zkr-alerts.md, "How the rules are tested"):
#   1. promtool check rules zkr-cron.rules.yml   (syntax, PromQL, templates)
#   2. promtool test rules zkr-cron.rules.test.yml (each alert fires on its series, not on its edge)
#   3. every runbook link of the rules names a heading of docs/zkr-cron-runbook.md
#   4. kubernetes-validate --strict docs/k8s/zkr-cron.yaml (the schemas it bundles; offline)
# promtool is the one on PATH, else the one taken out of Debian's `prometheus` package (apt-get
# download, dpkg-deb -x: no server is installed) into ${ZKR_TOOLS_DIR:-~/.cache/zookeeper-recipes};
# kubernetes-validate (PyPI, pinned) goes into a venv there, made once. Package lists are
# updated, and python3-venv installed, only when needed (as root or with password-less sudo; the
# dpkg lock is waited for, since the test harness may be installing ZooKeeper at the same time).
#
# Usage: docs/prometheus/check.sh
# Exit 0 when every check passed; each step prints what it runs and its elapsed time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kubernetes_validate=kubernetes-validate==1.37.0
tools=${ZKR_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zookeeper-recipes}
started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
step() { echo "prometheus/check.sh [$(elapsed)]: $*" >&2; }
fail() { echo "prometheus/check.sh: FAILED: $*" >&2; exit 1; }
run() { step "+ $*"; "$@"; }

# apt-get as root, or with password-less sudo; otherwise say how to get the packages by hand.
apt_install() {
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null && sudo -n true 2>/dev/null \
            || fail "installing $* needs root or password-less sudo: run this as root, or install them first (apt-get install --no-install-recommends $*)"
        sudo=(sudo -n)
    fi
    local install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y
        --no-install-recommends -o DPkg::Lock::Timeout=600 "$@")
    step "+ ${install[*]}"
    "${install[@]}" \
        || { "${sudo[@]}" apt-get update -o DPkg::Lock::Timeout=600 && "${install[@]}"; } \
        || fail "apt-get install $* failed: install them by hand (apt-get install --no-install-recommends $*)"
}

# promtool alone, taken out of Debian's prometheus package into the tools directory: installing
# the package would also install (and on a systemd host start) a Prometheus server.
promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
    promtool="$tools/prometheus/usr/bin/promtool"
fi
if [ ! -x "$promtool" ]; then
    step "promtool is missing: taking it out of Debian's prometheus package into $tools/prometheus (nothing is installed)"
    debs="$tools/debs"
    rm -rf "$debs" && mkdir -p "$debs"
    if ! (cd "$debs" && apt-get download prometheus) >&2; then
        sudo=()
        if [ "$(id -u)" -ne 0 ]; then
            command -v sudo >/dev/null && sudo -n true 2>/dev/null \
                || fail "apt-get download prometheus failed, and updating the package lists needs root or password-less sudo: install promtool (Debian's prometheus package) by hand"
            sudo=(sudo -n)
        fi
        run "${sudo[@]}" apt-get update -o DPkg::Lock::Timeout=600 >&2
        (cd "$debs" && apt-get download prometheus) >&2 || fail "apt-get download prometheus failed"
    fi
    rm -rf "$tools/prometheus"
    dpkg-deb -x "$debs"/prometheus_*.deb "$tools/prometheus" || fail "dpkg-deb -x of $(ls "$debs") failed"
    rm -rf "$debs"
    [ -x "$promtool" ] || fail "Debian's prometheus package holds no usr/bin/promtool"
fi
step "$("$promtool" --version 2>&1 | head -n1) ($promtool)"

cd "$here"
run "$promtool" check rules zkr-cron.rules.yml
run "$promtool" test rules zkr-cron.rules.test.yml

# GitHub's anchor of each `##` heading: lower case, punctuation dropped, spaces to dashes.
step "the rules' runbook links name headings of docs/zkr-cron-runbook.md"
anchors=$(sed -n 's/^##* //p' "$root/docs/zkr-cron-runbook.md" \
    | tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g')
links=$(sed -n 's/.*runbook: *"docs\/zkr-cron-runbook\.md#\([^"]*\)".*/\1/p' zkr-cron.rules.yml | sort -u)
[ -n "$links" ] || fail "no runbook link found in zkr-cron.rules.yml"
for link in $links; do
    grep -qx -- "$link" <<<"$anchors" || fail "zkr-cron.rules.yml links docs/zkr-cron-runbook.md#$link: no such heading"
    echo "  #$link" >&2
done

venv="$tools/kubernetes-validate-${kubernetes_validate#*==}"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    step "kubernetes-validate is missing: a venv at $venv with $kubernetes_validate (PyPI)"
    command -v python3 >/dev/null || apt_install python3
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        apt_install python3-venv
    fi
    rm -rf "$venv"
    mkdir -p "$tools"
    python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$kubernetes_validate" \
        || { rm -rf "$venv"; fail "pip install $kubernetes_validate failed"; }
fi
run "$venv/bin/kubernetes-validate" --strict --quiet "$root/docs/k8s/zkr-cron.yaml"
step "done: the rules, their tests, their runbook links and the Kubernetes manifest passed"
