#!/usr/bin/env bash
# Tests the CloudNativePG image (scripts/image.sh) the way CloudNativePG runs
# it: read by a registry client (skopeo), its layer unpacked into
# /extensions/outbox of a Debian system that has PostgreSQL 18 and nothing
# else (no librdkafka, no protobuf-c), a server
# whose extension_control_path, dynamic_library_path and
# shared_preload_libraries are what CloudNativePG writes for the image, no
# LD_LIBRARY_PATH; then the demo's core: CREATE EXTENSION, events committed
# reach the broker, a rolled-back one does not, read back with kcat.
# The server's system is sid's (the one Debian suite with PostgreSQL 18),
# made once into $OUTBOX_CACHE/cnpg-sid; the project's broker and kcat run
# on the machine, on loopback.
# Usage (as root): bash scripts/image_test.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"

MAJOR=18 SUITE=sid
SROOT=$CACHE/cnpg-$SUITE
EXT=/extensions/outbox
MIRROR=http://deb.debian.org/debian
fail() { echo "IMAGE TEST FAILED: $*"; exit 1; }
in_sroot() { chroot "$SROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

make_workdir
started=$SECONDS
bash "$ROOT/scripts/image.sh" "$WORK/image" 2>&1 | grep --line-buffered -v 'protoc-c. is deprecated'
t_build=$((SECONDS - started))

# The server's system: minbase and postgresql-18 (its cluster not made).
exec 7>"$SROOT.lock"
flock 7
unmount_sroot() { for d in /proc /dev; do mountpoint -q "$SROOT$d" && umount --lazy "$SROOT$d"; done; true; }
cleanup_push unmount_sroot
if [ "$(cat "$SROOT/.pg_outbox-packages" 2>/dev/null)" != "postgresql-$MAJOR" ]; then
  log "debootstrap $SUITE with postgresql-$MAJOR alone into $SROOT"
  rm -rf "$SROOT"
  debootstrap --variant=minbase "$SUITE" "$SROOT" "$MIRROR" >"$SROOT.log" 2>&1 || { tail -n 30 "$SROOT.log"; exit 1; }
  printf '#!/bin/sh\nexit 101\n' >"$SROOT/usr/sbin/policy-rc.d"; chmod 755 "$SROOT/usr/sbin/policy-rc.d"
  mkdir -p "$SROOT/etc/postgresql-common"
  echo "create_main_cluster = false" >"$SROOT/etc/postgresql-common/createcluster.conf"
  mount -t proc proc "$SROOT/proc"; mount --bind /dev "$SROOT/dev"
  in_sroot apt-get -qq -o Acquire::Check-Valid-Until=false update
  in_sroot apt-get install -y -qq --no-install-recommends "postgresql-$MAJOR" >>"$SROOT.log" 2>&1 \
    || { tail -n 30 "$SROOT.log"; exit 1; }
  echo "postgresql-$MAJOR" >"$SROOT/.pg_outbox-packages"
fi
mountpoint -q "$SROOT/proc" || mount -t proc proc "$SROOT/proc"
mountpoint -q "$SROOT/dev" || mount --bind /dev "$SROOT/dev"
PG=/usr/lib/postgresql/$MAJOR/bin
log "$(in_sroot "$PG/postgres" --version) in $SUITE, with nothing of pg_outbox's"
libs=$(in_sroot ldconfig -p)
! grep -E 'librdkafka|libprotobuf-c|libcurl' <<<"$libs" || fail "the server's system has librdkafka, protobuf-c or libcurl"
for so in $(cat "$WORK/image/server-libs.txt"); do
  grep -q "^[[:space:]]*$so " <<<"$libs" || fail "image.sh takes $so to be the server's, but $SUITE with postgresql-$MAJOR lacks it"
done
[ -z "$(find "$SROOT/usr" -name 'outbox*')" ] || fail "the server's system has files of pg_outbox"

# The image as a runtime reads it: index, manifest, layer, each checked
# against its digest, the layer against the config's diff_id.
log "unpacking the image's layer into $EXT"
OCI=$WORK/image/oci
for b in "$OCI"/blobs/sha256/*; do
  [ "$(sha256sum "$b" | cut -d' ' -f1)" = "$(basename "$b")" ] || fail "blob $(basename "$b") does not match its digest"
done
manifest=$(sed -n 's/.*"digest":"sha256:\([0-9a-f]*\)".*/\1/p' "$OCI/index.json")
layer=$(sed -n 's/.*"layers":\[{"digest":"sha256:\([0-9a-f]*\)".*/\1/p' "$OCI/blobs/sha256/$manifest")
config=$(sed -n 's/.*"config":{"digest":"sha256:\([0-9a-f]*\)".*/\1/p' "$OCI/blobs/sha256/$manifest")
grep -q "\"diff_ids\":\[\"sha256:$(gzip -dc "$OCI/blobs/sha256/$layer" | sha256sum | cut -d' ' -f1)\"\]" \
  "$OCI/blobs/sha256/$config" || fail "the layer does not match the config's diff_id"
# and as a registry client reads it (skopeo checks every digest on a copy)
tag=$(sed -n 's/.*"org.opencontainers.image.ref.name":"\([^"]*\)".*/\1/p' "$OCI/index.json")
skopeo copy -q "oci:$OCI:$tag" "dir:$WORK/copied" || fail "skopeo cannot copy the image"
[ "$(skopeo inspect --format '{{.Digest}}' "oci-archive:$WORK/image/outbox-cnpg.tar")" = "sha256:$manifest" ] \
  || fail "the archive's manifest is not the layout's"
rm -rf "$SROOT/extensions"; mkdir -p "$SROOT$EXT"
tar -xzf "$OCI/blobs/sha256/$layer" -C "$SROOT$EXT"
(cd "$SROOT$EXT" && find . -type f | sort | sed 's/^/  /')

[ -x "$ROOT/tools/outbox-broker" ] || make -C "$ROOT" -s PG_CONFIG="$PG_BIN/pg_config" tools/outbox-broker
"$ROOT/tools/outbox-broker" --brokers 1 --topic orders:1 --topic payments:1 \
  --bootstrap-file "$WORK/bootstrap" </dev/null >"$WORK/broker.log" 2>&1 &
cleanup_push "kill $!"
wait_for_file "$WORK/bootstrap" || { cat "$WORK/broker.log"; fail "the broker did not start"; }
BOOTSTRAP=$(cat "$WORK/bootstrap")

# The settings CloudNativePG writes for .spec.postgresql.extensions (it
# appends the image's share and lib) and shared_preload_libraries, and a
# Kafka secrets file as Kubernetes mounts a Secret for the pods' fsGroup:
# root's, mode 0440, group postgres.
started=$SECONDS
DATA=/tmp/cnpg-data SECRETS=/projected/kafka
rm -rf "$SROOT$DATA" "$SROOT/projected"
mkdir -p "$SROOT$SECRETS"
echo "client.id = pg-outbox-cnpg" >"$SROOT$SECRETS/secret.conf"
cp "$SROOT$SECRETS/secret.conf" "$SROOT$SECRETS/world.conf"
chmod 0440 "$SROOT$SECRETS/secret.conf"; chmod 0444 "$SROOT$SECRETS/world.conf"
chgrp "$(in_sroot id -g postgres)" "$SROOT$SECRETS"/*.conf
as_postgres() { in_sroot runuser -u postgres -- "$@"; }
as_postgres "$PG/initdb" -D "$DATA" -A trust >/dev/null
cat >>"$SROOT$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '/tmp'
extension_control_path = '\$system:$EXT/share'
dynamic_library_path = '\$libdir:$EXT/lib'
shared_preload_libraries = 'outbox'
outbox.brokers = '$BOOTSTRAP'
outbox.kafka_config_file = '$SECRETS/secret.conf'
EOF
as_postgres "$PG/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w start >/dev/null \
  || { tail -n 20 "$SROOT$DATA/server.log"; fail "the server did not start"; }
cleanup_push "chroot $SROOT runuser -u postgres -- $PG/pg_ctl -D $DATA -m immediate -w stop >/dev/null"
psql_image() { as_postgres "$PG/psql" -X -h /tmp -d postgres -v ON_ERROR_STOP=1 "$@"; }

log "the libraries the server loaded, from the image alone"
pid=$(head -n 1 "$SROOT$DATA/postmaster.pid")
maps=$(grep -oE '/[^ ]*(outbox\.so|librdkafka\.so[.0-9]*|libprotobuf-c\.so[.0-9]*)$' "/proc/$pid/maps" | sort -u)
echo "$maps" | sed 's/^/  /'
for so in lib/outbox.so system/librdkafka.so.1 system/libprotobuf-c.so.1; do
  grep -q "$EXT/$so\$" <<<"$maps" || fail "the server did not load $EXT/$so"
done

log "the Secret's file taken, a world-readable one refused"
[ "$(psql_image -Atc 'SHOW outbox.kafka_config_file')" = "$SECRETS/secret.conf" ] \
  || { tail -n 20 "$SROOT$DATA/server.log"; fail "the server refused the root-owned 0440 secrets file"; }
refused=$(psql_image -c "ALTER SYSTEM SET outbox.kafka_config_file = '$SECRETS/world.conf'" 2>&1) \
  && fail "a world-readable secrets file was taken"
echo "$refused"
grep -q 'world.conf" has group or world access' <<<"$refused" || fail "a world-readable secrets file was not refused"

log "the demo's core: CREATE EXTENSION, two transactions committed, one rolled back"
psql_image -q <<'SQL' || fail "the SQL failed"
CREATE EXTENSION outbox;
CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL);
CREATE FUNCTION orders_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_send('orders', to_jsonb(NEW), NEW.customer);
    RETURN NEW;
END $$;
CREATE TRIGGER orders_outbox AFTER INSERT OR UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_to_outbox();
BEGIN;
INSERT INTO orders VALUES (1, 'alice', 42.50);
SELECT outbox_send('payments', '{"order": 1, "amount": 42.50}'::jsonb, 'alice');
COMMIT;
BEGIN;
INSERT INTO orders VALUES (2, 'bob', 13.00);
SELECT outbox_send('payments', '{"order": 2, "amount": 13.00}'::jsonb, 'bob');
ROLLBACK;
UPDATE orders SET total = 40.00 WHERE id = 1;
SQL
psql_image -Atc "SELECT extversion FROM pg_extension WHERE extname = 'outbox'"
for _ in $(seq 300); do
  [ "$(psql_image -Atc 'SELECT count(*) FROM outbox')" = 0 ] && break
  sleep 0.1
done
[ "$(psql_image -Atc 'SELECT count(*) FROM outbox')" = 0 ] \
  || { tail -n 20 "$SROOT$DATA/server.log"; fail "the outbox did not drain"; }

log "what kcat reads back"
read_keys() { kcat -C -b "$BOOTSTRAP" -t "$1" -e -q -f '%k\n' | xargs; }
orders=$(read_keys orders) payments=$(read_keys payments)
echo "orders: $orders; payments: $payments"
kcat -C -b "$BOOTSTRAP" -t payments -c 1 -e -q -D '' -f '%s' |
  protoc --proto_path="$ROOT/proto" --decode=outbox.v1.Event outbox.proto | tee "$WORK/event.txt"
[ "$orders" = "alice alice" ] && [ "$payments" = alice ] || fail "committed events missing, or a rolled-back one delivered"
grep -q '\\"order\\": 1' "$WORK/event.txt" || grep -q '"order": 1' "$WORK/event.txt" \
  || fail "the payment's payload is not in its envelope"
echo "FIGURES image_test build_s=$t_build run_s=$((SECONDS - started)) image_bytes=$(stat -c %s "$WORK/image/outbox-cnpg.tar")"
echo "IMAGE TEST OK"
