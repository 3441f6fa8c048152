//! Compresses the release binary's debug information at link time (see docs/building.md, "A
//! release binary"); every other profile links as before.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    // The line tables that let a panic's backtrace name file and line are most of a release
    // binary's size; zlib takes them to about a third, and std's backtrace reads them
    // compressed (zstd it cannot). A flag of every ELF linker: GNU ld, gold, lld, mold.
    let release = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        println!("cargo::rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
