#!/usr/bin/env bash
# Builds pg_outbox's CloudNativePG extension image: an OCI image of one
# layer, laid out as CloudNativePG mounts an image volume for PostgreSQL 18
# (/extensions/outbox; docs/operations.md, CloudNativePG):
#   share/extension/  outbox.control and the SQL scripts (extension_control_path)
#   lib/              outbox.so (dynamic_library_path), its RPATH $ORIGIN/../system
#   system/           the shared libraries outbox.so needs that a PostgreSQL 18
#                     server does not load itself (librdkafka, protobuf-c, libcurl...)
#   licenses/         the Debian copyright file of each package system/ takes from
# CloudNativePG's PostgreSQL 18 images are Debian trixie, so it is built in a
# trixie root with trixie's compiler, librdkafka and protobuf-c, against the
# server headers of sid's postgresql-server-dev-18 (no trixie suite has
# PostgreSQL 18; the headers are the same source and packaging as PGDG's).
# The root and the headers are fetched once into $OUTBOX_CACHE; a second run
# is offline. Same tree, same digest: fixed mtimes, sorted entries.
# Usage (as root): bash scripts/image.sh [OUT]   (default ./image)
#   OUT/oci                 the OCI image layout (skopeo copy oci:OUT/oci:TAG ...)
#   OUT/outbox-cnpg.tar     the same as one tar (oci-archive:)
#   OUT/system.txt          system/'s libraries: soname, Debian package, version
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/majors.sh"
OUT=$(realpath -m "${1:-image}")
MAJOR=18 SUITE=trixie
CACHE=${OUTBOX_CACHE:-/var/cache/pg_outbox}
BROOT=$CACHE/image-$SUITE
MIRROR=http://deb.debian.org/debian
PG_CONFIG=/usr/lib/postgresql/$MAJOR/bin/pg_config
WORKDIR=/tmp/pg_outbox-image
VERSION=$(sed -n 's/^EXTVERSION = //p' "$ROOT/Makefile")
# every tar and the config say this time, not the build's
EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}
# The libraries every PostgreSQL 18 server of Debian's packaging links
# (glibc's, and those of postgres itself): never copied, the server's own
# are already loaded. scripts/image_test.sh checks that a system with only
# postgresql-18 installed has each (OUT/server-libs.txt).
SERVER_LIBS="ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1
libresolv.so.2 libssl.so.3 libcrypto.so.3 libgssapi_krb5.so.2 libkrb5.so.3 libk5crypto.so.3
libcom_err.so.2 libkrb5support.so.0 libkeyutils.so.1 libldap.so.2 liblber.so.2 libsasl2.so.2
libzstd.so.1 liblz4.so.1 libz.so.1"

