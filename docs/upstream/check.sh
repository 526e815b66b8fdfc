#!/usr/bin/env bash
# Checks docs/upstream/zookeeper-client-0.11.2-connection-info.patch, the change we propose to
# zookeeper-client (see README.md beside this script), without touching the workspace: the
# published crate keeps depending on zookeeper-client from crates.io.
#
# 1. Unpacks the pristine zookeeper-client 0.11.2 from cargo's download cache (its checksum
#    checked against our Cargo.lock's) into a temporary directory and applies the patch.
# 2. Builds the patched crate's tests there: its unit tests (all of them, the patch's two among
#    them) and tests/connection_info.rs, the patch's integration test.
# 3. Builds docs/upstream/demo against the patched crate through
#    `cargo --config 'patch.crates-io.zookeeper-client.path="..."'` (no edit of any Cargo.toml).
# 4. Runs the unit tests; runs tests/connection_info.rs beside a 3-server ensemble of our harness
#    (the demo's `with-ensemble`), whose servers 0 and 1 differ in maxSessionTimeout; runs the
#    demo's one test: a rolling change lowers a server's maxSessionTimeout, the session moves
#    there, and the patched client reports generation 2, that server and the lower timeout.
#
# Needs ZooKeeper and a JDK as `cargo test` does (the harness finds or installs them), and
# crates.io once for the patched crate's few dev-dependencies (`cargo fetch`); offline after that.
# Its build goes to target/upstream-check (the crate) and target/ (the demo, sharing the
# workspace's dependency artifacts). 40 to 50 s with warm artifacts, about 4 min cold (2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=0.11.2
patch_file=$here/zookeeper-client-$version-connection-info.patch
started=$(date +%s)
step() { printf '\n== upstream check: %s (%ss)\n' "$*" "$(( $(date +%s) - started ))"; }
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-2}
# The demo builds the harness without its `docker` feature: local server processes.
export ZKR_TEST_BACKEND=${ZKR_TEST_BACKEND:-process}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "the pristine zookeeper-client $version from cargo's cache, the patch applied"
cargo_home=${CARGO_HOME:-$HOME/.cargo}
crate_file() { ls "$cargo_home"/registry/cache/*/zookeeper-client-$version.crate 2>/dev/null | head -n 1; }
if [ -z "$(crate_file)" ]; then
    (cd "$repo" && cargo fetch)
fi
crate_file=$(crate_file)
expected=$(awk -v v="$version" '
    $0 == "name = \"zookeeper-client\"" { here = 1; next }
    here && $1 == "version" { here = ($3 == "\"" v "\""); next }
    here && $1 == "checksum" { gsub(/"/, "", $3); print $3; exit }' "$repo/Cargo.lock")
actual=$(sha256sum "$crate_file" | cut -d' ' -f1)
if [ "$actual" != "$expected" ]; then
    echo "$crate_file: sha256 $actual, Cargo.lock says $expected" >&2
    exit 1
fi
tar -xzf "$crate_file" -C "$work"
crate=$work/zookeeper-client-$version
patch -d "$crate" -p1 --no-backup-if-mismatch --quiet <"$patch_file"

# The published crate's test build cannot be had as is: crates.io strips its git-only
# dev-dependency (testcontainers, a fork), which tests/zookeeper.rs and one unit test use, and
# its other dev-dependencies serve those container tests. So, for this build only (not part of
# the patch): keep the dev-dependencies its unit tests and tests/connection_info.rs use, drop
# the [[test]] of tests/zookeeper.rs, the one container unit test (`session_last_zxid_seen`)
# and the crate's `lto = "thin"` dev profile (slow links, nothing to test).
awk 'BEGIN { RS = ""; ORS = "\n\n" }
    /^\[dev-dependencies\./ && !/^\[dev-dependencies\.(asyncs|assertor|pretty_assertions|rand|test-case|tempfile)\]/ { next }
    /^\[\[test\]\]\nname = "zookeeper"\n/ { next }
    /^\[profile\.dev\]/ { next }
    { print }' "$crate/Cargo.toml" >"$work/Cargo.toml"
mv "$work/Cargo.toml" "$crate/Cargo.toml"
awk '/^    #\[test_log::test\(asyncs::test\)\]$/ { skip = 1 }
    skip && /^    }$/ { skip = 0; next }
    !skip' "$crate/src/client/mod.rs" >"$work/mod.rs"
if grep -q testcontainers "$work/mod.rs"; then
    echo "src/client/mod.rs still uses testcontainers: the container test was not removed" >&2
    exit 1
fi
mv "$work/mod.rs" "$crate/src/client/mod.rs"

step "build the patched crate's tests (target/upstream-check)"
(cd "$crate" && { cargo fetch --offline >/dev/null 2>&1 || cargo fetch; })
crate_cargo() {
    (cd "$crate" && CARGO_TARGET_DIR="$repo/target/upstream-check" cargo "$@")
}
crate_cargo test --offline --lib --test connection_info --no-run

step "build docs/upstream/demo against the patched crate (cargo --config patch.crates-io)"
# The workspace's lock file, so that the demo resolves the versions whose artifacts target/
# holds (docs/upstream/demo/Cargo.lock is not tracked).
cp "$repo/Cargo.lock" "$here/demo/Cargo.lock"
# `--config` after the subcommand: cargo does not pass a global `--config` on to an external
# subcommand (clippy), which would then silently check against crates.io's zookeeper-client.
demo_cargo() {
    local subcommand=$1
    shift
    CARGO_TARGET_DIR="$repo/target" cargo "$subcommand" \
        --config "patch.crates-io.zookeeper-client.path=\"$crate\"" \
        --offline --manifest-path "$here/demo/Cargo.toml" "$@"
}
demo_cargo build --bins --tests
demo_cargo clippy --all-targets -- -D warnings
with_ensemble=$repo/target/debug/with-ensemble

step "the patched crate's unit tests"
crate_cargo test --offline --lib

step "the patched crate's tests/connection_info.rs beside an ensemble (servers 0 and 1: maxSessionTimeout 20 s and 4 s)"
log=$work/connection_info.log
if ! (cd "$crate" && "$with_ensemble" env CARGO_TARGET_DIR="$repo/target/upstream-check" \
    cargo test --offline --test connection_info -- --nocapture) >"$log" 2>&1; then
    cat "$log"
    echo "tests/connection_info.rs failed" >&2
    exit 1
fi
grep -E '^(with-ensemble|test |test result)' "$log"
if grep -q '^skipped' "$log"; then
    echo "tests/connection_info.rs skipped although with-ensemble gave it servers" >&2
    exit 1
fi

step "ours against the patched crate: docs/upstream/demo's test"
demo_cargo test

step "done"
