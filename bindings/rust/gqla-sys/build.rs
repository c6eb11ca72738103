//! Finds libgqla and tells cargo how to link it. Uses only std so the crate
//! builds without crates.io.
//!
//! Search order (the first hit wins):
//!   1. `GQLA_LIB_DIR`: a directory holding libgqla.so (an explicit setting
//!      that does not hold the library is an error, never silently skipped);
//!   2. `gqla.pc` in `PKG_CONFIG_PATH`, `PKG_CONFIG_LIBDIR` and the usual
//!      lib/pkgconfig directories (parsed here; no pkg-config crate);
//!   3. CMake build trees of this source tree: `<repo>/build*/capi`.
//!
//! Besides `-L` and `-lgqla` it emits an rpath so that this crate's tests run
//! without `LD_LIBRARY_PATH`, and `cargo:lib_dir=DIR` (seen by dependents as
//! `DEP_GQLA_LIB_DIR`) so that they can add the same rpath to their binaries.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const LIBRARY_FILE: &str = "libgqla.so";

fn main() {
    for var in [
        "GQLA_LIB_DIR",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let mut tried = Vec::new();
    let lib_dir = find_library(&mut tried).unwrap_or_else(|| {
        panic!(
            "\n\ngqla-sys: could not find {LIBRARY_FILE}. Tried:\n  - {}\n\n\
             Build the C library (cmake -S . -B build && cmake --build build --target gqla)\n\
             or set GQLA_LIB_DIR to the directory holding {LIBRARY_FILE}\n\
             (a build tree's capi/ directory or an install prefix's lib/).\n",
            tried.join("\n  - ")
        )
    });

    let dir = lib_dir.display();
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=gqla");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:lib_dir={dir}");
    println!(
        "cargo:rerun-if-changed={}",
        lib_dir.join(LIBRARY_FILE).display()
    );
}

fn find_library(tried: &mut Vec<String>) -> Option<PathBuf> {
    if let Some(dir) = env::var_os("GQLA_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if holds_library(&dir) {
            return Some(absolute(&dir));
        }
        panic!(
            "gqla-sys: GQLA_LIB_DIR={} does not contain {LIBRARY_FILE}",
            dir.display()
        );
    }
    tried.push("GQLA_LIB_DIR (not set)".to_string());

    if let Some(dir) = from_pkg_config(tried) {
        return Some(dir);
    }
    from_cmake_build_trees(tried)
}

fn holds_library(dir: &Path) -> bool {
    dir.join(LIBRARY_FILE).is_file()
}

fn absolute(dir: &Path) -> PathBuf {
    fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

// ------------------------------------------------------------- pkg-config

fn pkg_config_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"] {
        if let Some(value) = env::var_os(var) {
            dirs.extend(env::split_paths(&value).filter(|p| !p.as_os_str().is_empty()));
        }
    }
    // Debian and Ubuntu install into multiarch directories such as
    // lib/x86_64-linux-gnu; derive the triple from cargo's target.
    let multiarch = env::var("TARGET").ok().and_then(|t| multiarch_triple(&t));
    for prefix in ["/usr/local", "/usr"] {
        if let Some(triple) = &multiarch {
            dirs.push(PathBuf::from(format!("{prefix}/lib/{triple}/pkgconfig")));
        }
        dirs.push(PathBuf::from(format!("{prefix}/lib64/pkgconfig")));
        dirs.push(PathBuf::from(format!("{prefix}/lib/pkgconfig")));
        dirs.push(PathBuf::from(format!("{prefix}/share/pkgconfig")));
    }
    dirs
}

/// "x86_64-unknown-linux-gnu" -> "x86_64-linux-gnu".
fn multiarch_triple(target: &str) -> Option<String> {
    let parts: Vec<&str> = target.split('-').collect();
    match parts.as_slice() {
        [arch, _vendor, os, env] => Some(format!("{arch}-{os}-{env}")),
        _ => None,
    }
}

