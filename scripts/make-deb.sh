#!/bin/bash
# make deb: builds .build/package/peerlink_<version>_<arch>.deb with dpkg-deb, then runs
# lintian on it.
#
#   scripts/make-deb.sh [--no-lintian]
#   scripts/make-deb.sh --build-only    (build the binary, print its directory; make bench)
#
# One binary, built in release mode with the Swift standard library, FoundationEssentials
# and libstdc++ linked statically (--static-swift-stdlib: no Swift toolchain on the board),
# with full RELRO, and stripped: peerlinkd, which is the CLI when started as peerlink (a link
# to it), so the runtime is on the board once. The package depends only on Debian packages:
# the shared libraries the binary links (found by dpkg-shlibdeps), the packages of OpenSSL,
# libdbus-1 and libavahi-client (loaded with dlopen at first use, which dpkg-shlibdeps cannot
# see), adduser and dbus; it recommends bluez and avahi-daemon. It installs:
#   /usr/bin/peerlinkd, /usr/bin/peerlink -> peerlinkd
#   /lib/systemd/system/peerlinkd.service   (not enabled: `systemctl enable --now peerlinkd`)
#   /etc/peerlink/peerlink.conf             (a conffile: kept on upgrade, removed on purge)
#   man pages, bash and zsh completions, /usr/share/doc/peerlink
# Its maintainer scripts (packaging/debian/) create the system user and group `peerlink`
# (the user also in group `bluetooth`), stop the daemon on removal and, on purge, remove
# the state directory, the user and the group. lintian's errors and warnings fail the
# build; docs/packaging.md explains the tags it still reports (information only).
#
# Environment: SWIFT (default swift), DEB_OUT (default <repo>/.build/package).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO"
SWIFT=${SWIFT:-swift}
OUT=${DEB_OUT:-$REPO/.build/package}
lintian=1 build_only=0
for arg in "$@"; do
    case $arg in
        --no-lintian) lintian=0 ;;
        --build-only) build_only=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) echo "make-deb: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture gcc gzip pkg-config readelf strip; do
    command -v "$tool" >/dev/null || { echo "make-deb: missing $tool: run scripts/install-deps.sh --deb (as root)" >&2; exit 1; }
done
[ $lintian = 0 ] || command -v lintian >/dev/null || { echo "make-deb: missing lintian: run scripts/install-deps.sh --deb (as root)" >&2; exit 1; }

# ---- build ------------------------------------------------------------------------
SCRATCH=$REPO/.build/static
# libstdc++ linked statically too: the Swift runtime needs it, and loading the shared one
# (relocating its symbols) was about a fifth of every CLI start. The static runtime's link
# line asks for -lstdc++; a directory holding only GCC's libstdc++.a, searched first, makes
# the linker take the archive (the check below fails the build if it did not).
STATIC_CXX=$SCRATCH/static-libstdc++
LIBSTDCXX_A=$(gcc -print-file-name=libstdc++.a)
[ -f "$LIBSTDCXX_A" ] || { echo "make-deb: no libstdc++.a (gcc -print-file-name gave '$LIBSTDCXX_A'): run scripts/install-deps.sh --deb (as root)" >&2; exit 1; }
mkdir -p "$STATIC_CXX"
ln -sfn "$LIBSTDCXX_A" "$STATIC_CXX/libstdc++.a"
# libdbus-1 is loaded with dlopen too (Sources/CDBus/shim.h), but its headers' paths come from
# pkg-config, and SwiftPM then links -ldbus-1 as well: this build reads a dbus-1.pc with the
# system's Cflags and no Libs, so a direct call to libdbus cannot link here.
PC_DIR=$SCRATCH/pkgconfig-headers-only
mkdir -p "$PC_DIR"
DBUS_CFLAGS=$(pkg-config --cflags dbus-1) || { echo "make-deb: pkg-config knows no dbus-1: run scripts/install-deps.sh --deb (as root)" >&2; exit 1; }
printf 'Name: dbus-1\nDescription: libdbus-1 headers only (loaded with dlopen)\nVersion: %s\nCflags: %s\nLibs:\n' \
    "$(pkg-config --modversion dbus-1)" "$DBUS_CFLAGS" >"$PC_DIR/dbus-1.pc.new"
