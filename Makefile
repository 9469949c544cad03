# vmpool: the two commands of the README are `make demo` and `make test`; both install what they
# need first (Debian packages through apt-get, crates through cargo).
LUA ?= lua5.4
RUNTIMES ?= lua5.1 lua5.2 lua5.3 lua5.4 lua5.5 luajit

.PHONY: all deps rock dist demo test lint bench report clean

all: rock

deps:
	@scripts/install-deps.sh

# make rock LUA=lua5.1|lua5.2|lua5.3|lua5.4|lua5.5|luajit: builds and installs the rock into
# lua_modules/$(LUA)/ (Lua 5.5 itself is built first into target/lua5.5: scripts/lua55.sh)
rock: deps
	@scripts/rock.sh $(LUA)

# make dist: the release, dist/vmpool-<version>-1.src.rock (from the tracked files of the working
# tree), the binary rock dist/vmpool-<version>-1.linux-x86_64.rock (every runtime's build and a
# loader; installs with no Rust toolchain) and the manifests (luarocks --lua-version=5.x install
# --server=dist vmpool); make dist VENDOR=1 writes dist-vendored/, the same with every crate inside
# the source rock (3.5 MB; builds with no network at all)
dist: deps
	@scripts/dist.sh

# the main job: a demo of the pool at work, with its stats
demo: rock
	@LUA=$(LUA) sh -c '. scripts/luaenv.sh && $(LUA) examples/demo.lua'

# every test suite, on every runtime
test: deps
	@scripts/test.sh $(RUNTIMES)

# make bench: the micro benchmark (about 2 minutes): pool:invoke round trip against a direct call and
# a bare Rust ping-pong, calls in flight, allocations per call, on every runtime (bench/README.md)
bench: deps
	@BENCH_ENTRY="make bench" bench/run.sh micro

# make report: every benchmark, then bench/REPORT.md and bench/charts/*.svg (about 12.5 minutes on 2
# CPUs plus the first build, the heavy-work suite's 2.5 estimated; BENCH_QUICK=1 make report takes
# about 3)
report: deps
	@BENCH_ENTRY="make report" bench/run.sh report

lint: deps
	cargo fmt --check
	cargo fmt --check --manifest-path loader/Cargo.toml
	python3 scripts/module-cycles.py
	python3 scripts/check-links.py --toc README.md --files docs/architecture.md:src
	cargo clippy --all-targets --locked -- -D warnings
	cargo clippy --locked --manifest-path loader/Cargo.toml --target-dir target/loader -- -D warnings
	luacheck --quiet spec examples bench src/lua rockspec types .busted scripts/rock-manifest.lua scripts/lua55/loopvars.lua
	for r in rockspec/*.rockspec; do luarocks lint "$$r" || exit 1; done

clean:
	rm -rf target lua_modules dist dist-vendored
