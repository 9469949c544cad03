#!/bin/sh
# Writes the release into dist/: vmpool-<version>.tar.gz (the source: the tracked files as they are
# in the working tree, so commit first for a real release), vmpool-<version>-1.src.rock (the
# release rockspec with that tarball inside, so installing it downloads nothing but crates), the
# binary rock vmpool-<version>-1.<arch>.rock (below) and the LuaRocks manifests (`manifest` and one
# `manifest-5.x` per Lua version, 5.1 to 5.5), so that `luarocks --lua-version=5.x install --server=dist vmpool`
# finds the binary rock, which LuaRocks prefers to the source rock.
#
# The binary rock installs with no Rust toolchain, no compiler and no network. It carries one build
# per runtime, lib/vmpool/build/<runtime>.so (lua5.1 ... lua5.5, luajit), built from the working
# tree with the same cargo command as rockspec/build.sh (so after `make test` nothing rebuilds), and
# lib/vmpool.so, the loader (loader/lib.rs), which loads the build for the Lua that requires it:
# LuaRocks has one slot, 5.1, for PUC Lua 5.1 and LuaJIT, and one rock serves every slot. Every
# library is checked: no Lua library linked (the host's lua_* symbols must bind, in nginx those of
# ngx_lua's LuaJIT) and no glibc symbol newer than GLIBC_CLAIM, the oldest glibc the README promises.
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

# the binary rock: the tree LuaRocks would have installed (the release rockspec, lib/, the editor
# annotations), its rock_manifest, zipped
GLIBC_CLAIM=2.34
runtimes="lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit"
arch=$(luarocks config arch)
bin="$out/bin-stage"
mkdir -p "$bin/lib/vmpool/build"
build() { # build LOG CARGO-ARGS...: cargo quietly, its log shown only on failure
  log=$1
  shift
  cargo build --release --locked "$@" >"$log" 2>&1 || {
    cat "$log" >&2
    echo "vmpool: make dist: cargo build $* failed (log above)" >&2
    exit 1
  }
}
for rt in $runtimes; do
  case "$rt" in luajit) feature=luajit ;; *) feature=$(echo "$rt" | tr -d .) ;; esac
  build "$bin/cargo.log" --no-default-features --features "$feature,module" --target-dir "target/$feature"
  install -m 0755 "target/$feature/release/libvmpool.so" "$bin/lib/vmpool/build/$rt.so"
done
build "$bin/cargo.log" --manifest-path loader/Cargo.toml --target-dir target/loader
rm "$bin/cargo.log"
install -m 0755 target/loader/release/libvmpool_loader.so "$bin/lib/vmpool.so"
needed_max=0
for so in "$bin/lib/vmpool.so" "$bin"/lib/vmpool/build/*.so; do
  if objdump -p "$so" | grep -E "NEEDED +lib(lua|luajit)" >&2; then
    echo "vmpool: make dist: $so links a Lua library (above); the host's Lua must provide the lua_* symbols" >&2
    exit 1
  fi
  # every GLIBC_x.y version the library asks for (weak references too: the version must exist)
  need=$(objdump -T "$so" | sed -n 's/.*(GLIBC_\([0-9.]*\)).*/\1/p' | sort -uV | tail -n 1)
  if [ "$(printf '%s\n%s\n' "$need" "$GLIBC_CLAIM" | sort -V | tail -n 1)" != "$GLIBC_CLAIM" ]; then
    objdump -T "$so" | grep "GLIBC_$need" >&2
    echo "vmpool: make dist: $so needs glibc $need (symbols above), newer than the $GLIBC_CLAIM the README promises; build on an older system or raise the claim (README, Platforms)" >&2
    exit 1
  fi
  needed_max=$(printf '%s\n%s\n' "$need" "$needed_max" | sort -V | tail -n 1)
done
cp -R types "$bin/types"
cp "$rockspec" "$bin/"
lua5.1 scripts/rock-manifest.lua "$bin"
binrock="$name-1.$arch.rock"
(cd "$bin" && zip -q -r "../$binrock" .)
rm -rf "$bin"

luarocks-admin make-manifest "$out" >/dev/null
# LuaRocks 3.8 writes manifest-5.1 to manifest-5.4, and reads manifest-5.5 in its 5.5 mode: every
# rock here allows 5.5 as it allows 5.4 (lua >= 5.1, < 5.6), so 5.5's is 5.4's
cp "$out/manifest-5.4" "$out/manifest-5.5"
echo "vmpool: wrote $out/$name-1.src.rock ($(du -k "$out/$name-1.src.rock" | cut -f1) KB), the manifests and"
echo "vmpool: $out/$binrock ($(du -k "$out/$binrock" | cut -f1) KB): $arch, builds for $runtimes and the loader;"
echo "vmpool: no Lua library linked, glibc >= $needed_max needed (claimed: $GLIBC_CLAIM)"
