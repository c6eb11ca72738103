// SPDX-License-Identifier: Apache-2.0
//! Finds libgqla and tells cargo how to link it. Uses only std so the crate
//! builds without crates.io.
//!
//! Search order (the first hit wins):
//!   1. `GQLA_LIB_DIR`: a directory holding libgqla.so (an explicit setting
//!      that does not hold the library is an error, never silently skipped);
//!   2. pkg-config's `gqla.pc`: the `pkg-config` program (or `$PKG_CONFIG`)
//!      where installed; otherwise the file is looked up and read here, in
//!      `PKG_CONFIG_PATH`, then `PKG_CONFIG_LIBDIR` or the usual
//!      lib/pkgconfig directories, with its variables (`${prefix}`,
//!      `${pcfiledir}`, ...) expanded as pkg-config does.
//!
//! Nothing else: a build tree is never picked up behind the user's back (its
//! library may be gone or rebuilt by the time the binary runs). When nothing
//! is found the build fails with everything that was tried.
//!
//! Besides `-L` and `-lgqla` it emits an rpath so that this crate's tests run
//! without `LD_LIBRARY_PATH`, and `cargo:lib_dir=DIR` (seen by dependents as
//! `DEP_GQLA_LIB_DIR`) so that they can add the same rpath to their binaries.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIBRARY_FILE: &str = "libgqla.so";

