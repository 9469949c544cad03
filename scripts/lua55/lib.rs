// Empty: see Cargo.toml (this package only makes cargo fetch lua-src's sources).
