#!/usr/bin/env bash
# Builds the base image zookeeper-recipes/debian:CODENAME (bookworm here) from Debian's packages
# alone, with no registry: a minimal Debian root file system (debootstrap --variant=minbase, plus
# adduser, which zkr's package depends on), trimmed, then turned into an image with
# `docker import`. The ZooKeeper image (docker/zookeeper/build.sh) and the zkr image
# (docker/zkr/build.sh) are both built FROM it, so that CI runs debootstrap once, and the two
# images share its layer.
#
# The Debian mirror, suite and keyring are read from this machine's own apt sources
# (/etc/apt/sources.list.d/*.sources, or the one-line /etc/apt/sources.list format), never
# written here. The build is idempotent: the image carries a label with the hash of its inputs
# (this script, the mirror, the suite, the packages); when an image with the same hash exists,
# nothing is done. The images built FROM it put that hash into their own inputs.
#
# Usage: docker/debian/build.sh [--force]     (root, or a user who may run debootstrap via sudo)
# Environment: ZKR_DEBIAN_IMAGE (default zookeeper-recipes/debian:CODENAME),
#              ZKR_DEBOOTSTRAP_CACHE (where the .deb files are kept between builds).
# Prints the image's name on its last line (stdout); progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ZKR_DEBOOTSTRAP_CACHE:-/var/cache/zookeeper-recipes/debootstrap}
force=false
[ "${1:-}" = "--force" ] && force=true
packages=adduser
label=org.zookeeper-recipes.base-inputs

started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "debian/build.sh: $*" >&2; }

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
    echo "debian/build.sh: no Debian mirror for '${codename:-?}' in this machine's apt sources" \
        "(/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list): this script builds from" \
        "Debian packages and needs a Debian machine" >&2
    exit 1
fi
image=${ZKR_DEBIAN_IMAGE:-zookeeper-recipes/debian:$codename}

inputs=$( {
    cat "$here/build.sh"
    echo "$mirror $codename $packages"
} | sha256sum | cut -c1-16)

if ! $force && [ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null)" = "$inputs" ]; then
    say "image $image is up to date (inputs $inputs): nothing to do"
    echo "$image"
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
        say "debootstrap is missing: ${apt[*]}"
        if ! "${apt[@]}" >/tmp/zkr-debootstrap-install.log 2>&1; then
            say "the package lists may be stale: apt-get update, then again"
            ${sudo:+sudo -n} apt-get -o DPkg::Lock::Timeout=600 update >>/tmp/zkr-debootstrap-install.log 2>&1 || true
            "${apt[@]}" >>/tmp/zkr-debootstrap-install.log 2>&1 || {
                tail -20 /tmp/zkr-debootstrap-install.log >&2
                echo "debian/build.sh: installing debootstrap failed (log: /tmp/zkr-debootstrap-install.log)" >&2
                exit 1
            }
        fi
    else
        echo "debian/build.sh: debootstrap is missing and this user may not install packages:" \
            "run 'sudo apt-get install -y debootstrap', then this script again" >&2
        exit 1
    fi
fi

say "building $image from Debian $codename ($mirror), inputs $inputs"
root=$(mktemp -d /tmp/zkr-image-root.XXXXXX)
trap '$sudo rm -rf "$root"' EXIT
$sudo mkdir -p "$cache"
keyring_opt=()
[ -n "$keyring" ] && [ -f "$keyring" ] && keyring_opt=(--keyring="$keyring")
$sudo debootstrap --variant=minbase --include="$packages" --cache-dir="$cache" \
    "${keyring_opt[@]}" "$codename" "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -30 "$root.log" >&2
    echo "debian/build.sh: debootstrap failed (full log: $root.log)" >&2
    exit 1
}
rm -f "$root.log"
say "debootstrap done after $(elapsed) s: $($sudo du -sm "$root" | cut -f1) MB before trimming"

# --- Trimming: what a process in a container never reads, now and in what the images built
# FROM this one install (dpkg leaves those paths out; copyright files are kept).
$sudo rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion} \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* "$root"/usr/lib/x86_64-linux-gnu/gconv
$sudo tee "$root/etc/dpkg/dpkg.cfg.d/zookeeper-recipes-excludes" >/dev/null <<'DPKG'
# zookeeper-recipes images: no documentation, manual pages or translations (docker/debian/build.sh).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/bug/*
DPKG
# openjdk's postinst (update-alternatives) links its manual pages into man1, and fails when the
# directory is missing (as it has in every slim Debian image): it stays, empty.
$sudo mkdir -p "$root/usr/share/man/man1"
# No daemon may start inside an image build (Debian's policy-rc.d convention).
printf '#!/bin/sh\nexit 101\n' | $sudo tee "$root/usr/sbin/policy-rc.d" >/dev/null
$sudo chmod 755 "$root/usr/sbin/policy-rc.d"
say "trimmed: $($sudo du -sm "$root" | cut -f1) MB"

# --- The image.
$sudo tar -C "$root" -c . | docker import \
    --change "LABEL $label=$inputs" \
    --change "LABEL org.opencontainers.image.description=\"Debian $codename minbase from $mirror (debootstrap), the base of the zookeeper-recipes images\"" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    - "$image" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
say "built $image in $(elapsed) s: image size $((size / 1000000)) MB ($size bytes)"
echo "$image"
