#!/bin/sh
# Writes the release into dist/: vmpool-<version>.tar.gz (the source: the tracked files as they are
# in the working tree, so commit first for a real release), vmpool-<version>-1.src.rock (the
# release rockspec with that tarball inside, so installing it downloads nothing but crates) and a
# LuaRocks manifest, so that `luarocks install --server=dist vmpool` finds the rock.
# VENDOR=1 writes the variant with every crate inside (cargo vendor) into dist-vendored/ instead:
# it builds with no network at all.
# The version comes from Cargo.toml; rockspec/vmpool-<version>-1.rockspec must exist.
set -eu
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
name="vmpool-$version"
rockspec="rockspec/$name-1.rockspec"
if [ ! -f "$rockspec" ]; then
  echo "vmpool: $rockspec is missing (Cargo.toml says version $version); write it, or fix the version" >&2
  exit 1
fi
out=dist
[ "${VENDOR:-0}" = 1 ] && out=dist-vendored
rm -rf "$out"
mkdir -p "$out/stage"
# `git stash create` makes a commit of the working tree's tracked files without touching it (it
# prints nothing when there is nothing uncommitted); the names only satisfy git on a machine
# without a configured identity (CI): the commit is never stored in a branch
snapshot=$(GIT_AUTHOR_NAME=vmpool-dist GIT_AUTHOR_EMAIL=dist@localhost GIT_COMMITTER_NAME=vmpool-dist \
  GIT_COMMITTER_EMAIL=dist@localhost git stash create)
git archive --format=tar --prefix="$name/" "${snapshot:-HEAD}" | tar -x -C "$out/stage"
if [ "${VENDOR:-0}" = 1 ]; then
  # cargo prints the source replacement that makes builds in the tree use vendor/; rockspec/build.sh
  # adds --offline when vendor/ exists
  mkdir -p "$out/stage/$name/.cargo"
  (cd "$out/stage/$name" && cargo vendor --locked vendor 2>/dev/null >.cargo/config.toml)
fi
tar -czf "$out/$name.tar.gz" -C "$out/stage" "$name"
rm -rf "$out/stage"
cp "$rockspec" "$out/"
# a source rock is a zip of the rockspec and the source archive the rockspec's source.url names
(cd "$out" && zip -q "$name-1.src.rock" "$name-1.rockspec" "$name.tar.gz" && rm "$name-1.rockspec")
luarocks-admin make-manifest "$out" >/dev/null
echo "vmpool: wrote $out/$name-1.src.rock ($(du -k "$out/$name-1.src.rock" | cut -f1) KB) and $out/manifest"
