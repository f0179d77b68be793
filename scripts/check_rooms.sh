#!/usr/bin/env bash
# The rooms of src/ (src/README.md) and which rooms each may include: an
# include that runs back up (the Kafka layer reaching the table, shared
# memory reaching a worker, ...) fails here before anything is built.
# Usage: bash scripts/check_rooms.sh [--graph]   (--graph: also print the
#        arrows between rooms, with how many includes each stands for)
set -euo pipefail
cd "$(dirname "$0")/../src"

# room: the rooms its files may include besides their own and the ground
declare -A may=(
  [entry]="shared schema send table kafka worker"
  [shared]=""
  [schema]="shared"
  [table]="shared schema"
  [kafka]="shared schema"
  [send]="shared schema table kafka"
  [worker]="shared schema table kafka"
)

room_of() {
  case $1 in
    module.c) echo entry ;;
    */*) dirname "$1" ;;
    *) echo ground ;;
  esac
}

# "file room target header" for each include of a project header
arrows() {
  local file h
  for file in *.[ch] */*.[ch]; do
    case $file in *.pb-c.*) continue ;; esac
    sed -n 's/^#include "\([a-z_]*\/\{0,1\}[a-z_.-]*\.h\)"$/\1/p' "$file" | while read -r h; do
      [ -f "$h" ] || [ "$h" = kafka/outbox.pb-c.h ] || continue
      echo "$file $(room_of "$file") $(room_of "$h") $h"
    done
  done
}

bad=0
while read -r file room target header; do
  [ "$target" = ground ] || [ "$target" = "$room" ] && continue
  [ "$room" != ground ] && [[ " ${may[$room]} " == *" $target "* ]] && continue
  echo "src/$file includes $header: $room/ may not include $target/" >&2
  bad=1
done < <(arrows)

if [ "${1:-}" = --graph ]; then
  arrows | awk '$2 != $3 { n[$2 " -> " $3]++ } END { for (a in n) print a ": " n[a] }' | sort
fi
exit $bad
