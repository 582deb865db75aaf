#!/bin/bash
# The one place that knows PeerLink's external dependencies (Debian 12).
#
#   scripts/install-deps.sh [--check|--install] [--lab] [--deb]
#
#   --check    list what is missing and the exact command lines to install
#              it; exit 1 if anything is missing (the default when not root)
#   --install  install what is missing (the default as root): `apt-get
#              update` once, `apt-get install -y --no-install-recommends`
#              for the missing packages only, `python3 -m pip install
#              virtme-ng` if `vng` is missing.  Not root: prints the sudo
#              command lines and exits 1.  Needs no terminal or stdin.
#   --lab      also the virtual lab's dependencies (Tests/Lab/run.sh)
#   --deb      also what `make deb` needs (dpkg-dev, lintian, binutils)
#
# Build: a Swift toolchain (cannot be installed from here), pkg-config,
# libdbus-1-dev, libavahi-client-dev, libssl-dev, dbus (dbus-daemon,
# dbus-send), systemd (busctl), avahi-utils, openssl, socat, file, groff-base, zsh
# and bash-completion (the unit tests format the man pages and run the
# completions).  Lab: qemu-system-x86, a kernel (linux-image-amd64),
# bluez, bluez-test-tools (btvirt), bluez-test-scripts, python3-dbus,
# python3-gi, avahi-daemon, busybox-static, iproute2, kmod, and vng (PyPI
# virtme-ng).  Detection looks at files and commands, so it is quick.
set -u

mode=""
lab=0
deb=0
for arg in "$@"; do
    case $arg in
        --check) mode=check ;;
        --install) mode=install ;;
        --lab) lab=1 ;;
        --deb) deb=1 ;;
        -h|--help) sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) echo "install-deps: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
is_root=0; [ "$(id -u)" = 0 ] && is_root=1
[ -n "$mode" ] || { [ $is_root = 1 ] && mode=install || mode=check; }

# ---- probes --------------------------------------------------------------------
# have_cmd NAME...: every NAME is a command (also looked for in the sbin dirs,
# which a non-root PATH may lack).
have_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || [ -x "/sbin/$c" ] || return 1
    done
}
# have_file PATH...: every PATH exists.
have_file() {
    local f
    for f in "$@"; do [ -e "$f" ] || return 1; done
}
# have_kernel: a /boot/vmlinuz-* the lab can boot, with its modules.
have_kernel() {
    local k
    for k in /boot/vmlinuz-*; do
        [ -r "$k" ] && [ -d "/lib/modules/${k#/boot/vmlinuz-}/kernel" ] && return 0
    done
    return 1
}
# have_static_busybox: vng's initramfs needs the static build.
have_static_busybox() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' busybox-static 2>/dev/null)" = installed ]
}
# have_static_libstdcxx: GCC's libstdc++.a (the package's binary links it statically).
have_static_libstdcxx() {
    have_cmd gcc && [ -f "$(gcc -print-file-name=libstdc++.a)" ]
}
swift_path() {
    command -v swift 2>/dev/null || { [ -x /opt/swift/usr/bin/swift ] && echo /opt/swift/usr/bin/swift; }
}