fn main() {
    for var in [
        "GQLA_LIB_DIR",
        "PKG_CONFIG",
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
             Either set GQLA_LIB_DIR to the directory holding {LIBRARY_FILE}\n\
             (a CMake build tree's capi/ directory, or an install's lib directory),\n\
             or install gqla (cmake --install <build> --prefix <prefix>) and let\n\
             pkg-config find it: PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig.\n",
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

    match from_pkg_config_program(tried) {
        ProgramAnswer::Found(dir) => Some(dir),
        ProgramAnswer::NotFound => None,
        ProgramAnswer::NoProgram => from_pc_files(tried),
    }
}

fn holds_library(dir: &Path) -> bool {
    dir.join(LIBRARY_FILE).is_file()
}

fn absolute(dir: &Path) -> PathBuf {
    fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

fn with_sysroot(dir: &str) -> PathBuf {
    match env::var_os("PKG_CONFIG_SYSROOT_DIR").filter(|s| !s.is_empty()) {
        Some(root) if !Path::new(dir).starts_with(&root) => {
            PathBuf::from(root).join(dir.trim_start_matches('/'))
        }
        _ => PathBuf::from(dir),
    }
}

fn describe_search_path() -> String {
    let show = |var: &str| env::var(var).unwrap_or_else(|_| "<unset>".to_string());
    format!(
        "PKG_CONFIG_PATH={}, PKG_CONFIG_LIBDIR={}",
        show("PKG_CONFIG_PATH"),
        show("PKG_CONFIG_LIBDIR")
    )
}

// ------------------------------------------------------ pkg-config program

enum ProgramAnswer {
    Found(PathBuf),
    /// The program ran and has no usable gqla: its word is final.
    NotFound,
    /// No program to ask: read the .pc files here instead.
    NoProgram,
}

fn from_pkg_config_program(tried: &mut Vec<String>) -> ProgramAnswer {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = match Command::new(&program)
        .args(["--print-errors", "--variable=libdir", "gqla"])
        .output()
    {
        Ok(output) => output,
        Err(_) => {
            tried.push(format!(
                "the {program} program (not installed; reading gqla.pc directly)"
            ));
            return ProgramAnswer::NoProgram;
        }
    };
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        tried.push(format!(
            "`{program} --variable=libdir gqla` ({}; {})",
            why.trim()
                .lines()
                .next()
                .unwrap_or("failed")
                .trim_end_matches('.'),
            describe_search_path()
        ));
        return ProgramAnswer::NotFound;
    }
    let libdir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let dir = with_sysroot(&libdir);
    if holds_library(&dir) {
        return ProgramAnswer::Found(absolute(&dir));
    }
    tried.push(format!(
        "`{program} --variable=libdir gqla` (names {}, which holds no {LIBRARY_FILE})",
        dir.display()
    ));
    ProgramAnswer::NotFound
}

// --------------------------------------------------------- gqla.pc by hand

/// The directories pkg-config searches, in its order.
fn pkg_config_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let split = |value: std::ffi::OsString| -> Vec<PathBuf> {
        env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect()
    };
    if let Some(value) = env::var_os("PKG_CONFIG_PATH") {
        dirs.extend(split(value));
    }
    // PKG_CONFIG_LIBDIR replaces the built-in directories.
    if let Some(value) = env::var_os("PKG_CONFIG_LIBDIR") {
        dirs.extend(split(value));
        return dirs;
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

fn from_pc_files(tried: &mut Vec<String>) -> Option<PathBuf> {
    for dir in pkg_config_dirs() {
        let pc = dir.join("gqla.pc");
        let text = match fs::read_to_string(&pc) {
            Ok(text) => text,
            Err(_) => {
                tried.push(format!("{} (absent)", pc.display()));
                continue;
            }
        };
        println!("cargo:rerun-if-changed={}", pc.display());
        // pkg-config takes the first gqla.pc on its path, right or wrong.
        let pc_file = PcFile::parse(&text, &dir);
        let lib_dirs = pc_file.library_dirs();
        if let Some(found) = lib_dirs.iter().find(|d| holds_library(d)) {
            return Some(absolute(found));
        }
        let listed: Vec<String> = lib_dirs.iter().map(|d| d.display().to_string()).collect();
        tried.push(format!(
            "{} (its library directories [{}] hold no {LIBRARY_FILE})",
            pc.display(),
            listed.join(", ")
        ));
        return None;
    }
    None
}

/// The parts of a .pc file that locate the library: its variables (kept
/// unexpanded, as pkg-config does, and expanded on use) and the `Libs:` field.
struct PcFile {
    vars: Vec<(String, String)>,
    libs: String,
}

impl PcFile {
    fn parse(text: &str, pc_dir: &Path) -> PcFile {
        let mut vars = vec![("pcfiledir".to_string(), pc_dir.display().to_string())];
        let mut libs = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let field = line.find(':');
            let assignment = line.find('=');
            match (field, assignment) {
                // `Name: value` unless an `=` comes first (`var=a:b`).
                (Some(colon), eq) if eq.map_or(true, |eq| colon < eq) => {
                    if line[..colon].trim() == "Libs" {
                        libs = line[colon + 1..].trim().to_string();
                    }
                }
                (_, Some(eq)) => {
                    let name = line[..eq].trim();
                    if !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                    {
                        vars.push((name.to_string(), line[eq + 1..].trim().to_string()));
                    }
                }
                _ => {}
            }
        }
        PcFile { vars, libs }
    }

    /// The `-L` directories of `Libs:`, then `libdir`, each with the sysroot.
    fn library_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .expand(&self.libs, 0)
            .split_whitespace()
            .filter_map(|flag| flag.strip_prefix("-L"))
            .map(with_sysroot)
            .collect();
        if let Some(libdir) = self.variable("libdir", 0) {
            dirs.push(with_sysroot(&libdir));
        }
        dirs.dedup();
        dirs
    }

    fn variable(&self, name: &str, depth: usize) -> Option<String> {
        // Later definitions win, as in pkg-config.
        let (_, raw) = self.vars.iter().rev().find(|(n, _)| n == name)?;
        Some(self.expand(raw, depth + 1))
    }

    /// `${name}` references replaced, recursively (a cycle stops expanding).
    fn expand(&self, value: &str, depth: usize) -> String {
        if depth > 32 {
            return value.to_string();
        }
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
            if let Some(v) = self.variable(&after[..end], depth) {
                out.push_str(&v);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}
