#!/usr/bin/env bash
# LLVM's OpenMP runtime (the Clang builds': build-clang, build-fuzz) registers
# each process in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> and removes the
# file at exit. A process that dies between creating and sizing it leaves it
# empty, and a later process given the same pid reads it at start-up and dies
# of SIGBUS. This removes the empty ones whose process is gone (left by
# earlier runs on this machine); run before the Clang binaries start.
set -euo pipefail
# Only this user's files: the name ends in the uid, so our processes never
# read another user's (which we could not remove anyway).
for f in /dev/shm/__KMP_REGISTERED_LIB_*_"$(id -u)"; do
  [ -f "$f" ] && [ ! -s "$f" ] || continue
  pid=${f#/dev/shm/__KMP_REGISTERED_LIB_}
  kill -0 "${pid%%_*}" 2>/dev/null || rm -f "$f" || true
done
