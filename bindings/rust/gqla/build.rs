// SPDX-License-Identifier: Apache-2.0
//! Gives this crate's tests, doctests and examples the rpath to libgqla that
//! gqla-sys found (cargo passes `rustc-link-arg` only to the package that
//! prints it, so each package that links binaries repeats it).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_GQLA_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_GQLA_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
