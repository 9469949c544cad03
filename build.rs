// Keeps the module mapped once loaded (`-z nodelete`): a Lua state that closes can unload a C
// module while pool threads still run its code (seen with OpenResty reloads).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