fn from_pkg_config(tried: &mut Vec<String>) -> Option<PathBuf> {
    let sysroot = env::var_os("PKG_CONFIG_SYSROOT_DIR").map(PathBuf::from);
    for dir in pkg_config_dirs() {
        let pc = dir.join("gqla.pc");
        let text = match fs::read_to_string(&pc) {
            Ok(text) => text,
            Err(_) => {
                tried.push(format!("{} (absent)", pc.display()));
                continue;
            }
        };
        let lib_dirs = pc_library_dirs(&text, sysroot.as_deref());
        if let Some(found) = lib_dirs.iter().find(|d| holds_library(d)) {
            return Some(absolute(found));
        }
        let listed: Vec<String> = lib_dirs.iter().map(|d| d.display().to_string()).collect();
        tried.push(format!(
            "{} (its -L dirs [{}] hold no {LIBRARY_FILE})",
            pc.display(),
            listed.join(", ")
        ));
    }
    None
}

/// The `-L` directories of a .pc file's `Libs:` line, with `${var}` expanded.
fn pc_library_dirs(text: &str, sysroot: Option<&Path>) -> Vec<PathBuf> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut libs = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("Libs:") {
            libs = expand_pc_vars(rest, &vars);
        } else if let Some((name, value)) = line.split_once('=') {
            let name = name.trim();
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
            {
                let value = expand_pc_vars(value.trim(), &vars);
                vars.push((name.to_string(), value));
            }
        }
    }
    libs.split_whitespace()
        .filter_map(|flag| flag.strip_prefix("-L"))
        .map(|dir| match sysroot {
            Some(root) => root.join(dir.trim_start_matches('/')),
            None => PathBuf::from(dir),
        })
        .collect()
}

fn expand_pc_vars(value: &str, vars: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = match after.find('}') {
            Some(end) => end,
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        };
        let name = &after[..end];
        // Later definitions win, as in pkg-config.
        if let Some((_, v)) = vars.iter().rev().find(|(n, _)| n == name) {
            out.push_str(v);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

// ------------------------------------------------------ CMake build trees

fn from_cmake_build_trees(tried: &mut Vec<String>) -> Option<PathBuf> {
    // gqla-sys lives at <repo>/bindings/rust/gqla-sys.
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let repo = manifest_dir.join("../../..");
    let pattern = format!("{}/build*/capi", repo.display());
    let entries = match fs::read_dir(&repo) {
        Ok(entries) => entries,
        Err(_) => {
            tried.push(format!("{pattern} (cannot read {})", repo.display()));
            return None;
        }
    };

    // Several build trees may exist (release, CUDA, sanitizers...): take the
    // most recently built library, but never a sanitizer build, whose library
    // only loads into a process that starts with the ASan runtime.
    let mut candidates: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    let mut skipped = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("build") {
            continue;
        }
        let tree = entry.path();
        let capi = tree.join("capi");
        if !holds_library(&capi) {
            continue;
        }
        if is_sanitizer_build(&tree) {
            skipped.push(format!("{} (sanitizer build)", capi.display()));
            continue;
        }
        let modified = fs::metadata(capi.join(LIBRARY_FILE))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        candidates.push((modified, capi));
    }
    candidates.sort();
    match candidates.pop() {
        Some((_, capi)) => {
            let capi = absolute(&capi);
            if !candidates.is_empty() {
                println!(
                    "cargo:warning=gqla-sys: several build trees hold {LIBRARY_FILE}; using the newest, {} (set GQLA_LIB_DIR to choose)",
                    capi.display()
                );
            }
            Some(capi)
        }
        None => {
            let extra = if skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {}", skipped.join(", "))
            };
            tried.push(format!("{pattern} (no {LIBRARY_FILE} found{extra})"));
            None
        }
    }
}

fn is_sanitizer_build(tree: &Path) -> bool {
    fs::read_to_string(tree.join("CMakeCache.txt"))
        .map(|cache| {
            cache
                .lines()
                .any(|l| l.starts_with("GQLA_SANITIZE:") && l.ends_with("=ON"))
        })
        .unwrap_or(false)
}
