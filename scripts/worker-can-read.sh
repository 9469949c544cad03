#!/bin/sh
# nginx started by root runs its workers as nobody, and the tests and benchmarks point them at
# Lua files and the rock inside this checkout. A checkout under a private directory (mktemp -d
# makes 0700 ones, as a CI clone does) cannot be reached by nobody: give every directory above
# the checkout that lacks it the search permission for others (o+x: pass through, not list).
# Does nothing when not root (the workers then run as this user).
# Usage: scripts/worker-can-read.sh DIR
set -eu
[ "$(id -u)" = 0 ] || exit 0
dir=$(cd "$1" && pwd -P)
while :; do
  if [ -n "$(find "$dir" -maxdepth 0 ! -perm -o+x)" ]; then
    echo "vmpool: giving others search permission on $dir, so that nginx's workers (nobody) reach the checkout" >&2
    chmod o+x "$dir"
  fi
  [ "$dir" = / ] && break
  dir=$(dirname "$dir")
done
