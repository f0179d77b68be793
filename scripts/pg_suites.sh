#!/usr/bin/env bash
# The own regression and isolation suites of the machine's PostgreSQL major
# (scripts/majors), each run twice on throwaway clusters: (a) plain, (b) with pg_outbox preloaded, created in
# template1 (so every database a test creates has it) and in the suite's own
# database. The two runs must give the same results, test by test and output
# by output, but for the lines scripts/pg_suites.allowed lists. The runs are
# compared with each other, not with the expected files, because the source
# package's expected files can trail the installed minor release.
# Usage: bash scripts/pg_suites.sh  (as root; scripts/test.sh calls it)
# PG_SUITES_BIN: the PostgreSQL binaries to test (default: the system's),
# PG_SUITES_CACHE: where the source stays between runs, for offline re-runs.
set -euo pipefail
source "$(dirname "$0")/common.sh"
BIN=${PG_SUITES_BIN:-$PG_BIN}
CACHE=${PG_SUITES_CACHE:-/var/cache/pg_outbox}
ALLOWED=$ROOT/scripts/pg_suites.allowed
PORT=55432	# a name only: the clusters listen on their own socket dir, no TCP

# The deb-src twin of the machine's Debian entries, unless it has one.
add_deb_src() {
  local c; c=$(. /etc/os-release && echo "$VERSION_CODENAME")
  grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
  awk -v c="$c" 'BEGIN { RS = ""; ORS = "\n\n" }
    $0 ~ ("(^|\n)Suites:[^\n]* " c) && /(^|\n)Types:[^\n]*deb( |$|\n)/ {
      sub(/Types:[^\n]*/, "Types: deb-src"); print }' \
    /etc/apt/sources.list.d/*.sources > /etc/apt/sources.list.d/pg_outbox-src.sources 2>/dev/null || true
  grep -hE "^deb\s.*\s$c(-[a-z]+)?\s" /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    sed 's/^deb /deb-src /' > /etc/apt/sources.list.d/pg_outbox-src.list || true
  find /etc/apt/sources.list.d -name 'pg_outbox-src.*' -empty -delete
}

# Sets SRC to the suites' source for the installed postgresql-MAJOR: the same
# Debian version if the registry serves it, else its newest MAJOR.x source.
fetch_source() {
  local want v tmp start=$SECONDS
  want=$(dpkg-query -W -f='${Version}' postgresql-$PG_MAJOR)
  SRC=$CACHE/for-$want
  [ -d "$SRC/regress/sql" ] && return 0
  log "fetching the source of postgresql-$PG_MAJOR $want into $CACHE"
  add_deb_src
  apt-get update -qq
  mkdir -p "$CACHE"; tmp=$(mktemp -d "$CACHE/dl.XXXXXX"); cleanup_push "rm -rf '$tmp'"
  for v in "$want" $(apt-cache showsrc postgresql-$PG_MAJOR | sed -n 's/^Version: //p' | sort -Vru | grep -vxF "$want"); do
    (cd "$tmp" && apt-get source -qq -o APT::Sandbox::User=root "postgresql-$PG_MAJOR=$v" >/dev/null 2>&1) && break
    echo "postgresql-$PG_MAJOR $v: no source in the registry"
    rm -rf "${tmp:?}"/*
  done
  [ -d "$tmp"/postgresql-$PG_MAJOR-*/src/test/regress ] || { echo "no postgresql-$PG_MAJOR source found" >&2; exit 1; }
  [ "$v" = "$want" ] || echo "using the source of $v: its expected files may differ from what $want prints"
  mkdir -p "$CACHE/$v"
  cp -a "$tmp"/postgresql-$PG_MAJOR-*/src/test/{regress,isolation} "$CACHE/$v/"
  rm -rf "$tmp"; ln -sfn "$v" "$SRC"
  echo "fetched and unpacked in $((SECONDS - start)) s"
}

# regress.so, built with PGXS against the installed server headers, beside
# the installed contrib/spi modules the suite loads from the same directory.
build_regress_so() {
  mkdir -p "$WORK/dl"
  cp "$SRC/regress/regress.c" "$WORK/dl/"
  printf 'MODULES = regress\nPGXS := $(shell %s --pgxs)\ninclude $(PGXS)\n' "$PG_BIN/pg_config" > "$WORK/dl/Makefile"
  make -s -C "$WORK/dl" >/dev/null
  ln -s "$("$BIN/pg_config" --pkglibdir)"/{autoinc,refint}.so "$WORK/dl/"
}

