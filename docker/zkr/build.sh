#!/usr/bin/env bash
# Builds the image zookeeper-recipes/zkr:VERSION (and :latest) from zkr's own Debian package
# (zkr/packaging/build-deb.sh) installed into the Debian base image of docker/debian/build.sh
# (which the ZooKeeper image is built FROM too; it is built first when missing or out of date),
# with no registry: a container installs the .deb with dpkg and is committed as the image.
#
# The image: /usr/bin/zkr, a shell and Debian's minimal userland (a job's `sh -c` command runs
# in it), no JVM; the user `zkr` (uid/gid 10001, home and working directory /var/lib/zkr) that
# it runs as; entrypoint `zkr`. Labels: org.opencontainers.image.version (the package's
# version, VERSION+gitCOUNT.COMMIT as `zkr --version` tells builds apart) and
# org.opencontainers.image.revision (the commit). VERSION in the tag is zkr's Cargo version.
# Take zkr into a job's own image with
#   COPY --from=zookeeper-recipes/zkr:VERSION /usr/bin/zkr /usr/bin/zkr
# (a glibc at least as new as Debian bookworm's; see docs/docker.md).
#
# Usage: docker/zkr/build.sh [--binary PATH] [--profile release|debug]
#   --binary  put this zkr binary in the image (CI: target/debug/zkr, which cargo test built)
#   --profile without --binary, the cargo profile build-deb.sh builds zkr with [release]
# Environment: ZKR_IMAGE, the name:tag to build [zookeeper-recipes/zkr:latest]; the image is
#              also tagged NAME:VERSION. ZKR_DEBIAN_IMAGE, the base [zookeeper-recipes/debian:CODENAME].
# Prints the image's size and the time taken; the image's name:VERSION on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
image=${ZKR_IMAGE:-zookeeper-recipes/zkr:latest}
deb_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) deb_args+=(--binary "${2:?--binary needs a path}"); shift 2 ;;
        --profile) deb_args+=(--profile "${2:?--profile needs release or debug}"); shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "zkr/build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
# The repository part of the name (a registry's host:port keeps its colon).
case "${image##*/}" in
    *:*) repo=${image%:*} ;;
    *) repo=$image image=$image:latest ;;
esac
started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

base=$("$root/docker/debian/build.sh" | tail -n1)

work=$(mktemp -d)
container=""
cleanup() {
    [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
# Uncompressed: the package is installed at once and thrown away (xz would cost about 10 s).
deb=$("$root/zkr/packaging/build-deb.sh" "${deb_args[@]}" --compress none --out "$work/out" \
    2>"$work/deb.log" | tail -n1) || true
[ -f "$deb" ] || { cat "$work/deb.log" >&2; echo "zkr/build.sh: build-deb.sh made no package" >&2; exit 1; }
full_version=$(dpkg-deb -f "$deb" Version)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/zkr/Cargo.toml" | head -n1)
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
echo "packaged zkr $full_version after $(elapsed) s; installing it FROM $base"

# The user first, with a fixed uid/gid (Kubernetes' runAsUser, volume ownership): the package's
# postinst then keeps it. In one container, so that the image gets one layer and no copy of the .deb.
# shellcheck disable=SC2016
# (Not --system: with a uid above SYS_UID_MAX, useradd would warn; the home is made without /etc/skel.)
script='set -eu
groupadd --gid 10001 zkr
useradd --uid 10001 --gid zkr --home-dir /var/lib/zkr --no-create-home --no-log-init \
    --shell /usr/sbin/nologin --comment "zkr scheduled jobs and singleton commands" zkr
install -d -o zkr -g zkr -m 0755 /var/lib/zkr
dpkg -i /deb/zkr.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
rm -rf /tmp/* /var/log/* /var/cache/debconf/*-old'
mkdir "$work/deb" && mv "$deb" "$work/deb/zkr.deb"
container=$(docker create --network none -v "$work/deb:/deb:ro" --entrypoint /bin/sh "$base" -c "$script")
docker start -a "$container" || { echo "zkr/build.sh: installing $deb FROM $base failed" >&2; exit 1; }
docker commit \
    --change "LABEL org.opencontainers.image.title=zkr" \
    --change "LABEL org.opencontainers.image.description=\"zkr (zookeeper-recipes) from its Debian package on Debian; no JVM\"" \
    --change "LABEL org.opencontainers.image.version=$full_version" \
    --change "LABEL org.opencontainers.image.revision=$commit" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'USER 10001:10001' \
    --change 'WORKDIR /var/lib/zkr' \
    --change 'ENTRYPOINT ["zkr"]' \
    --change 'CMD ["--help"]' \
    "$container" "$image" >/dev/null
docker tag "$image" "$repo:$version"
# What the image promises: zkr runs as zkr from the entrypoint, and there is no JVM.
got=$(docker run --rm --entrypoint /bin/sh "$image" -c \
    'echo "$(id -un) $(command -v java || echo no-java)"; zkr --version')
case "$got" in
    "zkr no-java"*) ;;
    *) echo "zkr/build.sh: the image does not hold what it should: $got" >&2; exit 1 ;;
esac
# --binary may name a zkr built from another commit than HEAD, which the labels name.
built_from=$(sed -n '2s/.*(commit \([0-9a-f]*\)).*/\1/p' <<<"$got")
if [ -n "$built_from" ] && [ "$commit" != unknown ] && [ "${commit#"$built_from"}" = "$commit" ]; then
    echo "zkr/build.sh: warning: the binary was built from commit $built_from, the labels name HEAD ${commit:0:12}" >&2
fi
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "built $image and $repo:$version (zkr $full_version, commit ${commit:0:12}) in $(elapsed) s: image size $((size / 1000000)) MB ($size bytes), $(sed -n 2p <<<"$got")"
echo "$repo:$version"
