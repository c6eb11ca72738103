// SPDX-License-Identifier: Apache-2.0
//! Hardware probe: what the cost model knows about a device.

use std::mem::size_of;
use std::os::raw::c_char;

use gqla_sys as ffi;

use crate::enums::Device;
use crate::error::{check, Result};

/// CPU instruction-set extensions (`GQLA_ISA_*` bits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Isa(pub u64);

impl Isa {
    /// Every flag this crate's header defines, with the library's name for
    /// it (as `/proc/cpuinfo` spells it; `tests` check it against
    /// [`Isa::name_of`]).
    pub const ALL: [(u32, &'static str); 11] = [
        (ffi::GQLA_ISA_SSE42, "sse4.2"),
        (ffi::GQLA_ISA_AVX, "avx"),
        (ffi::GQLA_ISA_AVX2, "avx2"),
        (ffi::GQLA_ISA_FMA, "fma"),
        (ffi::GQLA_ISA_F16C, "f16c"),
        (ffi::GQLA_ISA_AVX512F, "avx512f"),
        (ffi::GQLA_ISA_AVX512BW, "avx512bw"),
        (ffi::GQLA_ISA_AVX512VL, "avx512vl"),
        (ffi::GQLA_ISA_AVX512BF16, "avx512_bf16"),
        (ffi::GQLA_ISA_AVX512FP16, "avx512_fp16"),
        (ffi::GQLA_ISA_AMX, "amx"),
    ];

    /// Whether every bit of `flag` (a `GQLA_ISA_*` constant) is set.
    pub fn has(self, flag: u32) -> bool {
        self.0 & u64::from(flag) == u64::from(flag)
    }

    /// The library's name of one `GQLA_ISA_*` bit (`gqla_isa_name`); `None`
    /// for 0, several bits, or a bit the library does not define.
    pub fn name_of(flag: u64) -> Option<&'static str> {
        // SAFETY: gqla_isa_name returns NULL or a static NUL-terminated
        // string of the library, which stays loaded while the process runs.
        unsafe {
            let name = ffi::gqla_isa_name(flag);
            if name.is_null() {
                return None;
            }
            std::ffi::CStr::from_ptr(name).to_str().ok()
        }
    }

    /// Names of the flags that are set, as the library spells them (a clear
    /// bit asks for the name of 0, which is `None`).
    pub fn names(self) -> Vec<&'static str> {
        (0..64)
            .filter_map(|b| Isa::name_of(self.0 & (1u64 << b)))
            .collect()
    }
}

/// A device description (`gqla_probe_info`). Fields are public so that a
/// hypothetical machine can be described for [`predict_cost`](crate::predict_cost).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeInfo {
    /// The device described.
    pub device: Device,
    /// "AuthenticAMD", "GenuineIntel", "NVIDIA", ...
    pub vendor: String,
    /// CPU model or GPU name.
    pub name: String,
    /// CPU: logical cores.
    pub logical_cores: i32,
    /// CPU: physical cores.
    pub physical_cores: i32,
    /// CPU: cores this process may run on.
    pub affinity_cores: i32,
    /// CPU: instruction-set extensions.
    pub isa: Isa,
    /// CPU: L1 data cache, KiB.
    pub l1d_kb: i32,
    /// CPU: L2 cache, KiB.
    pub l2_kb: i32,
    /// CPU: L3 cache, KiB.
    pub l3_kb: i32,
    /// CUDA: compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// CUDA: streaming multiprocessors.
    pub sm_count: i32,
    /// CUDA: core clock, MHz.
    pub clock_mhz: i32,
    /// CUDA: memory clock, MHz.
    pub mem_clock_mhz: i32,
    /// CUDA: memory bus width, bits.
    pub bus_width_bits: i32,
    /// CUDA: device memory, GB.
    pub mem_gb: f64,
    /// Memory read bandwidth, GB/s (1e9 bytes).
    pub read_gbps: f64,
    /// f32 FMA peak, GFLOP/s.
    pub peak_gflops_f32: f64,
    /// bf16 peak (tensor cores on CUDA), GFLOP/s.
    pub peak_gflops_bf16: f64,
    /// Whether bandwidth and peaks were measured (else estimated from specs).
    pub calibrated: bool,
}

