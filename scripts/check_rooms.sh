#!/usr/bin/env bash
# The rooms of src/ (src/README.md) and which rooms each may include: an
# include that runs back up (the Kafka layer reaching the table, shared
# memory reaching a worker, ...) fails here before anything is built.
set -euo pipefail
cd "$(dirname "$0")/../src"

# room: the rooms its files may include besides their own and the ground
declare -A may=(
  [shared]=""
  [table]="shared"
  [kafka]="shared"
  [send]="shared table kafka"
  [worker]="shared table kafka"
)

bad=0
for file in *.[ch] */*.[ch]; do
  [ "$file" = module.c ] && continue          # the entry wires every room
  case $file in *.pb-c.*) continue ;; esac
  room=$(dirname "$file"); [ "$room" = . ] && room=ground
  while read -r included; do
    target=$(dirname "$included"); [ "$target" = . ] && target=ground
    [ "$target" = ground ] || [ "$target" = "$room" ] && continue
    [ "$room" != ground ] && [[ " ${may[$room]} " == *" $target "* ]] && continue
    echo "src/$file includes $included: $room/ may not include $target/" >&2
    bad=1
  done < <(sed -n 's/^#include "\([a-z_]*\/\{0,1\}[a-z_.-]*\.h\)"$/\1/p' "$file" |
           while read -r h; do [ -f "$h" ] || [ "$h" = kafka/outbox.pb-c.h ] && echo "$h"; done)
done
exit $bad
