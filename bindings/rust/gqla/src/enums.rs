// SPDX-License-Identifier: Apache-2.0
//! Rust enums for the C enums. Values arrive from C as newtype integers, so a
//! value these bindings do not know becomes an error instead of undefined
//! behavior.

use std::fmt;

use gqla_sys as ffi;

use crate::error::{Error, ErrorKind, Result};

fn unknown(what: &str, value: u32) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("the library returned {what} {value}, unknown to these bindings"),
    )
}

/// Attention kind of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Grouped-query attention: the cache holds K `[G, D]` and V `[G, Dv]` per token.
    Gqa,
    /// Group-query latent attention: the cache holds c `[r]` and kr `[d_r]` per token.
    Gqla,
}

impl Kind {
    pub(crate) fn to_raw(self) -> ffi::gqla_kind {
        match self {
            Kind::Gqa => ffi::gqla_kind::GQLA_KIND_GQA,
            Kind::Gqla => ffi::gqla_kind::GQLA_KIND_GQLA,
        }
    }

    pub(crate) fn from_raw(raw: ffi::gqla_kind) -> Result<Kind> {
        match raw {
            ffi::gqla_kind::GQLA_KIND_GQA => Ok(Kind::Gqa),
            ffi::gqla_kind::GQLA_KIND_GQLA => Ok(Kind::Gqla),
            other => Err(unknown("kind", other.0)),
        }
    }
}

/// Element type of tensors and of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float (`f32`).
    F32,
    /// 16-bit IEEE float ([`F16`](crate::F16)).
    F16,
    /// bfloat16 ([`Bf16`](crate::Bf16)).
    Bf16,
    /// 8-bit float e4m3 with per-row f32 scales the library computes: a
    /// cache dtype only (`"fp8_e4m3"`; docs/fp8-cache.md). No tensor has it.
    Fp8E4m3,
}

impl DType {
    pub(crate) fn to_raw(self) -> ffi::gqla_dtype {
        match self {
            DType::F32 => ffi::gqla_dtype::GQLA_DTYPE_F32,
            DType::F16 => ffi::gqla_dtype::GQLA_DTYPE_F16,
            DType::Bf16 => ffi::gqla_dtype::GQLA_DTYPE_BF16,
            DType::Fp8E4m3 => ffi::gqla_dtype::GQLA_DTYPE_FP8_E4M3,
        }
    }

    pub(crate) fn from_raw(raw: ffi::gqla_dtype) -> Result<DType> {
        match raw {
            ffi::gqla_dtype::GQLA_DTYPE_F32 => Ok(DType::F32),
            ffi::gqla_dtype::GQLA_DTYPE_F16 => Ok(DType::F16),
            ffi::gqla_dtype::GQLA_DTYPE_BF16 => Ok(DType::Bf16),
            ffi::gqla_dtype::GQLA_DTYPE_FP8_E4M3 => Ok(DType::Fp8E4m3),
            other => Err(unknown("dtype", other.0)),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::Fp8E4m3 => "fp8_e4m3",
        })
    }
}

/// Decode path of a GQLA session, or the form of one
/// [`Session::attend`](crate::Session::attend) call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Let the roofline cost model choose (GQA-kind sessions: always [`Path::Gqa`]).
    Auto,
    /// Per-group expanded K/V cache (the only path of a GQA-kind session).
    Gqa,
    /// MQA over the latent cache.
    Absorb,
    /// [`Session::attend`](crate::Session::attend) only (GQLA): the GQA form
    /// over latent rows up-projected for that call, whether or not the
    /// expanded cache is kept. Never a session path.
    GqaTransient,
}

impl Path {
    pub(crate) fn to_raw(self) -> ffi::gqla_path {
        match self {
            Path::Auto => ffi::gqla_path::GQLA_PATH_AUTO,
            Path::Gqa => ffi::gqla_path::GQLA_PATH_GQA,
            Path::Absorb => ffi::gqla_path::GQLA_PATH_ABSORB,
            Path::GqaTransient => ffi::gqla_path::GQLA_PATH_GQA_TRANSIENT,
        }
    }

    pub(crate) fn from_raw(raw: ffi::gqla_path) -> Result<Path> {
        match raw {
            ffi::gqla_path::GQLA_PATH_AUTO => Ok(Path::Auto),
            ffi::gqla_path::GQLA_PATH_GQA => Ok(Path::Gqa),
            ffi::gqla_path::GQLA_PATH_ABSORB => Ok(Path::Absorb),
            ffi::gqla_path::GQLA_PATH_GQA_TRANSIENT => Ok(Path::GqaTransient),
            other => Err(unknown("path", other.0)),
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Path::Auto => "auto",
            Path::Gqa => "gqa",
            Path::Absorb => "absorb",
            Path::GqaTransient => "gqa_transient",
        })
    }
}

/// Device a session runs on or a probe describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// CUDA when the CUDA module loads and a GPU is visible, else the CPU.
    Auto,
    /// The host CPU.
    Cpu,
    /// The CUDA GPU with this ordinal.
    Cuda(u32),
}

impl Device {
    pub(crate) fn to_raw(self) -> (ffi::gqla_device_type, i32) {
        match self {
            Device::Auto => (ffi::gqla_device_type::GQLA_DEVICE_AUTO, 0),
            Device::Cpu => (ffi::gqla_device_type::GQLA_DEVICE_CPU, 0),
            // Ordinals above i32::MAX cannot name a device; saturating keeps the
            // call failing in the library with its "device_index" message.
            Device::Cuda(index) => (
                ffi::gqla_device_type::GQLA_DEVICE_CUDA,
                i32::try_from(index).unwrap_or(i32::MAX),
            ),
        }
    }

    pub(crate) fn from_raw(raw: ffi::gqla_device_type, index: i32) -> Result<Device> {
        match raw {
            ffi::gqla_device_type::GQLA_DEVICE_AUTO => Ok(Device::Auto),
            ffi::gqla_device_type::GQLA_DEVICE_CPU => Ok(Device::Cpu),
            ffi::gqla_device_type::GQLA_DEVICE_CUDA => Ok(Device::Cuda(index.max(0) as u32)),
            other => Err(unknown("device type", other.0)),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(index) => write!(f, "cuda:{index}"),
        }
    }
}

/// Element types gqla accepts in host buffers: `f32`, [`F16`](crate::F16) and
/// [`Bf16`](crate::Bf16). Sealed: the library knows no others.
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The dtype tag of this element type.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

impl Element for crate::F16 {
    const DTYPE: DType = DType::F16;
}

impl Element for crate::Bf16 {
    const DTYPE: DType = DType::Bf16;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for crate::F16 {}
    impl Sealed for crate::Bf16 {}
}
