// SPDX-License-Identifier: Apache-2.0
//! The rpath to the library gqla-sys found, as bindings/rust/README.md shows;
//! the directory is also compiled in, for the check to compare.
fn main() {
    let dir = std::env::var("DEP_GQLA_LIB_DIR").expect("gqla-sys reports the library directory");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:rustc-env=GQLA_FOUND_LIB_DIR={dir}");
}
