#!/usr/bin/env bash
# pg_outbox benchmark, the part that needs root: install what is missing,
# build the module, the broker and the helpers from this tree, make a
# private copy of the PostgreSQL installation holding this build (so that
# nothing installed in /usr/lib/postgresql meanwhile changes what runs),
# then run the Perl driver bench/bench.pl as the unprivileged user.
#
# Usage: bash bench/run.sh [--quick] [--part NAME[,NAME...]]... [--out PATH]
#                          [--runs N] [--sustained-runs N] [--server-log PATH]
#                          [--kafka mock|real]
# (see bench/bench.pl and bench/README.md)
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case " $* " in *" -h "*|*" --help "*) sed -n '2,/^use strict/p' "$BENCH/bench.pl" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=../scripts/common.sh
source "$BENCH/../scripts/common.sh"   # ROOT, PG_BIN, as_user, make_workdir...

# where --out and --server-log point, relative to the caller's directory
OUT=$BENCH/results.json; LOG_COPY=""; KAFKA=mock; PARTS=""; prev=""
for a in "$@"; do
  case "$prev" in --out) OUT=$a ;; --server-log) LOG_COPY=$a ;; --kafka) KAFKA=$a ;; --part) PARTS="$PARTS,$a" ;; esac
  case "$a" in --out=*) OUT=${a#--out=} ;; --server-log=*) LOG_COPY=${a#--server-log=} ;; --kafka=*) KAFKA=${a#--kafka=} ;;
    --part=*) PARTS="$PARTS,${a#--part=}" ;; esac
  prev=$a
done
# where the results go in the output file (see the merge at the end)
KEY=$KAFKA
case "$PARTS" in
  ,debezium) KEY=debezium ;;
  ,tenants|,topics) KEY=${PARTS#,}; [ "$KAFKA" = mock ] || KEY=${KEY}_real_kafka ;;
esac
OUT=$(realpath -m "$OUT"); [ -z "$LOG_COPY" ] || LOG_COPY=$(realpath -m "$LOG_COPY")

ensure_packages
[ "$KAFKA" != real ] || { ensure_kafka_jars; ensure_js_packages; }
case "$PARTS," in *,debezium,*) ensure_debezium_jars ;; esac
log "building the module, the broker and the helpers"
make -C "$ROOT" -s PG_CONFIG=$PG_BIN/pg_config WERROR=1 all tools/outbox-broker >/dev/null
make_workdir
mkdir -p "$WORK/bin"
cc -O2 -Wall -Wextra -Werror -o "$WORK/bin/baseline-producer" "$BENCH/baseline_producer.c" -lrdkafka
cc -O2 -Wall -Wextra -Werror -o "$WORK/bin/latency-consumer" "$BENCH/latency_consumer.c" -lrdkafka -lm

# the private installation: PostgreSQL's binaries are relocatable
PGI=$WORK/pg
for d in "$($PG_BIN/pg_config --bindir)" "$($PG_BIN/pg_config --pkglibdir)" "$($PG_BIN/pg_config --sharedir)"; do
  mkdir -p "$PGI$(dirname "$d")"; cp -a "$d" "$PGI$d"
done
install -m 755 "$ROOT/outbox.so" "$PGI$($PG_BIN/pg_config --pkglibdir)/outbox.so"
install -m 644 "$ROOT/outbox.control" "$ROOT"/sql/outbox--*.sql "$PGI$($PG_BIN/pg_config --sharedir)/extension/"
chown -R "$RUN_USER" "$WORK"

rc=0
(cd "$WORK" && as_user env TESTDIR="$WORK" OUTBOX_KAFKA_LIBS="$OUTBOX_KAFKA_LIBS" OUTBOX_DEBEZIUM_LIBS="$OUTBOX_DEBEZIUM_LIBS" PG_REGRESS="$PGI$($PG_BIN/pg_config --pkglibdir)/pgxs/src/test/regress/pg_regress" PERL5LIB="$PGI$($PG_BIN/pg_config --pkglibdir)/pgxs/src/test/perl" \
  BENCH_GIT="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || true)" \
  BENCH_MODULE_MD5="$(md5sum < "$ROOT/outbox.so" | cut -d' ' -f1)" \
  BENCH_LIBRDKAFKA="$(dpkg-query -W -f='${Version}' librdkafka1 2>/dev/null || true)" \
  perl "$BENCH/bench.pl" --work "$WORK" --install-path "$PGI$(dirname "$PG_BIN")" --helpers "$WORK/bin" \
  --command "bash bench/run.sh $*" "$@") || rc=$?
# One file holds several sets: a real-Kafka run replaces only the key
# real_kafka, a run of the debezium part alone only the key debezium, of
# the tenants or topics part alone only its key (tenants_real_kafka on
# real Kafka), a mock run
# everything but those keys.
if [ -f "$WORK/results.json" ]; then
  mkdir -p "$(dirname "$OUT")"
  perl -MJSON::PP -e '
    my ($new, $out, $key) = @ARGV;
    my $read = sub { open my $fh, "<", $_[0] or return {}; local $/; JSON::PP::decode_json(<$fh>) };
    my ($doc, $old) = ($read->($new), -f $out ? $read->($out) : {});
    if ($key ne "mock") { $old->{$key eq "real" ? "real_kafka" : $key} = $doc; $doc = $old; }
    else { exists $old->{$_} and $doc->{$_} = $old->{$_} for qw(real_kafka debezium tenants tenants_real_kafka topics topics_real_kafka); }
    open my $fh, ">", "$out.tmp" or die "$out.tmp: $!";
    print $fh JSON::PP->new->pretty->canonical->encode($doc);
    close $fh or die "$out.tmp: $!";
    rename "$out.tmp", $out or die "$out: $!";' "$WORK/results.json" "$OUT" "$KEY"
  echo "results written to $OUT (kafka: $KAFKA, key: $KEY)"
fi
[ -z "$LOG_COPY" ] || [ ! -f "$WORK/server.log" ] || cp "$WORK/server.log" "$LOG_COPY"
exit $rc
