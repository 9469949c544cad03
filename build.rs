// Keeps the module mapped once loaded (`-z nodelete`): a Lua state that closes can unload a C
// module while pool threads still run its code (seen with OpenResty reloads). The flag is the GNU
// and LLVM linkers' on ELF systems; other targets get no flag (see README, Platforms).
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(
        os.as_str(),
        "linux" | "freebsd" | "netbsd" | "openbsd" | "dragonfly" | "illumos" | "solaris"
    ) {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
}