# package | what it gives | probe
BUILD_DEPS=(
    "pkg-config|pkg-config|have_cmd pkg-config"
    "libdbus-1-dev|libdbus-1 headers|have_file /usr/include/dbus-1.0/dbus/dbus.h"
    "libavahi-client-dev|Avahi client headers|have_file /usr/include/avahi-client/client.h"
    "dbus|dbus-daemon, dbus-send|have_cmd dbus-daemon dbus-send"
    "systemd|busctl|have_cmd busctl"
    "avahi-utils|avahi-browse, avahi-publish|have_cmd avahi-browse avahi-publish avahi-resolve"
    "libssl-dev|OpenSSL 3 headers (peer sessions' TLS)|have_file /usr/include/openssl/ssl.h"
    "openssl|openssl s_client (TLS tests)|have_cmd openssl"
    "socat|socat (peer-session tests and baselines)|have_cmd socat"
    "file|file (the image-header tests compare with it)|have_cmd file"
    "groff-base|groff (the man pages are checked with groff -man -ww)|have_cmd groff"
    "zsh|zsh (the zsh completion is run by the tests)|have_cmd zsh"
    "bash-completion|bash-completion (the bash completion is run with it)|have_file /usr/share/bash-completion/bash_completion"
)
LAB_DEPS=(
    "qemu-system-x86|qemu-system-x86_64|have_cmd qemu-system-x86_64"
    "linux-image-amd64|a kernel /boot/vmlinuz-* with /lib/modules|have_kernel"
    "bluez|bluetoothd, bluetoothctl, btmgmt|have_file /usr/libexec/bluetooth/bluetoothd && have_cmd bluetoothctl btmgmt"
    "bluez-test-tools|btvirt|have_cmd btvirt"
    "bluez-test-scripts|BlueZ example-gatt-server, example-advertisement|have_file /usr/share/doc/bluez-test-scripts/examples/example-gatt-server /usr/share/doc/bluez-test-scripts/examples/example-advertisement"
    "python3-dbus|dbus module for /usr/bin/python3|have_file /usr/bin/python3 /usr/lib/python3/dist-packages/dbus/__init__.py"
    "python3-gi|gi module for /usr/bin/python3|have_file /usr/lib/python3/dist-packages/gi/__init__.py"
    "avahi-daemon|avahi-daemon|have_file /usr/sbin/avahi-daemon"
    "busybox-static|static busybox (vng's initramfs)|have_static_busybox"
    "iproute2|ip|have_cmd ip"
    "kmod|modprobe|have_cmd modprobe lsmod"
    "systemd-sysv|systemd as /sbin/init (the lab's systemd boot)|have_file /lib/systemd/systemd /sbin/init"
    "util-linux|unshare (the systemd boot's private mounts)|have_cmd unshare"
)

DEB_DEPS=(
    "dpkg-dev|dpkg-shlibdeps (the package's library dependencies)|have_cmd dpkg-shlibdeps"
    "lintian|lintian (checks the package)|have_cmd lintian"
    "binutils|strip|have_cmd strip"
    "gcc|gcc (links the package's binary)|have_cmd gcc"
    "libstdc++-12-dev|libstdc++.a (linked into the package's binary)|have_static_libstdcxx"
)

deps=("${BUILD_DEPS[@]}")
[ $lab = 1 ] && deps+=("${LAB_DEPS[@]}")
[ $deb = 1 ] && deps+=("${DEB_DEPS[@]}")

# check: fill MISSING (packages), REINSTALL (installed but incomplete), and
# NEED_VNG / NEED_SWIFT.
check() {
    MISSING=(); REINSTALL=(); NEED_VNG=0; NEED_SWIFT=0
    local d pkg what probe
    for d in "${deps[@]}"; do
        IFS='|' read -r pkg what probe <<<"$d"
        eval "$probe" && continue
        if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ]; then
            # e.g. Docker images exclude /usr/share/doc, where
            # bluez-test-scripts puts its examples
            REINSTALL+=("$pkg")
            echo "install-deps: $pkg is installed but incomplete (no $what)"
        else
            MISSING+=("$pkg")
            echo "install-deps: missing $pkg ($what)"
        fi
    done
    [ -n "$(swift_path)" ] || NEED_SWIFT=1
    if [ $lab = 1 ] && ! command -v vng >/dev/null 2>&1; then
        NEED_VNG=1
        echo "install-deps: missing vng (PyPI package virtme-ng)"
        python3 -m pip --version >/dev/null 2>&1 || [[ " ${MISSING[*]} " == *" python3-pip "* ]] || MISSING+=("python3-pip")
    fi
}

# The path-include undoes a path-exclude=/usr/share/doc/* (Docker images):
# bluez-test-scripts' examples live there.
APT_OPTS=(-y --no-install-recommends -o "Dpkg::Options::=--path-include=/usr/share/doc/bluez-test-scripts/*")

