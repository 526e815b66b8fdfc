#!/usr/bin/env bash
# Builds the Debian package of zkr with dpkg-deb (Debian's own packager; nothing to install):
# /usr/bin/zkr, the systemd template units zkr-cron@.service and zkr-run@.service, the `zkr`
# system user (sysusers.d, created by the postinst), example environment files and the
# runbook under /usr/share/doc/zkr.
#
# Usage: zkr/packaging/build-deb.sh [--profile release|debug] [--out DIR] [--binary PATH]
#                                   [--compress xz|gzip|none]
#   --profile  the cargo profile to build zkr with [release]; debug is quicker to build (CI)
#              and gives a larger, slower binary
#   --out      where the .deb goes [target/debian]
#   --binary   package this zkr binary instead of building one
#   --compress the .deb's compression [xz]; none for a package installed at once and thrown
#              away (docker/zkr/build.sh, systemd-check.sh: xz costs about 7-10 s of CPU on a
#              debug build)
# Environment: ZKR_DEB_MAINTAINER, the Maintainer field [zookeeper-recipes maintainers
#              <zookeeper-recipes@example.org>: for the lead to set before publishing].
# Prints the path of the .deb on its last line. lintian (if installed) is clean of errors; its
# warnings left: no-manual-page (the reference is zkr --help, also in /usr/share/doc/zkr) and
# maintainer-script-calls-systemctl (prerm stops the running instances of the templates,
# which deb-systemd-invoke cannot name).
#
# Version: zkr's Cargo.toml version, then `+git<commits>.<hash>` of HEAD (the commit count keeps
# versions ordered, the hash names the build: `zkr --version` prints the same hash), and
# `.dirty` for a tree with uncommitted changes. Nothing is shipped under /etc, so the package
# has no conffiles: the operator's /etc/zkr/{cron,run}/*.env are their own, kept on upgrade,
# removal and purge.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
profile=release out="$root/target/debian" binary="" compress=xz
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=${2:?--profile needs release or debug}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        --binary) binary=${2:?--binary needs a path}; shift 2 ;;
        --compress) compress=${2:?--compress needs xz, gzip or none}; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$compress" in
    xz|gzip|none) ;;
    *) echo "build-deb.sh: --compress is xz, gzip or none, not $compress" >&2; exit 2 ;;
esac
case "$profile" in
    release) dir=release ;;
    debug) dir=debug ;;
    *) echo "build-deb.sh: --profile is release or debug, not $profile" >&2; exit 2 ;;
esac

cd "$root"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' zkr/Cargo.toml | head -n1)
[ -n "$version" ] || { echo "build-deb.sh: no version in zkr/Cargo.toml" >&2; exit 1; }
if commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
    count=$(git rev-list --count HEAD)
    version="$version+git$count.$commit"
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        version="$version.dirty"
    fi
    export ZKR_COMMIT=${ZKR_COMMIT:-$commit}
fi

if [ -z "$binary" ]; then
    cargo build -p zkr --profile "$( [ "$profile" = debug ] && echo dev || echo release )" >&2
    binary="target/$dir/zkr"
fi
[ -x "$binary" ] || { echo "build-deb.sh: $binary is not an executable" >&2; exit 1; }

arch=$(dpkg --print-architecture)
# The newest glibc symbol version the binary needs: the package's libc6 dependency.
glibc=$(objdump -T "$binary" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg="$stage/zkr"
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/usr/lib/sysusers.d" \
    "$pkg/usr/share/doc/zkr/examples" "$pkg/etc/zkr/cron" "$pkg/etc/zkr/run"
install -m 755 "$binary" "$pkg/usr/bin/zkr"
# Stripped in both profiles: the package is not for debugging, and a debug build is 30 MB.
strip --strip-unneeded "$pkg/usr/bin/zkr"
install -m 644 "$here/zkr-cron@.service" "$here/zkr-run@.service" "$pkg/lib/systemd/system/"
install -m 644 "$here/zkr.sysusers" "$pkg/usr/lib/sysusers.d/zkr.conf"
install -m 644 "$here/cron.env" "$here/run.env" "$here/credentials.conf" \
    "$pkg/usr/share/doc/zkr/examples/"
install -m 644 zkr/HELP.md "$pkg/usr/share/doc/zkr/HELP.md"
install -m 644 docs/zkr.md "$pkg/usr/share/doc/zkr/zkr.md"
if [ -f docs/zkr-cron-runbook.md ]; then
    install -m 644 docs/zkr-cron-runbook.md "$pkg/usr/share/doc/zkr/zkr-cron-runbook.md"
fi
if [ -f docs/zkr-alerts.md ]; then
    install -m 644 docs/zkr-alerts.md "$pkg/usr/share/doc/zkr/zkr-alerts.md"
fi
maintainer=${ZKR_DEB_MAINTAINER:-zookeeper-recipes maintainers <zookeeper-recipes@example.org>}
cat > "$pkg/usr/share/doc/zkr/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: zookeeper-recipes (zkr)

Files: *
Copyright: 2026 the zookeeper-recipes contributors
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
# A native package's changelog: this build, and where the project's own is.
{
    echo "zkr ($version) unstable; urgency=medium"
    echo
    echo "  * Built from commit ${commit:-unknown} of zookeeper-recipes; the project's changes"
    echo "    are in its CHANGELOG.md."
    echo
    echo " -- $maintainer  $(date -R)"
} | gzip -9n > "$pkg/usr/share/doc/zkr/changelog.gz"
chmod 644 "$pkg/usr/share/doc/zkr/changelog.gz"
install -m 755 "$here/postinst" "$here/prerm" "$here/postrm" "$pkg/DEBIAN/"
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: zkr
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: libc6 (>= $glibc), adduser
Section: admin
Priority: optional
Description: ZooKeeper recipes from the shell: singleton commands and scheduled jobs
 zkr runs a command only while it leads a ZooKeeper election (zkr run),
 holds a Curator-compatible lock around a command (zkr lock), and runs a
 scheduled job on one of several hosts, every slot recorded and fenced
 (zkr cron run). Ships the systemd template units zkr-cron@.service and
 zkr-run@.service.
CONTROL
(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
    | xargs -0 md5sum > DEBIAN/md5sums)
mkdir -p "$out"
deb="$out/zkr_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"$compress" --build "$pkg" "$deb" >&2
echo "$deb"
