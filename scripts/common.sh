# Shared by scripts/demo.sh and scripts/test.sh: install what is missing
# (Debian 12, as root), build and install the extension, and run things as
# an unprivileged user in a temporary directory that is always removed.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/scripts/majors.sh"
PG_MAJOR=${OUTBOX_PG_MAJOR:-$(machine_major)}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
RUN_USER=postgres
# the build's packages, then the tests': protoc decodes the envelope, kcat
# reads Kafka, IPC::Run runs the TAP tests, pg_repack is t/031's, pip
# fetches the librdkafka t/104 runs SCRAM on (ensure_newer_librdkafka),
# skopeo reads the CloudNativePG image (scripts/image_test.sh), a Python
# venv holds the Confluent deserializers and curl talks to the registries
# (tools/registry)
PACKAGES="$(build_packages "$PG_MAJOR") protobuf-compiler kcat libipc-run-perl
postgresql-$PG_MAJOR-repack python3-pip skopeo python3-venv curl"

# Downloads live outside the tree, so a second run is offline: the real
# Kafka cluster's jars (tools/kafka/pom.xml) and Maven's own repository.
CACHE=${OUTBOX_CACHE:-/var/cache/pg_outbox}
export OUTBOX_KAFKA_LIBS=$CACHE/kafka/libs
export OUTBOX_DEBEZIUM_LIBS=$CACHE/debezium/libs
export OUTBOX_XA_LIBS=$CACHE/xa/libs
export OUTBOX_REGISTRY_APP=$CACHE/registry/apicurio
export OUTBOX_REGISTRY_VENV=$CACHE/registry/venv

# each line says the seconds since the script started, so that a long
# run's log shows where its time went
log() { printf '\n== [+%d s] %s\n' "$SECONDS" "$*"; }

# Installing packages and running as another user need root: a user with
# sudo is asked for it here, so the README's commands work for both.
if [ "$(id -u)" -ne 0 ]; then
  exec sudo bash "$0" "$@"
fi

