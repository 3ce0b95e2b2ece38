#!/usr/bin/env bash
# Checks that every #include follows the arrows of docs/architecture.md: a
# part includes only itself and the parts listed for it here. Run by ctest
# ("layering"); prints each forbidden include with its file and line.
set -euo pipefail
cd "$(dirname "$0")/.."

# part (folder) -> the folders its files may include
declare -A allowed=(
  [core]="core"
  [layers]="core layers"
  [optim]="core optim"
  [data]="core data"
  [models]="core layers optim models"
  [quant]="core quant"
  [quant/observe]="core quant quant/observe"
  [quant/integer]="core quant quant/integer"
  [quant/sim]="core layers quant quant/observe quant/integer quant/sim"
  [quant/convert]="core layers quant quant/observe quant/integer quant/sim quant/convert"
)

# The folder an include path or a source file belongs to: its quant/ subfolder,
# else its top folder (core/ops/x.h belongs to core).
part_of() {
  case "$1" in
    quant/*/*) local rest=${1#quant/}; echo "quant/${rest%%/*}" ;;
    */*) echo "${1%%/*}" ;;
    *) echo "" ;;
  esac
}

bad=0
while IFS= read -r file; do
  part=$(part_of "$file")
  [ -n "${allowed[$part]+x}" ] || continue
  while IFS=: read -r line inc; do
    target=$(part_of "$inc")
    [ -n "$target" ] || continue
    ok=0
    for a in ${allowed[$part]}; do [ "$a" = "$target" ] && ok=1; done
    if [ $ok -eq 0 ]; then
      echo "$file:$line: includes \"$inc\" ($part may not depend on $target)"
      bad=1
    fi
  done < <(grep -n -o -E '^#include "[^"]+"' "$file" | sed -E 's/^([0-9]+):#include "(.*)"/\1:\2/')
done < <(git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.h' -o -name '*.cpp')
if [ $bad -ne 0 ]; then
  echo "layering: forbidden includes (see docs/architecture.md)"
  exit 1
fi
echo "layering: every include follows the arrows"