# run_suite SUITE VARIANT: a fresh cluster, the suite, the cluster stopped.
run_suite() {
  local suite=$1 variant=$2 d=$WORK/$1-$2 tool opts=() start
  mkdir -p "$d"; chown "$RUN_USER" "$d"
  as_user "$BIN/initdb" -D "$d/data" -A trust --no-sync --no-locale -E UTF8 >"$d/initdb.log"
  # what pg_regress --temp-instance sets, and the socket in $d only
  cat >>"$d/data/postgresql.conf" <<EOF
log_autovacuum_min_duration = 0
log_checkpoints = on
log_line_prefix = '%m %b[%p] %q%a '
log_lock_waits = on
log_temp_files = 128kB
max_prepared_transactions = 2
listen_addresses = ''
unix_socket_directories = '$d'
port = $PORT
EOF
  if [ "$variant" = outbox ]; then
    printf "shared_preload_libraries = 'outbox'\noutbox.brokers = '127.0.0.1:1'\n" >>"$d/data/postgresql.conf"
  fi
  cleanup_push "as_user '$BIN/pg_ctl' -D '$d/data' -m immediate stop >/dev/null 2>&1"
  as_user "$BIN/pg_ctl" -D "$d/data" -l "$d/server.log" -w start >/dev/null
  if [ "$variant" = outbox ]; then
    as_user "$BIN/psql" -h "$d" -p $PORT -d template1 -qXc 'CREATE EXTENSION outbox'
    opts+=(--load-extension=outbox)	# pg_regress copies template0
  fi
  tool=$(dirname "$(dirname "$("$BIN/pg_config" --pgxs)")")/test/$suite
  if [ "$suite" = regress ]; then
    tool+=/pg_regress; opts+=(--schedule="$SRC/regress/parallel_schedule" --dlpath="$WORK/dl" --max-concurrent-tests=20)
  else
    tool+=/pg_isolation_regress; opts+=(--schedule="$SRC/isolation/isolation_schedule")
  fi
  start=$SECONDS
  as_user "$tool" --host="$d" --port=$PORT --bindir="$BIN" --inputdir="$SRC/$suite" \
    --outputdir="$d/out" --encoding=UTF8 --no-locale "${opts[@]}" >"$d/run.log" 2>&1 || true
  as_user "$BIN/pg_ctl" -D "$d/data" -m fast -w stop >/dev/null
  if [ ! -d "$d/out/results" ] || ! grep -qE '\.\.\. +ok' "$d/run.log"; then
    echo "$suite $variant: the suite did not run"; tail -n 20 "$d/run.log"; exit 1
  fi
  # the comparison means something only if the workers ran meanwhile
  if [ "$variant" = outbox ] && ! grep -qE 'outbox "(isolation_)?regression" shard .* started' "$d/server.log"; then
    echo "$suite: no pg_outbox worker started for the suite's database"; exit 1
  fi
  printf '%-9s %-6s %4d s  %s\n' "$suite" "$variant" $((SECONDS - start)) \
    "$(grep -cE '\.\.\. +ok' "$d/run.log") ok, $(grep -cE '\.\.\. +FAILED' "$d/run.log") failed against the expected files"
}

# Lines of $1's output, in test $2, that the two runs may differ in.
allowed_re() { sed -n "s|^$1/$2 ||p" "$ALLOWED"; }

# compare SUITE: the same statuses and outputs, but for allowed lines.
compare() {
  local s=$1 a=$WORK/$1-plain/out b=$WORK/$1-outbox/out t re bad=0 status
  status='s/^(test)? +([^ ]+) +\.\.\. +(ok|FAILED|failed \(ignored\)).*/\2 \3/p'
  for t in $( (ls "$a/results" "$b/results") | sed -n 's/\.out$//p' | sort -u); do
    re=$(allowed_re "$s" "$t")
    if [ ! -f "$a/results/$t.out" ] || [ ! -f "$b/results/$t.out" ]; then
      echo "$s/$t: output in one run only"; bad=1; continue
    fi
    cmp -s "$a/results/$t.out" "$b/results/$t.out" && continue
    if [ "$( { diff "$a/results/$t.out" "$b/results/$t.out" || true; } |
      sed -n 's/^[<>] \{0,1\}//p' | grep -cvE "${re:-^\$.}" || true)" != 0 ]; then
      echo "$s/$t: the outputs differ (plain <, with pg_outbox >):"
      diff "$a/results/$t.out" "$b/results/$t.out" | head -n 60; bad=1
    else
      echo "$s/$t: differs only in allowed lines"
      ALLOWED_TESTS+=" $s/$t"
    fi
  done
  sort <(sed -nE "$status" "$a/../run.log") <(sed -nE "$status" "$b/../run.log") | uniq -u |
    while read -r t st; do
      [[ " $ALLOWED_TESTS " == *" $s/$t "* ]] || { echo "$s/$t: status $st in one run only"; exit 1; }
    done || bad=1
  return $bad
}

PACKAGES="$PACKAGES dpkg-dev"
ensure_packages
make_workdir
fetch_source
log "PostgreSQL's own suites from $(readlink "$SRC"), against $BIN, plain and with pg_outbox"
start=$SECONDS; build_regress_so; echo "regress.so built in $((SECONDS - start)) s"
for suite in regress isolation; do
  for variant in plain outbox; do run_suite $suite $variant; done
done
failed=0; ALLOWED_TESTS=""
for suite in regress isolation; do compare $suite || failed=1; done
fatal() { cat "$WORK"/*-"$1"/server.log | grep FATAL | sed -E "s/^[^]]*] //; s/[0-9]+/N/g" | sort | uniq -c || true; }
echo "server log FATAL lines: plain"; fatal plain; echo "with pg_outbox"; fatal outbox
if [ $failed -ne 0 ]; then
  echo "PG SUITES FAILED: the runs with and without pg_outbox differ"; exit 1
fi
echo "PG SUITES PASSED: the same results with and without pg_outbox"