impl ProbeInfo {
    pub(crate) fn from_raw(raw: &ffi::gqla_probe_info) -> Result<ProbeInfo> {
        Ok(ProbeInfo {
            device: Device::from_raw(raw.device, raw.device_index)?,
            vendor: c_chars_to_string(&raw.vendor),
            name: c_chars_to_string(&raw.name),
            logical_cores: raw.logical_cores,
            physical_cores: raw.physical_cores,
            affinity_cores: raw.affinity_cores,
            isa: Isa(raw.isa_flags),
            l1d_kb: raw.l1d_kb,
            l2_kb: raw.l2_kb,
            l3_kb: raw.l3_kb,
            compute_capability: (raw.cc_major, raw.cc_minor),
            sm_count: raw.sm_count,
            clock_mhz: raw.clock_mhz,
            mem_clock_mhz: raw.mem_clock_mhz,
            bus_width_bits: raw.bus_width_bits,
            mem_gb: raw.mem_gb,
            read_gbps: raw.read_gbps,
            peak_gflops_f32: raw.peak_gflops_f32,
            peak_gflops_bf16: raw.peak_gflops_bf16,
            calibrated: raw.calibrated != 0,
        })
    }

    /// The C struct with these values (strings truncated to fit).
    pub fn to_raw(&self) -> ffi::gqla_probe_info {
        let (device, device_index) = self.device.to_raw();
        let mut raw = ffi::gqla_probe_info {
            struct_size: size_of::<ffi::gqla_probe_info>(),
            device,
            device_index,
            logical_cores: self.logical_cores,
            physical_cores: self.physical_cores,
            affinity_cores: self.affinity_cores,
            isa_flags: self.isa.0,
            l1d_kb: self.l1d_kb,
            l2_kb: self.l2_kb,
            l3_kb: self.l3_kb,
            cc_major: self.compute_capability.0,
            cc_minor: self.compute_capability.1,
            sm_count: self.sm_count,
            clock_mhz: self.clock_mhz,
            mem_clock_mhz: self.mem_clock_mhz,
            bus_width_bits: self.bus_width_bits,
            mem_gb: self.mem_gb,
            read_gbps: self.read_gbps,
            peak_gflops_f32: self.peak_gflops_f32,
            peak_gflops_bf16: self.peak_gflops_bf16,
            calibrated: i32::from(self.calibrated),
            ..Default::default()
        };
        string_to_c_chars(&self.vendor, &mut raw.vendor);
        string_to_c_chars(&self.name, &mut raw.name);
        raw
    }
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
    // Up to the terminating NUL; not terminated: the whole array rather than
    // reading past it.
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn string_to_c_chars(text: &str, out: &mut [c_char]) {
    // Truncate on a char boundary, keeping room for the terminating NUL.
    let mut end = text.len().min(out.len().saturating_sub(1));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (slot, &byte) in out.iter_mut().zip(&text.as_bytes()[..end]) {
        *slot = byte as c_char;
    }
    out[end] = 0;
}

/// Describe a device. `calibrate = false` estimates bandwidth and peaks from
/// specs (fast); `true` measures them once per process (at most a few hundred
/// milliseconds) and caches the result.
///
/// ```
/// let cpu = gqla::probe(gqla::Device::Cpu, false)?;
/// assert!(cpu.logical_cores >= 1);
/// println!("{} ({}): {:?}", cpu.name, cpu.vendor, cpu.isa.names());
/// # Ok::<(), gqla::Error>(())
/// ```
pub fn probe(device: Device, calibrate: bool) -> Result<ProbeInfo> {
    let (device_type, index) = device.to_raw();
    let flags = if calibrate {
        ffi::GQLA_PROBE_CALIBRATE
    } else {
        0
    };
    let mut raw = ffi::gqla_probe_info {
        struct_size: size_of::<ffi::gqla_probe_info>(),
        ..Default::default()
    };
    // SAFETY: writable out struct with struct_size set.
    check(unsafe { ffi::gqla_probe(device_type, index, flags, &mut raw) })?;
    ProbeInfo::from_raw(&raw)
}

/// Devices of a kind visible now: 1 for [`Device::Cpu`]; for CUDA 0 when the
/// module or a GPU is absent. The index of [`Device::Cuda`] is ignored.
///
/// ```
/// assert_eq!(gqla::device_count(gqla::Device::Cpu)?, 1);
/// # Ok::<(), gqla::Error>(())
/// ```
pub fn device_count(device: Device) -> Result<usize> {
    let (device_type, _) = device.to_raw();
    let mut count = 0;
    // SAFETY: valid out-pointer.
    check(unsafe { ffi::gqla_device_count(device_type, &mut count) })?;
    Ok(count.max(0) as usize)
}
