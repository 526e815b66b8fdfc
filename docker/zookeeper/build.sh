#!/usr/bin/env bash
# Builds the image zookeeper-recipes/zookeeper:3.8 from Debian's packages alone, with no registry:
# FROM the base image of docker/debian/build.sh (a minimal Debian root file system made by
# debootstrap, built first when it is missing or out of date), a container installs a headless
# Java runtime and Debian's ZooKeeper jars with apt-get from the machine's Debian mirror (the
# .deb files cached by debootstrap are reused), trims what the server never reads, and is
# committed as the image (`docker commit`: the base's layer is shared with the zkr image).
#
# The build is idempotent: the image carries a label with the hash of its inputs (this script,
# the entrypoint, the zkServer.sh launcher, the packages, and the base image's own inputs: the
# mirror, the suite, its script); when an image with the same hash exists, nothing is done.
#
# Its entrypoint honours the official `zookeeper` image's environment (ZOO_MY_ID, ZOO_SERVERS,
# ZOO_TICK_TIME, ...; see docker-entrypoint.sh), so the compose file and the test harness run
# the same on both.
#
# Usage: docker/zookeeper/build.sh [--force]     (root, or a user who may run debootstrap via sudo)
#   --force rebuilds this image (on the existing base; docker/debian/build.sh --force rebuilds that)
# Environment: ZKR_ZOOKEEPER_IMAGE (default zookeeper-recipes/zookeeper:3.8),
#              ZKR_DEBIAN_IMAGE (the base, default zookeeper-recipes/debian:CODENAME),
#              ZKR_DEBOOTSTRAP_CACHE (where the .deb files are kept between builds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=${ZKR_ZOOKEEPER_IMAGE:-zookeeper-recipes/zookeeper:3.8}
cache=${ZKR_DEBOOTSTRAP_CACHE:-/var/cache/zookeeper-recipes/debootstrap}
force=false
[ "${1:-}" = "--force" ] && force=true
# Debian's ZooKeeper is the jars of libzookeeper-java; the package `zookeeper` around them only
# adds init scripts and zooinspector and depends on the full (X11) default-jre, which would
# more than double the image.
packages=(openjdk-17-jre-headless libzookeeper-java libslf4j-java)
label=org.zookeeper-recipes.inputs

started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# --- The base (cached by its own inputs: nothing to do when it is up to date).
base=$("$here/../debian/build.sh" | tail -n1)
base_inputs=$(docker image inspect -f '{{index .Config.Labels "org.zookeeper-recipes.base-inputs"}}' "$base")
[ -n "$base_inputs" ] || { echo "build.sh: the base image $base has no inputs label" >&2; exit 1; }

inputs=$( {
    cat "$here/build.sh" "$here/docker-entrypoint.sh" "$here/zkServer.sh"
    echo "$base_inputs ${packages[*]}"
} | sha256sum | cut -c1-16)

if ! $force && [ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null)" = "$inputs" ]; then
    echo "image $image is up to date (inputs $inputs): nothing to do"
    docker image inspect -f 'image size: {{.Size}} bytes' "$image"
    exit 0
fi

echo "building $image FROM $base (inputs $base_inputs), inputs $inputs"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo mkdir -p "$cache"
# Jars nothing on the server's classpath (see zkServer.sh) loads, among them junit, guava,
# jetty's optional modules and log4j, pulled in by libzookeeper-java's dependencies.
keep='^(zookeeper|zookeeper-jute|slf4j-api|slf4j-simple|netty-(handler|common|buffer|transport|codec|resolver|transport-native-epoll|transport-native-unix-common)|jetty9-(server|servlet|util|util-ajax|http|io|security)|servlet-api|jackson-(core|databind|annotations)|commons-cli|metrics-core|snappy-java)(-[0-9].*)?\.jar$'
# The install, the server's user (as the official image: uid/gid 1000), its directories and
# scripts, and the trimming, in one container whose changes become the image's one layer. The
# cache is apt's archive directory: debootstrap's .deb files, and apt's own for the next build.
# The regex and the packages are its arguments ($1, then the rest), not its environment, which
# `docker commit` would keep in the image.
# shellcheck disable=SC2016
script='set -eu
keep=$1; shift
export DEBIAN_FRONTEND=noninteractive
apt-get -q update >/dev/null
apt-get -q install -y --no-install-recommends "$@" >/tmp/apt.log 2>&1 || {
    grep -m3 -B5 -E "^(dpkg|update-alternatives|E): " /tmp/apt.log; echo ...; tail -20 /tmp/apt.log; exit 1; }
groupadd -r zookeeper --gid=1000
useradd -r -g zookeeper --uid=1000 -d /data zookeeper
mkdir -p /conf /data /datalog /logs
chown zookeeper:zookeeper /conf /data /datalog /logs
install -m 0755 /build/docker-entrypoint.sh /docker-entrypoint.sh
install -m 0755 /build/zkServer.sh /usr/local/bin/zkServer.sh
for jar in /usr/share/java/*; do
    base=$(basename "$jar")
    echo "$base" | grep -Eq "$keep" || rm -rf "$jar"
done
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/log/* /tmp/* /var/tmp/* \
    /usr/lib/x86_64-linux-gnu/gconv'
# The host's network: the mirror is reached as debootstrap reached it (a mirror or proxy on the
# host's loopback too).
container=$(docker create --network host -v "$cache:/var/cache/apt/archives" -v "$here:/build:ro" \
    --entrypoint /bin/sh "$base" -c "$script" sh "$keep" "${packages[@]}")
trap 'docker rm -f "$container" >/dev/null 2>&1 || true' EXIT
docker start -a "$container" || { echo "build.sh: installing ${packages[*]} FROM $base failed" >&2; exit 1; }
echo "installed after $(elapsed) s"

# --- The image.
docker commit \
    --change "LABEL $label=$inputs" \
    --change 'LABEL org.opencontainers.image.description="ZooKeeper 3.8 from Debian packages, official zookeeper image environment"' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV ZOO_CONF_DIR=/conf ZOO_DATA_DIR=/data ZOO_DATA_LOG_DIR=/datalog ZOO_LOG_DIR=/logs' \
    --change 'ENV ZOO_TICK_TIME=2000 ZOO_INIT_LIMIT=5 ZOO_SYNC_LIMIT=2 ZOO_MAX_CLIENT_CNXNS=60' \
    --change 'ENV ZOO_AUTOPURGE_PURGEINTERVAL=0 ZOO_AUTOPURGE_SNAPRETAINCOUNT=3' \
    --change 'ENV ZOO_STANDALONE_ENABLED=true ZOO_ADMINSERVER_ENABLED=true ZOOCFGDIR=/conf' \
    --change 'VOLUME ["/data", "/datalog", "/logs"]' \
    --change 'EXPOSE 2181 2888 3888 8080' \
    --change 'WORKDIR /' \
    --change 'ENTRYPOINT ["/docker-entrypoint.sh"]' \
    --change 'CMD ["zkServer.sh", "start-foreground"]' \
    "$container" "$image" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "built $image in $(elapsed) s: image size $((size / 1000000)) MB ($size bytes)"
