#!/usr/bin/env bash
# Builds the image zookeeper-recipes/zookeeper:3.8 from Debian's packages alone, with no registry:
# a minimal Debian root file system (debootstrap --variant=minbase) holding a headless Java
# runtime and Debian's ZooKeeper jars, trimmed, then turned into an image with `docker import`.
#
# The Debian mirror, suite and keyring are read from this machine's own apt sources
# (/etc/apt/sources.list.d/*.sources, or the one-line /etc/apt/sources.list format), never
# written here. The build is idempotent: the image carries a label with the hash of its inputs
# (this script, the entrypoint, the zkServer.sh launcher, the mirror, the suite, the packages);
# when an image with the same hash exists, nothing is done.
#
# Its entrypoint honours the official `zookeeper` image's environment (ZOO_MY_ID, ZOO_SERVERS,
# ZOO_TICK_TIME, ...; see docker-entrypoint.sh), so the compose file and the test harness run
# the same on both.
#
# Usage: docker/zookeeper/build.sh [--force]     (root, or a user who may run debootstrap via sudo)
# Environment: ZKR_ZOOKEEPER_IMAGE (default zookeeper-recipes/zookeeper:3.8),
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
packages=openjdk-17-jre-headless,libzookeeper-java,libslf4j-java
label=org.zookeeper-recipes.inputs

started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

# --- The machine's Debian mirror: the first `deb` entry whose suite is the release itself.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
mirror="" keyring=""
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: blank-line separated stanzas.
    read -r mirror keyring < <(awk -v suite="$codename" '
        function flush() {
            if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "" && !found) {
                split(uris, u, " "); print u[1], signed; found = 1
            }
            types = ""; uris = ""; suites = ""; signed = ""
        }
        /^[[:space:]]*$/ { flush(); next }
        /^#/ { next }
        /^Types:/ { sub(/^Types:[[:space:]]*/, ""); types = $0 }
        /^URIs:/ { sub(/^URIs:[[:space:]]*/, ""); uris = $0 }
        /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
        /^Signed-By:/ { sub(/^Signed-By:[[:space:]]*/, ""); signed = $0 }
        END { flush() }' "$f") || true
    [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    # One-line format: deb [options] URI suite components...
    mirror=$(awk -v suite="$codename" '$1 == "deb" {
            i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit } }' /etc/apt/sources.list)
fi
if [ -z "$codename" ] || [ -z "$mirror" ]; then
    echo "build.sh: no Debian mirror for '${codename:-?}' in this machine's apt sources" \
        "(/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list): this script builds from" \
        "Debian packages and needs a Debian machine" >&2
    exit 1
fi

inputs=$( {
    cat "$here/build.sh" "$here/docker-entrypoint.sh" "$here/zkServer.sh"
    echo "$mirror $codename $packages"
} | sha256sum | cut -c1-16)

if ! $force && [ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null)" = "$inputs" ]; then
    echo "image $image is up to date (inputs $inputs): nothing to do"
    docker image inspect -f 'image size: {{.Size}} bytes' "$image"
    exit 0
fi

# --- debootstrap itself: from Debian's packages when this machine lacks it (as root or with
# password-less sudo); otherwise say how to get it.
if [ ! -x /usr/sbin/debootstrap ] && ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; then
        # Waits for another install's dpkg lock (CI builds this image while the tests install).
        apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y
            --no-install-recommends debootstrap)
        [ "$(id -u)" -ne 0 ] && apt=(sudo -n "${apt[@]}")
        echo "debootstrap is missing: ${apt[*]}"
        if ! "${apt[@]}" >/tmp/zkr-debootstrap-install.log 2>&1; then
            echo "the package lists may be stale: apt-get update, then again"
            ${sudo:+sudo -n} apt-get -o DPkg::Lock::Timeout=600 update >>/tmp/zkr-debootstrap-install.log 2>&1 || true
            "${apt[@]}" >>/tmp/zkr-debootstrap-install.log 2>&1 || {
                tail -20 /tmp/zkr-debootstrap-install.log >&2
                echo "build.sh: installing debootstrap failed (log: /tmp/zkr-debootstrap-install.log)" >&2
                exit 1
            }
        fi
    else
        echo "build.sh: debootstrap is missing and this user may not install packages:" \
            "run 'sudo apt-get install -y debootstrap', then this script again" >&2
        exit 1
    fi
fi

echo "building $image from Debian $codename ($mirror), inputs $inputs"
root=$(mktemp -d /tmp/zkr-image-root.XXXXXX)
trap '$sudo rm -rf "$root"' EXIT
$sudo mkdir -p "$cache"
keyring_opt=()
[ -n "$keyring" ] && [ -f "$keyring" ] && keyring_opt=(--keyring="$keyring")
$sudo debootstrap --variant=minbase --include="$packages" --cache-dir="$cache" \
    "${keyring_opt[@]}" "$codename" "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -30 "$root.log" >&2
    echo "build.sh: debootstrap failed (full log: $root.log)" >&2
    exit 1
}
rm -f "$root.log"
echo "debootstrap done after $(elapsed) s: $($sudo du -sm "$root" | cut -f1) MB before trimming"

# --- The server's user, directories and scripts (as the official image: uid/gid 1000).
$sudo chroot "$root" groupadd -r zookeeper --gid=1000
$sudo chroot "$root" useradd -r -g zookeeper --uid=1000 -d /data zookeeper
$sudo mkdir -p "$root"/{conf,data,datalog,logs}
$sudo chroot "$root" chown zookeeper:zookeeper /conf /data /datalog /logs
$sudo install -m 0755 "$here/docker-entrypoint.sh" "$root/docker-entrypoint.sh"
$sudo install -m 0755 "$here/zkServer.sh" "$root/usr/local/bin/zkServer.sh"

# --- Trimming: what a server in a container never reads.
$sudo rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion} \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* "$root"/usr/lib/x86_64-linux-gnu/gconv
# Jars nothing on the server's classpath (see zkServer.sh) loads, among them junit, guava,
# jetty's optional modules and log4j, pulled in by libzookeeper-java's dependencies.
keep='^(zookeeper|zookeeper-jute|slf4j-api|slf4j-simple|netty-(handler|common|buffer|transport|codec|resolver|transport-native-epoll|transport-native-unix-common)|jetty9-(server|servlet|util|util-ajax|http|io|security)|servlet-api|jackson-(core|databind|annotations)|commons-cli|metrics-core|snappy-java)(-[0-9].*)?\.jar$'
for jar in "$root"/usr/share/java/*; do
    base=$(basename "$jar")
    [[ $base =~ $keep ]] || $sudo rm -rf "$jar"
done
echo "trimmed: $($sudo du -sm "$root" | cut -f1) MB"

# --- The image.
$sudo tar -C "$root" -c . | docker import \
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
    - "$image" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "built $image in $(elapsed) s: image size $((size / 1000000)) MB ($size bytes)"
