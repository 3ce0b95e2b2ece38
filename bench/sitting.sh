# Sourced by the side-by-side scripts: the repository root as working
# folder, qat's binary (BUILD, default build), PyTorch's interpreter, the
# sitting's header line and pick PATTERN LABEL (matching lines, labelled).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
Q=${BUILD:-build}/qat
PY=/usr/bin/python3
echo "# $(date) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores, qat $(git rev-parse --short HEAD) ($Q), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "# AMX-INT8 in /proc/cpuinfo: $(grep -q -w amx_int8 /proc/cpuinfo && echo yes || echo no)"
pick() { grep -E "$1" | sed "s/^/$2 /"; }
