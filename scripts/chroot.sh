#!/usr/bin/env bash
# Builds and tests pg_outbox on a PostgreSQL major that Debian 12 lacks, in
# a Debian chroot that has it (17: trixie, 18: sid), each with that suite's
# own librdkafka. The chroot is made once under $OUTBOX_CHROOT_CACHE and
# reused: a second run needs no network unless the package list changed.
# Usage (as root): bash scripts/chroot.sh MAJOR [t/NNN_name.pl ...]
# Default tests: every pg_regress file and the core TAP tests.
set -euo pipefail

MAJOR=${1:?usage: chroot.sh MAJOR [t/NNN_name.pl ...]}
shift
case "$MAJOR" in
  17) SUITE=trixie ;;
  18) SUITE=sid ;;
  *) echo "chroot.sh: no Debian suite known for PostgreSQL $MAJOR" >&2; exit 2 ;;
esac
CORE_TESTS="t/001_delivery.pl t/003_abi_guard.pl t/011_crash.pl t/012_reload.pl t/013_standby.pl
t/020_poison.pl t/030_security.pl t/033_durability.pl t/040_upgrade.pl
t/050_databases.pl t/060_status.pl t/061_wait_events.pl"
TESTS=${*:-$CORE_TESTS}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OUTBOX_CHROOT_CACHE:-/var/cache/pg_outbox}
DIR=$CACHE/chroot-$SUITE
MIRROR=http://deb.debian.org/debian
PACKAGES="postgresql-$MAJOR postgresql-server-dev-$MAJOR librdkafka-dev
libprotobuf-c-dev protobuf-c-compiler protobuf-compiler kcat libipc-run-perl make gcc
postgresql-server-dev-all debhelper dpkg-dev fakeroot"
PG_CONFIG=/usr/lib/postgresql/$MAJOR/bin/pg_config
TREE=/tmp/pg_outbox-tree

log() { printf '\n== [pg %s, %s] %s\n' "$MAJOR" "$SUITE" "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "chroot.sh: run as root (debootstrap, chroot, mount)" >&2; exit 1; }
in_chroot() { chroot "$DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

# One run at a time per chroot: two would share its mounts and its tree.
mkdir -p "$CACHE"
exec 9>"$DIR.lock"
flock 9

# Whatever happens, nothing started in the chroot survives the run and its
# mounts go away (in reverse order), or the next run could not remove it.
MOUNTS=()
cleanup() {
  local pid i
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$DIR" ] && kill -9 "$pid" 2>/dev/null
  done
  for ((i=${#MOUNTS[@]}-1; i>=0; i--)); do
    umount "${MOUNTS[$i]}" 2>/dev/null || umount --lazy "${MOUNTS[$i]}"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mount_in() {
  mountpoint -q "$DIR$2" && umount --lazy "$DIR$2"  # left by a killed run
  mount "${@:3}" "$1" "$DIR$2"
  MOUNTS+=("$DIR$2")
}
mount_all() {
  mount_in proc /proc -t proc
  mount_in /dev /dev --bind
  mount_in /dev/shm /dev/shm --bind
}

t0=$SECONDS
if [ ! -x "$DIR/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
  log "debootstrap $SUITE into $DIR"
  rm -rf "$DIR"
  debootstrap --variant=minbase "$SUITE" "$DIR" "$MIRROR" >"$DIR.debootstrap.log" 2>&1 \
    || { tail -n 30 "$DIR.debootstrap.log"; exit 1; }
  # no service starts in the chroot and the server package makes no
  # cluster of its own (it would take a port such as 5432)
  printf '#!/bin/sh\nexit 101\n' >"$DIR/usr/sbin/policy-rc.d"
  chmod 755 "$DIR/usr/sbin/policy-rc.d"
  mkdir -p "$DIR/etc/postgresql-common"
  echo "create_main_cluster = false" >"$DIR/etc/postgresql-common/createcluster.conf"
fi
mount_all
if [ "$(cat "$DIR/.pg_outbox-packages" 2>/dev/null)" != "$PACKAGES" ]; then
  log "installing the packages"
  # sid's Release file may be past its Valid-Until date
  in_chroot apt-get -qq -o Acquire::Check-Valid-Until=false update
  in_chroot apt-get install -y -qq --no-install-recommends $PACKAGES >"$DIR.apt.log" 2>&1 \
    || { tail -n 30 "$DIR.apt.log"; exit 1; }
  echo "$PACKAGES" >"$DIR/.pg_outbox-packages"
fi
t_create=$((SECONDS - t0))
PG_VERSION=$(in_chroot "$PG_CONFIG" --version)
KAFKA_VERSION=$(in_chroot dpkg-query -W -f='${Version}' librdkafka-dev)
log "$PG_VERSION, librdkafka $KAFKA_VERSION (chroot ready in ${t_create}s)"

# The tree as git sees it (tracked and new files), without build products.
t0=$SECONDS
rm -rf "${DIR:?}$TREE"
mkdir -p "$DIR$TREE"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$DIR$TREE" -xf -
log "building the extension and tools/outbox-broker against the chroot's libraries"
in_chroot make -C "$TREE" -s PG_CONFIG="$PG_CONFIG" WERROR=1 all tools/outbox-broker install >/dev/null
t_build=$((SECONDS - t0))

# PostgreSQL refuses root: the suites run as postgres on the tree it owns.
t0=$SECONDS
chroot "$DIR" chown -R postgres "$TREE"
as_postgres() { in_chroot runuser -u postgres -- "$@"; }
status=0
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
t_tests=$((SECONDS - t0))
echo "FIGURES chroot pg=$MAJOR suite=$SUITE postgresql='$PG_VERSION' librdkafka=$KAFKA_VERSION" \
  "create_s=$t_create build_s=$t_build tests_s=$t_tests status=$status"
exit $status