# Rewritten only when it changes: a newer file would make SwiftPM rebuild everything.
cmp -s "$PC_DIR/dbus-1.pc.new" "$PC_DIR/dbus-1.pc" && rm "$PC_DIR/dbus-1.pc.new" || mv "$PC_DIR/dbus-1.pc.new" "$PC_DIR/dbus-1.pc"
export PKG_CONFIG_PATH=$PC_DIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
BUILD=("$SWIFT" build -c release --static-swift-stdlib --scratch-path "$SCRATCH"
       -Xswiftc -L"$STATIC_CXX" -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now)
echo "make-deb: PKG_CONFIG_PATH=$PKG_CONFIG_PATH ${BUILD[*]}" >&2
"${BUILD[@]}" --product peerlinkd >&2
BIN=$("${BUILD[@]}" --show-bin-path)
# What the binary loads at start: never libstdc++ (above), nor OpenSSL, libdbus-1 or Avahi
# (the TLS, DBus and DNSSD modules dlopen them at first use, so the CLI never loads them:
# Sources/COpenSSL/shim.h).
if needed=$(readelf -d "$BIN/peerlinkd" | grep -E 'NEEDED.*\[(libstdc\+\+|libssl|libcrypto|libdbus|libavahi)'); then
    echo "make-deb: $BIN/peerlinkd must not link these at start:" >&2
    echo "$needed" >&2
    exit 1
fi
# The CLI beside the daemon, as the package installs it (/usr/bin/peerlink -> peerlinkd): the
# directory is then one make check's lab runs (PEERLINK_BIN), the binary a board gets.
ln -sfn peerlinkd "$BIN/peerlink"
if [ $build_only = 1 ]; then echo "$BIN"; exit 0; fi

