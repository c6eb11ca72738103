// SPDX-License-Identifier: Apache-2.0
//! The crate links against libgqla and the runtime library speaks the ABI
//! major version these bindings were generated for.

use std::ffi::CStr;

#[test]
fn runtime_abi_major_matches_the_bindings() {
    let runtime = unsafe { gqla_sys::gqla_version() };
    assert_eq!(
        runtime / 10000,
        gqla_sys::GQLA_VERSION_MAJOR as i32,
        "runtime version {runtime}"
    );
    let text = unsafe { CStr::from_ptr(gqla_sys::gqla_version_string()) }
        .to_str()
        .unwrap();
    assert!(
        text.starts_with(&format!("{}.", gqla_sys::GQLA_VERSION_MAJOR)),
        "version string {text:?}"
    );
}

#[test]
fn status_strings_are_never_null() {
    for code in 0..=9u32 {
        let s = unsafe { gqla_sys::gqla_status_string(gqla_sys::gqla_status(code)) };
        assert!(!s.is_null(), "status {code}");
    }
}

#[test]
fn config_default_fills_struct_size() {
    let mut cfg = gqla_sys::gqla_config::default();
    let status =
        unsafe { gqla_sys::gqla_config_default(&mut cfg, gqla_sys::gqla_kind::GQLA_KIND_GQLA) };
    assert_eq!(status, gqla_sys::gqla_status::GQLA_OK);
    assert_eq!(
        cfg.struct_size,
        std::mem::size_of::<gqla_sys::gqla_config>()
    );
}
