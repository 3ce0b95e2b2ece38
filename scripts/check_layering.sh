#!/usr/bin/env bash
# Checks that every #include follows the arrows of docs/architecture.md: a
# part includes only itself and the parts listed for it here, and never a
# header of the forbidden list. Run by ctest ("layering"); prints each
# forbidden include with its file and line.
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
  [quant/int8_training]="core layers quant quant/integer quant/int8_training"
  [quant/sim]="core layers quant quant/observe quant/integer quant/int8_training quant/sim"
  [quant/convert]="core layers quant quant/observe quant/integer quant/int8_training quant/sim quant/convert"
)
# part -> headers of allowed folders it must still not include (regex):
# the integer runtime uses core's tensors and helpers, never autograd or its ops.
declare -A forbidden=(
  [quant/integer]='^core/(autograd\.h|ops\.h|ops/)'
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

sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh'
  else
    find core layers optim data models quant -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \)
  fi
}

bad=0
checked=0
while IFS= read -r file; do
  [ -f "$file" ] || continue  # deleted in the work tree, still in git's index
  part=$(part_of "$file")
  [ -n "${allowed[$part]+x}" ] || continue
  checked=$((checked + 1))
  while IFS=: read -r line inc; do
    target=$(part_of "$inc")
    [ -n "$target" ] || continue
    ok=0
    for a in ${allowed[$part]}; do [ "$a" = "$target" ] && ok=1; done
    if [ -n "${forbidden[$part]+x}" ] && [[ "$inc" =~ ${forbidden[$part]} ]]; then ok=0; fi
    if [ $ok -eq 0 ]; then
      echo "$file:$line: includes \"$inc\" ($part may not depend on it)"
      bad=1
    fi
  done < <(grep -n -o -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$file" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"(.*)"/\1:\2/')
done < <(sources)
if [ $checked -lt 50 ]; then
  echo "layering: only $checked source files found under the parts; is this the repository root?"
  exit 1
fi
if [ $bad -ne 0 ]; then
  echo "layering: forbidden includes (see docs/architecture.md)"
  exit 1
fi
echo "layering: every include of $checked files follows the arrows"