print_commands() {
    local sudo=""
    [ $is_root = 1 ] || sudo="sudo "
    echo "install-deps: install with:"
    if [ ${#MISSING[@]} -gt 0 ]; then
        echo "  ${sudo}apt-get update && ${sudo}apt-get install ${APT_OPTS[*]:0:2} ${MISSING[*]}"
    fi
    if [ ${#REINSTALL[@]} -gt 0 ]; then
        echo "  ${sudo}apt-get install --reinstall -y --no-install-recommends -o 'Dpkg::Options::=--path-include=/usr/share/doc/bluez-test-scripts/*' ${REINSTALL[*]}"
    fi
    if [ $NEED_VNG = 1 ]; then
        echo "  ${sudo}python3 -m pip install virtme-ng    # add --break-system-packages if pip refuses (externally managed)"
    fi
    echo "  (or: ${sudo}$0 --install$([ $lab = 1 ] && echo ' --lab')$([ $deb = 1 ] && echo ' --deb'))"
}

swift_missing_message() {
    echo "install-deps: missing the Swift toolchain: no 'swift' on PATH nor /opt/swift/usr/bin/swift." >&2
    echo "install-deps: this script cannot install Swift: get a Swift 6 toolchain for Debian 12 from https://www.swift.org/install/linux/ and put its usr/bin on PATH (or unpack it at /opt/swift)." >&2
}

check
something_missing=$(( ${#MISSING[@]} + ${#REINSTALL[@]} + NEED_VNG ))
if [ "$something_missing" = 0 ]; then
    if [ $NEED_SWIFT = 1 ]; then swift_missing_message; exit 1; fi
    echo "install-deps: all build$([ $lab = 1 ] && echo ', lab')$([ $deb = 1 ] && echo ', package') dependencies present (swift: $(swift_path))"
    exit 0
fi

if [ "$mode" = check ] || [ $is_root = 0 ]; then
    print_commands
    [ $NEED_SWIFT = 1 ] && swift_missing_message
    [ "$mode" = install ] && echo "install-deps: not root: run the lines above (with sudo)" >&2
    exit 1
fi

# ---- install (root) --------------------------------------------------------------
export DEBIAN_FRONTEND=noninteractive
if [ ${#MISSING[@]} -gt 0 ] || [ ${#REINSTALL[@]} -gt 0 ]; then
    echo "install-deps: apt-get update"
    apt-get update -q </dev/null || { echo "install-deps: apt-get update failed" >&2; exit 1; }
fi
if [ ${#MISSING[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${MISSING[*]}"
    apt-get install -q "${APT_OPTS[@]}" "${MISSING[@]}" </dev/null || { echo "install-deps: apt-get install failed" >&2; exit 1; }
fi
if [ ${#REINSTALL[@]} -gt 0 ]; then
    echo "install-deps: apt-get install --reinstall ${REINSTALL[*]}"
    apt-get install -q --reinstall "${APT_OPTS[@]}" "${REINSTALL[@]}" </dev/null || { echo "install-deps: apt-get reinstall failed" >&2; exit 1; }
fi
if [ $NEED_VNG = 1 ]; then
    echo "install-deps: python3 -m pip install virtme-ng"
    if ! out=$(python3 -m pip install virtme-ng </dev/null 2>&1); then
        if grep -qi 'externally-managed' <<<"$out"; then
            echo "install-deps: pip refused (externally managed environment): retrying with --break-system-packages"
            python3 -m pip install --break-system-packages virtme-ng </dev/null || { echo "install-deps: pip install virtme-ng failed" >&2; exit 1; }
        else
            printf '%s\n' "$out" >&2
            echo "install-deps: pip install virtme-ng failed" >&2; exit 1
        fi
    else
        printf '%s\n' "$out" | tail -n 2
    fi
    hash -r
fi

# what is still missing after installing is a failure
check
if [ $(( ${#MISSING[@]} + ${#REINSTALL[@]} + NEED_VNG )) != 0 ]; then
    echo "install-deps: still missing after install: ${MISSING[*]} ${REINSTALL[*]} $([ $NEED_VNG = 1 ] && echo vng)" >&2
    exit 1
fi
if [ $NEED_SWIFT = 1 ]; then swift_missing_message; exit 1; fi
echo "install-deps: all build$([ $lab = 1 ] && echo ', lab')$([ $deb = 1 ] && echo ', package') dependencies present (swift: $(swift_path))"
