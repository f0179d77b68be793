#!/usr/bin/env bash
# Builds and tests pg_outbox on a PostgreSQL major in a chroot of the
# Debian suite scripts/majors names for it, with that suite's own
# librdkafka, then builds its Debian package, installs it into a clean
# system of the same suite and runs the demo there. Chroots are made once
# under $OUTBOX_CHROOT_CACHE and reused: a second run needs no network
# unless the package lists changed.
# Usage (as root): bash scripts/chroot.sh MAJOR [t/NNN_name.pl ...]
#                  bash scripts/chroot.sh MAJOR --package-only
# Default tests: every pg_regress file and the core TAP tests; the package
# step runs with them (not when tests are named).
set -euo pipefail

MAJOR=${1:?usage: chroot.sh MAJOR [--package-only | t/NNN_name.pl ...]}
shift
source "$(dirname "$0")/majors.sh"
SUITE=$(major_field "$MAJOR" suite)
[ -n "$SUITE" ] || { echo "chroot.sh: scripts/majors names no Debian suite for PostgreSQL $MAJOR" >&2; exit 2; }
# BASE+EXTRA: a system of BASE, with EXTRA's packages too (experimental's
# are never installed unless pinned); PIN: the one version of the major's
# packages to install (all built from its source package, libpq too)
BASE=${SUITE%%+*} EXTRA=
[ "$BASE" = "$SUITE" ] || EXTRA=${SUITE#*+}
PIN=$(major_field "$MAJOR" version)
RUN_TESTS=yes RUN_PACKAGE=yes
if [ "${1:-}" = --package-only ]; then RUN_TESTS=; shift
elif [ $# -gt 0 ]; then RUN_PACKAGE=; fi
TESTS=${*:-$CORE_TESTS}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OUTBOX_CHROOT_CACHE:-/var/cache/pg_outbox}
DIR=$CACHE/chroot-$SUITE        # build and test
CLEAN=$CACHE/clean-$SUITE       # a minimal system, copied for each install
RUN=$CACHE/run-$SUITE           # that copy
MIRROR=http://deb.debian.org/debian
# the build's packages (debian/control.in's), the tests' (scripts/common.sh
# says why each) and the packaging's
PACKAGES="$(build_packages "$MAJOR") protobuf-compiler kcat libipc-run-perl
postgresql-server-dev-all debhelper dpkg-dev fakeroot"
# what the package pulls in, and the demo's Kafka client and decoder
RUNTIME="postgresql-$MAJOR librdkafka1 libprotobuf-c1 kcat protobuf-compiler"
PG_CONFIG=/usr/lib/postgresql/$MAJOR/bin/pg_config
TREE=/tmp/pg_outbox-tree
PKG=/tmp/pg_outbox-pkg

log() { printf '\n== [+%d s] [pg %s, %s] %s\n' "$SECONDS" "$MAJOR" "$SUITE" "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "chroot.sh: run as root (debootstrap, chroot, mount)" >&2; exit 1; }
in_root() { local r=$1; shift; chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
in_chroot() { in_root "$DIR" "$@"; }

# One run at a time per suite: two would share its mounts and its trees.
mkdir -p "$CACHE"
exec 9>"$DIR.lock"
flock 9

# Whatever happens, nothing started in a chroot survives the run and its
# mounts go away (in reverse order), or the next run could not remove it.
MOUNTS=()
cleanup() {
  local pid i root
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    root=$(readlink "/proc/$pid/root" 2>/dev/null) || continue
    [ "$root" = "$DIR" ] || [ "$root" = "$RUN" ] || [ "$root" = "$CLEAN" ] || continue
    kill -9 "$pid" 2>/dev/null || true
  done
  for ((i=${#MOUNTS[@]}-1; i>=0; i--)); do
    umount "${MOUNTS[$i]}" 2>/dev/null || umount --lazy "${MOUNTS[$i]}"
  done
  MOUNTS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mount_all() {
  local r=$1 d
  for d in /proc /dev /dev/shm; do
    mountpoint -q "$r$d" && umount --lazy "$r$d"  # left by a killed run
    if [ $d = /proc ]; then mount -t proc proc "$r$d"; else mount --bind $d "$r$d"; fi
    MOUNTS+=("$r$d")
  done
}

# A minbase system of the suite in $1 with packages $2 (installed, or only
# downloaded with $3 = -d, so that installing them later needs no
# network), made once; its package list is its stamp.
make_root() {
  local r=$1 packages=$2 mode=${3:-}
  if [ ! -x "$r/usr/bin/apt-get" ]; then
    # the machine's apt, one at a time: chroots are made at once (scripts/test.sh)
    command -v debootstrap >/dev/null ||
      flock "$CACHE/apt.lock" sh -c 'command -v debootstrap >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }'
    log "debootstrap $BASE into $r"
    rm -rf "$r"
    debootstrap --variant=minbase "$BASE" "$r" "$MIRROR" >"$r.debootstrap.log" 2>&1 \
      || { tail -n 30 "$r.debootstrap.log"; exit 1; }
    # no service starts in it and the server package makes no cluster
    # of its own (it would take a port such as 5432)
    printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
    chmod 755 "$r/usr/sbin/policy-rc.d"
    mkdir -p "$r/etc/postgresql-common"
    echo "create_main_cluster = false" >"$r/etc/postgresql-common/createcluster.conf"
  fi
  [ -z "$EXTRA" ] || echo "deb $MIRROR $EXTRA main" >"$r/etc/apt/sources.list.d/$EXTRA.list"
  [ -z "$PIN" ] || printf 'Package: src:postgresql-%s\nPin: version %s\nPin-Priority: 990\n' \
    "$MAJOR" "$PIN" >"$r/etc/apt/preferences.d/pg_outbox"
  if [ "$(cat "$r/.pg_outbox-packages" 2>/dev/null)" != "$mode $packages${PIN:+ $PIN}" ]; then
    log "installing ${mode:+(download only) }$(echo $packages)"
    mount_all "$r"
    # sid's Release file may be past its Valid-Until date
    # sid's mirrors can be mid-sync: a failed fetch gets a second try
    local try
    for try in 1 2; do
      in_root "$r" apt-get -qq -o Acquire::Check-Valid-Until=false update
      in_root "$r" apt-get install -y -qq $mode --no-install-recommends $packages >"$r.apt.log" 2>&1 \
        && break
      [ $try = 2 ] && { tail -n 30 "$r.apt.log"; exit 1; }
    done
    cleanup
    echo "$mode $packages${PIN:+ $PIN}" >"$r/.pg_outbox-packages"
  fi
}

# The tree as git sees it (tracked and new files), without build products.
copy_tree() {
  rm -rf "$1"; mkdir -p "$1"
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$1" -xf -
}

t0=$SECONDS
make_root "$DIR" "$PACKAGES"
t_create=$((SECONDS - t0))
mount_all "$DIR"
PG_VERSION=$(in_chroot "$PG_CONFIG" --version)
if [ -n "$PIN" ] && [ "$(in_chroot dpkg-query -W -f='${Version}' "postgresql-$MAJOR")" != "$PIN" ]; then
  echo "chroot.sh: postgresql-$MAJOR is not the version scripts/majors pins ($PIN)" >&2; exit 1
fi
KAFKA_VERSION=$(in_chroot dpkg-query -W -f='${Version}' librdkafka-dev)
log "$PG_VERSION, librdkafka $KAFKA_VERSION (chroot ready in ${t_create}s)"

t0=$SECONDS
copy_tree "$DIR$TREE"
log "building the extension and tools/outbox-broker against the chroot's libraries"
in_chroot make -C "$TREE" -s PG_CONFIG="$PG_CONFIG" WERROR=1 all tools/outbox-broker install >/dev/null
t_build=$((SECONDS - t0))

# PostgreSQL refuses root: the suites run as postgres on the tree it owns.
t0=$SECONDS
status=0
if [ "$RUN_TESTS" ]; then
  chroot "$DIR" chown -R postgres "$TREE"
  as_postgres() { in_chroot runuser -u postgres -- "$@"; }
  log "pg_regress"
  as_postgres make -C "$TREE" -s PG_CONFIG="$PG_CONFIG" installcheck || status=$?
  [ $status -eq 0 ] || cat "$DIR$TREE/regression.diffs" 2>/dev/null || true
  log "TAP: $(echo $TESTS)"
  as_postgres make -C "$TREE" -s PG_CONFIG="$PG_CONFIG" prove_installcheck \
    PROVE_FLAGS="--timer" PROVE_TESTS="$(echo $TESTS)" || status=$?
  if [ $status -ne 0 ]; then
    for f in "$DIR$TREE"/tmp_check/log/regress_log_*; do
      [ -f "$f" ] && grep -q "not ok" "$f" && { log "$f (last 60 lines)"; tail -n 60 "$f"; }
    done
  fi
fi
t_tests=$((SECONDS - t0))

# The Debian package, built by pg_buildext (its pg_regress runs on the
# way; -d: the chroot has this major's server, postgresql-all would add
# every PL), installed into a copy of a clean system, where the demo runs
# against the installed files only, with the broker built above.
package_check() {
  log "building the Debian package"
  # the packages of earlier runs (other versions) go first: one .deb is found below
  rm -rf "$DIR$PKG"
  copy_tree "$DIR$PKG/src"
  # pg_virtualenv's cluster would take 5432 if free; the chroot shares
  # the machine's loopback, so it gets a free port of its own, counted
  # from one per major: majors packaged at once (scripts/test.sh) would
  # both find the same port free
  local port=$((55000 + MAJOR * 10))
  while (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
  # PG_SUPPORTED_VERSIONS: this major, whether or not the suite's
  # postgresql-common counts it among its own (sid's does not count 19)
  in_chroot sh -c "cd $PKG/src && PGPORT=$port PG_UPDATECONTROL=yes PG_SUPPORTED_VERSIONS=$MAJOR dpkg-buildpackage -us -uc -b -d" \
    >"$DIR.package.log" 2>&1 || { tail -n 60 "$DIR.package.log"; return 1; }
  local deb
  deb=$(cd "$DIR$PKG" && ls postgresql-$MAJOR-outbox_*.deb)
  log "installing $deb into a clean $SUITE"
  make_root "$CLEAN" "$RUNTIME" -d
  rm -rf "$RUN"; cp -a "$CLEAN" "$RUN"
  mkdir -p "$RUN/tmp/demo/tools"
  cp "$DIR$PKG/$deb" "$RUN/tmp/"
  cp -r "$ROOT/scripts" "$ROOT/proto" "$RUN/tmp/demo/"
  cp "$DIR$TREE/tools/outbox-broker" "$RUN/tmp/demo/tools/"
  mount_all "$RUN"
  # what make_root downloaded, no more: without recommends (19's would add
  # its JIT's LLVM), a second run installs offline
  in_root "$RUN" apt-get install -y -qq --no-install-recommends "/tmp/$deb" kcat protobuf-compiler \
    >"$RUN.apt.log" 2>&1 || { tail -n 30 "$RUN.apt.log"; return 1; }
  in_root "$RUN" dpkg -L "postgresql-$MAJOR-outbox" | grep -E '\.so$|\.control$'
  log "the demo, from the installed package"
  in_root "$RUN" env OUTBOX_DEMO_INSTALLED=1 OUTBOX_PG_MAJOR="$MAJOR" bash /tmp/demo/scripts/demo.sh \
    >"$RUN.demo.log" 2>&1 || { tail -n 40 "$RUN.demo.log"; return 1; }
  grep -E "^(committed|rolled-back|latency) .*delivered|DEMO OK|^ *[0-9]+ \| " "$RUN.demo.log" | head -8
}
t0=$SECONDS
pkg_status=skipped
if [ "$RUN_PACKAGE" ]; then
  if package_check; then pkg_status=ok; else pkg_status=failed; status=1; fi
fi
t_package=$((SECONDS - t0))
echo "FIGURES chroot pg=$MAJOR suite=$SUITE postgresql='$PG_VERSION' librdkafka=$KAFKA_VERSION" \
  "create_s=$t_create build_s=$t_build tests_s=$t_tests package_s=$t_package package=$pkg_status status=$status"
exit $status
