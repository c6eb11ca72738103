// SPDX-License-Identifier: Apache-2.0
//! Embed the directory of libgqla (found by gqla-sys) as the binary's rpath,
//! so that `cargo run` works without LD_LIBRARY_PATH or a system install.

fn main() {
    if let Ok(dir) = std::env::var("DEP_GQLA_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