VERSION=$("$BIN/peerlinkd" --version | awk '{print $2}')
[[ $VERSION =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || { echo "make-deb: peerlinkd --version gave '$VERSION', not a Debian version" >&2; exit 1; }
ARCH=$(dpkg --print-architecture)
NAME=peerlink_${VERSION}_${ARCH}

# ---- the tree -----------------------------------------------------------------------
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/peerlink-deb.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
ROOT=$STAGE/root
umask 022
install -d "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" \
    "$ROOT/etc/peerlink" "$ROOT/usr/share/man/man1" "$ROOT/usr/share/man/man5" "$ROOT/usr/share/man/man8" \
    "$ROOT/usr/share/bash-completion/completions" "$ROOT/usr/share/zsh/vendor-completions" \
    "$ROOT/usr/share/doc/peerlink" "$ROOT/usr/share/lintian/overrides"
install -m 0755 "$BIN/peerlinkd" "$ROOT/usr/bin/peerlinkd"
# what dh_strip does for executables
strip --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/peerlinkd"
ln -s peerlinkd "$ROOT/usr/bin/peerlink"
sed 's|/usr/local/bin|/usr/bin|g' systemd/peerlinkd.service >"$ROOT/lib/systemd/system/peerlinkd.service"
chmod 0644 "$ROOT/lib/systemd/system/peerlinkd.service"
install -m 0644 examples/peerlink.conf "$ROOT/etc/peerlink/peerlink.conf"
for page in peerlink.1:man1 peerlink.conf.5:man5 peerlinkd.8:man8; do
    gzip -9n <"docs/man/${page%%:*}" >"$ROOT/usr/share/man/${page##*:}/${page%%:*}.gz"
done
install -m 0644 docs/completions/peerlink.bash "$ROOT/usr/share/bash-completion/completions/peerlink"
install -m 0644 docs/completions/_peerlink "$ROOT/usr/share/zsh/vendor-completions/_peerlink"
install -m 0644 packaging/debian/copyright "$ROOT/usr/share/doc/peerlink/copyright"
install -m 0644 packaging/debian/lintian-overrides "$ROOT/usr/share/lintian/overrides/peerlink"
# A native package's changelog: one entry for this build, dated by its commit (the same
# tree gives the same package).
DATE=$(git log -1 --format=%cD 2>/dev/null || date -R)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
MAINTAINER="PeerLink maintainers <maintainers@peerlink.example.org>"
printf 'peerlink (%s) unstable; urgency=medium\n\n  * Built from the PeerLink repository, commit %s.\n\n -- %s  %s\n' \
    "$VERSION" "$COMMIT" "$MAINTAINER" "$DATE" | gzip -9n >"$ROOT/usr/share/doc/peerlink/changelog.gz"
for s in postinst prerm postrm; do install -m 0755 "packaging/debian/$s" "$ROOT/DEBIAN/$s"; done
echo /etc/peerlink/peerlink.conf >"$ROOT/DEBIAN/conffiles"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum | sed 's|  \./|  |') >"$ROOT/DEBIAN/md5sums"

# ---- control ------------------------------------------------------------------------
# dpkg-shlibdeps reads the libraries' shlibs and symbols files: Depends with the minimum
# versions the binaries need. It wants a debian/control beside it.
mkdir -p "$STAGE/src/debian"
printf 'Source: peerlink\n\nPackage: peerlink\nArchitecture: any\n' >"$STAGE/src/debian/control"
SHLIBS=$(cd "$STAGE/src" && dpkg-shlibdeps -O "$ROOT/usr/bin/peerlinkd" "$ROOT/usr/bin/peerlink" | sed -n 's/^shlibs:Depends=//p')
[ -n "$SHLIBS" ] || { echo "make-deb: dpkg-shlibdeps found no library dependencies" >&2; exit 1; }
# The libraries loaded with dlopen, which dpkg-shlibdeps cannot see: the package holding each
# on the build machine (libssl3 on bookworm, libssl3t64 on trixie), at the version whose ABI
# the soname promises (the functions the shims list exist since then).
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for lib in libssl.so.3:3.0.0 libdbus-1.so.3:1.9.14 libavahi-client.so.3:0.6.16 libavahi-common.so.3:0.6.16; do
    soname=${lib%%:*}
    # dpkg knows each file under the path its package used: /usr/lib or /lib (merged /usr).
    package=$( { dpkg -S "/usr/lib/$MULTIARCH/$soname" || dpkg -S "/lib/$MULTIARCH/$soname"; } 2>/dev/null | head -n 1 | cut -d: -f1 || true)
    [ -n "$package" ] || { echo "make-deb: no installed package holds $soname (in /usr/lib/$MULTIARCH or /lib/$MULTIARCH): run scripts/install-deps.sh --deb (as root)" >&2; exit 1; }
    SHLIBS="$SHLIBS, $package (>= ${lib##*:})"
done
SIZE=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
cat >"$ROOT/DEBIAN/control" <<EOF
Package: peerlink
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $SIZE
Depends: $SHLIBS, adduser, dbus
Recommends: bluez, avahi-daemon
Section: net
Priority: optional
Description: Bluetooth LE and peer-networking daemon for Linux boards
 peerlinkd gives a small Linux board what CoreBluetooth, Bonjour and
 MultipeerConnectivity give an iOS app: a BLE peripheral and central over
 BlueZ, DNS-SD through Avahi, and TLS-authenticated peer sessions with
 messages, resumable file transfers and byte streams.
 .
 It runs as a systemd service under its own user and is driven through a
 Unix socket speaking JSON-RPC 2.0, or with the peerlink command.
EOF

mkdir -p "$OUT"
rm -f "$OUT/$NAME.deb"
# Every file's time is the commit's: the same tree gives the same package.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
    dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$OUT/$NAME.deb" >/dev/null
echo "make-deb: $OUT/$NAME.deb ($(du -k "$OUT/$NAME.deb" | cut -f1) KiB; installed ${SIZE} KiB, of which peerlinkd $(du -k "$ROOT/usr/bin/peerlinkd" | cut -f1) KiB; peerlink is a link to it)"

if [ $lintian = 1 ]; then
    # Errors and warnings fail the build; the informational tags left are explained in
    # docs/packaging.md.
    echo "make-deb: lintian $NAME.deb"
    # (Not --show-overrides: with it, lintian 2.116 counts the overridden tag and fails.)
    lintian --info --fail-on error,warning "$OUT/$NAME.deb"
fi
