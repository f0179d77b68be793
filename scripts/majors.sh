# What each tested PostgreSQL major needs, for scripts/common.sh and
# scripts/chroot.sh: the majors from scripts/majors (the one list of them)
# and the Debian packages a major builds with, the build dependencies taken
# from debian/control.in (the one list of them).

MAJORS_FILE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/majors
CONTROL_IN=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/debian/control.in

# the tested majors, in order
majors() { awk '!/^#/ && NF { print $1 }' "$MAJORS_FILE"; }
# major_field MAJOR how|suite|version: that field of MAJOR's line, empty
# if none (a version of `-`)
major_field() {
  awk -v m="$1" -v f="$2" '!/^#/ && $1 == m {
    v = (f == "how" ? $2 : f == "suite" ? $3 : $4); if (v != "-") print v }' "$MAJORS_FILE"
}
# the TAP tests every major but the machine's runs (scripts/chroot.sh,
# scripts/pypi.sh)
CORE_TESTS="t/001_delivery.pl t/003_abi_guard.pl t/011_crash.pl t/012_reload.pl t/013_standby.pl
t/020_poison.pl t/030_security.pl t/033_durability.pl t/040_upgrade.pl
t/050_databases.pl t/060_status.pl t/061_wait_events.pl"
# the major this machine runs every test on
machine_major() { awk '!/^#/ && $2 == "machine" { print $1; exit }' "$MAJORS_FILE"; }

# build_packages MAJOR: debian/control.in's Build-Depends without version
# constraints, its postgresql-all and debhelper-compat replaced by what a
# build of one major by hand needs (packaging, in chroot.sh, adds them back)
build_packages() {
  awk '/^Build-Depends:/ { sub(/^Build-Depends:/, ""); print; on = 1; next }
       on && /^[ \t]/ { print; next } { on = 0 }' "$CONTROL_IN" |
    sed 's/([^)]*)//g; s/,/ /g' | tr -s ' ' '\n' |
    grep -vE '^$|^debhelper-compat$|^postgresql-all$'
  echo "postgresql-$1 postgresql-server-dev-$1 make gcc"
}