log() { printf '\n== [+%d s] [image] %s\n' "$SECONDS" "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "image.sh: run as root (debootstrap, chroot)" >&2; exit 1; }
in_root() { chroot "$BROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

mkdir -p "$CACHE"
exec 8>"$BROOT.lock"
flock 8
MOUNTS=()
cleanup() {
  local i
  for ((i=${#MOUNTS[@]}-1; i>=0; i--)); do umount "${MOUNTS[$i]}" 2>/dev/null || umount --lazy "${MOUNTS[$i]}"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for d in /proc /dev; do
  [ -d "$BROOT$d" ] || continue
  mountpoint -q "$BROOT$d" && umount --lazy "$BROOT$d"  # left by a killed run
done

# The build root: a trixie minbase with the build's packages
# (debian/control.in's, but PostgreSQL's), made once; its list is its stamp.
PACKAGES=$(build_packages "$MAJOR" | tr ' ' '\n' | grep -v '^postgresql' | xargs)
if [ ! -x "$BROOT/usr/bin/apt-get" ]; then
  # the machine's apt, one at a time (scripts/chroot.sh's lock)
  command -v debootstrap >/dev/null ||
    flock "$CACHE/apt.lock" sh -c 'command -v debootstrap >/dev/null ||
      { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }'
  log "debootstrap $SUITE into $BROOT"
  rm -rf "$BROOT"
  debootstrap --variant=minbase "$SUITE" "$BROOT" "$MIRROR" >"$BROOT.debootstrap.log" 2>&1 \
    || { tail -n 30 "$BROOT.debootstrap.log"; exit 1; }
fi
mount -t proc proc "$BROOT/proc"; MOUNTS+=("$BROOT/proc")
mount --bind /dev "$BROOT/dev"; MOUNTS+=("$BROOT/dev")
if [ "$(cat "$BROOT/.pg_outbox-packages" 2>/dev/null)" != "$PACKAGES" ]; then
  log "installing $PACKAGES"
  in_root apt-get -qq update
  in_root apt-get install -y -qq --no-install-recommends $PACKAGES >"$BROOT.apt.log" 2>&1 \
    || { tail -n 30 "$BROOT.apt.log"; exit 1; }
  echo "$PACKAGES" >"$BROOT/.pg_outbox-packages"
fi
# PostgreSQL 18's headers, pg_config and PGXS: sid's packages, unpacked, not
# installed (their dependencies are sid's; pg_config needs glibc 2.38, trixie
# has 2.41)
if [ ! -x "$BROOT$PG_CONFIG" ]; then
  log "fetching sid's postgresql-server-dev-$MAJOR and postgresql-client-$MAJOR"
  echo "deb $MIRROR sid main" >"$BROOT/etc/apt/sid.list"
  SID="-o Dir::Etc::SourceList=/etc/apt/sid.list -o Dir::Etc::SourceParts=/dev/null
       -o Dir::State::Lists=/var/lib/apt/sid-lists -o Acquire::Check-Valid-Until=false"
  mkdir -p "$BROOT/var/lib/apt/sid-lists/partial" "$BROOT/tmp/sid"
  in_root apt-get -qq $SID update
  in_root sh -c "cd /tmp/sid && apt-get -qq $(echo $SID) download postgresql-server-dev-$MAJOR postgresql-client-$MAJOR" 2>/dev/null
  for deb in "$BROOT"/tmp/sid/*.deb; do dpkg-deb -x "$deb" "$BROOT"; done
  rm -rf "$BROOT/tmp/sid"
fi
PG_VERSION=$(in_root "$PG_CONFIG" --version)
KAFKA_VERSION=$(in_root dpkg-query -W -f='${Version}' librdkafka1)
log "$PG_VERSION headers, $SUITE's librdkafka $KAFKA_VERSION"

# Build and install into a staging directory. The RPATH, written as
# DT_RPATH (not RUNPATH), is searched for librdkafka's own dependencies
# too, so system/ needs no LD_LIBRARY_PATH. Bitcode (with_llvm) is for JIT
# inlining, which the extension does not need.
rm -rf "$BROOT$WORKDIR"; mkdir -p "$BROOT$WORKDIR/src"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$BROOT$WORKDIR/src" -xf -
log "building outbox.so"
MAKE_ARGS=(-C "$WORKDIR/src" -s PG_CONFIG="$PG_CONFIG" with_llvm=no WERROR=1
  'LDFLAGS_SL=-Wl,--disable-new-dtags,-rpath,\$$ORIGIN/../system')
in_root make "${MAKE_ARGS[@]}" all >/dev/null
in_root make "${MAKE_ARGS[@]}" DESTDIR="$WORKDIR/stage" install >/dev/null

# The layer's tree
L=$BROOT$WORKDIR/layer
mkdir -p "$L/lib" "$L/share/extension" "$L/system" "$L/licenses/pg_outbox"
cp "$BROOT$WORKDIR/stage$(in_root "$PG_CONFIG" --pkglibdir)/outbox.so" "$L/lib/"
cp "$BROOT$WORKDIR/stage$(in_root "$PG_CONFIG" --sharedir)"/extension/outbox* "$L/share/extension/"
in_root strip --strip-debug "$WORKDIR/layer/lib/outbox.so"
cp "$ROOT/META.json" "$L/licenses/pg_outbox/"
# system/: each library outbox.so needs, directly or through another one
# of system/, that is not the server's (nor one only a server's library
# needs), under its soname; licenses/: its package's copyright file
declare -A PATH_OF=() TAKEN=()
while read -r soname path; do PATH_OF[$soname]=$path; done < <(
  in_root ldd "$WORKDIR/layer/lib/outbox.so" | awk '$2 == "=>" { print $1, $3 }')
needed() { in_root readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
take() {
  local soname path pkg
  for soname in $(needed "$1"); do
    [[ " $(echo $SERVER_LIBS) " == *" $soname "* || -n "${TAKEN[$soname]:-}" ]] && continue
    path=${PATH_OF[$soname]:-not}
    [ "$path" != "not" ] || { echo "image.sh: $soname not found in the build root" >&2; exit 1; }
    TAKEN[$soname]=1
    cp -L "$BROOT$path" "$L/system/$soname"
    pkg=$(in_root dpkg -S "$(in_root readlink -f "$path")" | cut -d: -f1 | head -1)
    mkdir -p "$L/licenses/$pkg"
    cp "$BROOT/usr/share/doc/$pkg/copyright" "$L/licenses/$pkg/"
    echo "$soname $pkg $(in_root dpkg-query -W -f='${Version}' "$pkg")" >>"$BROOT$WORKDIR/system.txt"
    take "$path"
  done
}
take "$WORKDIR/layer/lib/outbox.so"
sort -o "$BROOT$WORKDIR/system.txt" "$BROOT$WORKDIR/system.txt"
log "system/: $(cut -d' ' -f1 "$BROOT$WORKDIR/system.txt" | xargs)"

# The OCI image layout, written directly: blobs named by their sha256.
# tar_reproducible DIR: DIR's tree as a tar on stdout, the same bytes for
# the same files (sorted, fixed owner, mtime and mode bits)
tar_reproducible() {
  find "$1" -exec touch -h -d "@$EPOCH" {} +
  tar -C "$1" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mode=go-w -cf - .
}
OCI=$OUT/oci
rm -rf "$OCI"; mkdir -p "$OCI/blobs/sha256"
# blob FILE: FILE moved into blobs/, its descriptor's digest and size printed
blob() {
  local sum size
  sum=$(sha256sum "$1" | cut -d' ' -f1); size=$(stat -c %s "$1")
  mv "$1" "$OCI/blobs/sha256/$sum"
  echo "sha256:$sum $size"
}
chmod -R a+rX,go-w "$L"
tar_reproducible "$L" >"$OUT/layer.tar"
diff_id=sha256:$(sha256sum "$OUT/layer.tar" | cut -d' ' -f1)
gzip -n -9 -f "$OUT/layer.tar"
read -r layer_digest layer_size < <(blob "$OUT/layer.tar.gz")
created=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
TAG=$VERSION-$MAJOR-$SUITE
# (the JSON is written by hand: every value here is a digest, a size or
# a fixed word, nothing to escape)
printf '{"architecture":"amd64","config":{"User":"65532:65532"},"created":"%s","history":[{"created":"%s","created_by":"scripts/image.sh"}],"os":"linux","rootfs":{"diff_ids":["%s"],"type":"layers"}}' \
  "$created" "$created" "$diff_id" >"$OUT/config.json"
read -r config_digest config_size < <(blob "$OUT/config.json")
printf '{"annotations":{"org.opencontainers.image.created":"%s","org.opencontainers.image.title":"pg_outbox","org.opencontainers.image.version":"%s"},"config":{"digest":"%s","mediaType":"application/vnd.oci.image.config.v1+json","size":%s},"layers":[{"digest":"%s","mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":%s}],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}' \
  "$created" "$VERSION" "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$OUT/manifest.json"
read -r manifest_digest manifest_size < <(blob "$OUT/manifest.json")
printf '{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"%s"},"digest":"%s","mediaType":"application/vnd.oci.image.manifest.v1+json","platform":{"architecture":"amd64","os":"linux"},"size":%s}],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}\n' \
  "$TAG" "$manifest_digest" "$manifest_size" >"$OCI/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$OCI/oci-layout"
tar_reproducible "$OCI" >"$OUT/outbox-cnpg.tar"
cp "$BROOT$WORKDIR/system.txt" "$OUT/system.txt"
echo $SERVER_LIBS | tr ' ' '\n' >"$OUT/server-libs.txt"
rm -rf "$BROOT$WORKDIR"

log "image $TAG: manifest $manifest_digest, layer $layer_size bytes (gzip)"
echo "FIGURES image tag=$TAG manifest=$manifest_digest layer_bytes=$layer_size" \
  "archive_bytes=$(stat -c %s "$OUT/outbox-cnpg.tar") oci=$OCI"