ensure_packages() {
  local missing=()
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  # Node.js for tools/js (kafkajs, the TAP tests' second Kafka client):
  # Debian's nodejs and npm, unless a node with its npm is there already
  # (NodeSource's nodejs bundles npm and conflicts with Debian's)
  command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
  # Java and Maven for the real Kafka cluster (tools/kafka)
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    [ "$(id -u)" -eq 0 ] || { echo "run as root to install packages" >&2; exit 1; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # the Debian package starts a cluster on 5432; the scripts never use it
  id "$RUN_USER" >/dev/null 2>&1 || useradd --system --create-home "$RUN_USER"
}

build_and_install() {
  log "building and installing the extension"
  bash "$ROOT/scripts/check_rooms.sh"
  make -C "$ROOT" -s PG_CONFIG=$PG_BIN/pg_config WERROR=1 all tools/outbox-broker >/dev/null
  make -C "$ROOT" -s PG_CONFIG=$PG_BIN/pg_config WERROR=1 install >/dev/null
}

# The jars tools/$1/pom.xml pins into directory $2, fetched again only
# when the pom changed; Maven's repository is cached beside them.
ensure_pinned_jars() {
  local pom=$ROOT/tools/$1/pom.xml libs=$2 build=$CACHE/$1/build sum
  sum=$(sha256sum "$pom" | cut -d' ' -f1)
  [ "$(cat "$libs/.pom.sha256" 2>/dev/null)" = "$sum" ] && return 0
  log "fetching the jars of tools/$1/pom.xml into $libs"
  rm -rf "$libs" "$build"
  mkdir -p "$build"
  cp "$pom" "$build/"
  mvn -q -B -f "$build/pom.xml" -Dmaven.repo.local="$CACHE/m2" -Dlibs.dir="$libs" package
  rm -rf "$build"
  echo "$sum" > "$libs/.pom.sha256"
  chmod -R a+rX "$CACHE"
}

# kafkajs and the CloudEvents SDK, exactly as tools/js/package-lock.json
# pins them: the tests' second Kafka client, and what creates topics on a
# real cluster (t/KafkaCluster.pm). Again only when the lock changed.
ensure_js_packages() {
  [ ! "$ROOT/tools/js/node_modules/.package-lock.json" -nt "$ROOT/tools/js/package-lock.json" ] || return 0
  log "installing tools/js's packages (npm ci)"
  (cd "$ROOT/tools/js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

# Kafka's jars, for the real-Kafka tier, the demo and the benchmark.
ensure_kafka_jars() { ensure_pinned_jars kafka "$OUTBOX_KAFKA_LIBS"; }

# Kafka Connect and Debezium's PostgreSQL connector, for the benchmark's
# debezium part.
ensure_debezium_jars() { ensure_pinned_jars debezium "$OUTBOX_DEBEZIUM_LIBS"; }

# The PostgreSQL JDBC driver, for the XA client of t/058_xa_jdbc.pl.
ensure_xa_jars() { ensure_pinned_jars xa "$OUTBOX_XA_LIBS"; }

# librdkafka 2.16.0 for t/104's SCRAM cases (Debian 12's 2.0.2 cannot log
# in to Kafka 4 with SCRAM: fixed in 2.6.1), from the pinned PyPI wheel
# of confluent-kafka 2.16.1, which bundles it linked statically but for
# libc: extracted as librdkafka.so.1 alone in a directory that only the
# test puts in LD_LIBRARY_PATH (OUTBOX_TEST_LIBRDKAFKA); Debian's stays
# what everything else loads.
NEWER_LIBRDKAFKA_WHEEL=confluent_kafka-2.16.1-cp311-cp311-manylinux_2_28_x86_64.whl
NEWER_LIBRDKAFKA_SHA256=24f613cc81a856b6fbb2d7d11044a9aa770044eecc1f83ff84618688b056be06
ensure_newer_librdkafka() {
  local wheel=$CACHE/pypi/$NEWER_LIBRDKAFKA_WHEEL dir=$CACHE/librdkafka-2.16.0
  [ "$(uname -m)" = x86_64 ] || return 0
  if [ ! -f "$dir/librdkafka.so.1" ]; then
    [ -f "$wheel" ] || { log "fetching $NEWER_LIBRDKAFKA_WHEEL"; pip3 download -q --no-deps \
      --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
      -d "$CACHE/pypi" confluent-kafka==2.16.1; }
    echo "$NEWER_LIBRDKAFKA_SHA256  $wheel" | sha256sum -c --quiet
    rm -rf "$dir.new" && mkdir -p "$dir.new"
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
[lib] = [n for n in z.namelist() if n.startswith("confluent_kafka.libs/librdkafka-")]
open(sys.argv[2], "wb").write(z.read(lib))' "$wheel" "$dir.new/librdkafka.so.1"
    chmod -R a+rX "$dir.new" && rm -rf "$dir" && mv "$dir.new" "$dir"
  fi
  export OUTBOX_TEST_LIBRDKAFKA=$dir
}

# The Schema Registry tests' tools (tools/registry/README.md): Apicurio
# Registry, unpacked from Maven Central, and a venv of the Confluent
# deserializers, from wheels pip fetches once into $CACHE/pypi (other
# tools' wheels may lie there too) and installs offline; again only when
# tools/registry/requirements.txt changed. Apicurio needs Java 21 or
# later, which Debian 12 lacks: t/SchemaRegistry.pm finds a Temurin JDK.
ensure_registry_tools() {
  ensure_pinned_jars registry "$OUTBOX_REGISTRY_APP"
  local req=$ROOT/tools/registry/requirements.txt venv=$OUTBOX_REGISTRY_VENV sum
  sum=$(sha256sum "$req" | cut -d' ' -f1)
  [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" = "$sum" ] && return 0
  log "installing tools/registry/requirements.txt into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q --no-index --find-links "$CACHE/pypi" -r "$req" 2>/dev/null; then
    "$venv/bin/pip" download -q --only-binary=:all: -d "$CACHE/pypi" -r "$req"
    "$venv/bin/pip" install -q --no-index --find-links "$CACHE/pypi" -r "$req"
  fi
  echo "$sum" > "$venv/.requirements.sha256"
  chmod -R a+rX "$CACHE/registry" "$CACHE/pypi"
}

# A temporary directory owned by the unprivileged user, removed on exit
# together with everything started in it (see cleanup_push).
WORK=""
CLEANUPS=()
cleanup_push() { CLEANUPS+=("$1"); }
run_cleanups() {
  local i
  for ((i=${#CLEANUPS[@]}-1; i>=0; i--)); do eval "${CLEANUPS[$i]}" || true; done
  # a process stopped just now may still be closing files in it
  [ -n "$WORK" ] && { rm -rf "$WORK" 2>/dev/null || { sleep 2; rm -rf "$WORK"; }; }
}
make_workdir() {
  WORK=$(mktemp -d /tmp/pg_outbox.XXXXXX)
  chown "$RUN_USER" "$WORK"
  trap run_cleanups EXIT
  trap 'exit 130' INT TERM
}

as_user() { runuser -u "$RUN_USER" -- "$@"; }

# start_kafka_in_background TREE DIR [--topic NAME:PARTITIONS]...: a real
# three-broker cluster in DIR (TREE/tools/kafka/cluster.pl, run as the
# unprivileged user, who must be able to read TREE). It writes its
# bootstrap list to DIR.bootstrap once the topics exist, its output to
# DIR.log, and stops when its stdin closes: a FIFO this shell holds open
# on fd 3 until stop_kafka_in_background or its exit.
KAFKA_PID=""
start_kafka_in_background() {
  local tree=$1 dir=$2; shift 2
  mkfifo "$dir.in"
  chown "$RUN_USER" "$dir.in"
  as_user env OUTBOX_KAFKA_LIBS="$OUTBOX_KAFKA_LIBS" perl "$tree/tools/kafka/cluster.pl" \
    --dir "$dir" --bootstrap-file "$dir.bootstrap" "$@" <"$dir.in" >"$dir.log" 2>&1 &
  KAFKA_PID=$!
  exec 3>"$dir.in"
  cleanup_push stop_kafka_in_background
}
# wait_for_file FILE: until FILE has content (a broker's bootstrap list)
# or no background job of this shell runs any more, at most 300 s; fails
# if FILE is still empty.
wait_for_file() {
  for _ in $(seq 3000); do
    [ -s "$1" ] || [ -z "$(jobs -r)" ] && break
    sleep 0.1
  done
  [ -s "$1" ]
}
stop_kafka_in_background() {
  exec 3>&-
  [ -z "$KAFKA_PID" ] || wait "$KAFKA_PID" || true
  KAFKA_PID=""
}
