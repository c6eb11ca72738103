// SPDX-License-Identifier: Apache-2.0
//! Shared by the integration tests: a PRNG, the float64 reference of the
//! attention math, and error measures. Kept independent of the library: it
//! implements the defining formulas, not either decode path.

#![allow(dead_code)]

pub mod gqla_fixture;
pub mod io;
pub mod reference;

use gqla::DType;

/// xorshift64* — fresh, reproducible-per-seed random inputs without crates.
pub struct Rng {
    state: u64,
    seed: u64,
}

impl Rng {
    /// A generator seeded from the clock and `salt`, so every run draws new
    /// data, or from GQLA_TEST_SEED to replay a run; the seed is printed (and
    /// named by every failed decode check) so that a failure can be replayed.
    pub fn fresh(salt: u64) -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        let seed = match std::env::var("GQLA_TEST_SEED") {
            Ok(s) => s.parse().expect("GQLA_TEST_SEED must be an integer"),
            Err(_) => nanos ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        };
        println!("random seed {seed} (replay with GQLA_TEST_SEED={seed})");
        Rng::seeded(seed)
    }

    pub fn seeded(seed: u64) -> Rng {
        Rng {
            state: seed | 1,
            seed,
        }
    }

    /// What to set to replay this generator's draws.
    pub fn replay_hint(&self) -> String {
        format!("replay with GQLA_TEST_SEED={}", self.seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1), never exactly zero-filled buffers.
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform() * scale).collect()
    }
}

/// ‖actual − expected‖₂ / ‖expected‖₂.
pub fn rel_l2(actual: &[f32], expected: &[f64]) -> f64 {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    let mut diff = 0.0;
    let mut norm = 0.0;
    for (&a, &e) in actual.iter().zip(expected) {
        assert!(
            a.is_finite(),
            "non-finite output {a} (poison left or overflow)"
        );
        diff += (a as f64 - e).powi(2);
        norm += e * e;
    }
    assert!(
        norm > 0.0,
        "reference is all zeros: the test data is degenerate"
    );
    (diff / norm).sqrt()
}

/// ‖lse − ref‖₂ / ‖max(1, |ref|)‖₂ (max per element). lse is a log, so a
/// relative error of values near zero would be fragile: there the absolute
/// error counts, where every |ref| >= 1 this is the relative L2 error.
pub fn lse_error(actual: &[f32], expected: &[f64]) -> f64 {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    let mut diff = 0.0;
    let mut floor = 0.0;
    for (&a, &e) in actual.iter().zip(expected) {
        assert!(
            a.is_finite(),
            "non-finite lse {a} (poison left or overflow)"
        );
        diff += (a as f64 - e).powi(2);
        floor += e.abs().max(1.0).powi(2);
    }
    if floor > 0.0 {
        (diff / floor).sqrt()
    } else {
        0.0
    }
}

/// Bound of o (rel L2) and lse (`lse_error`) against the reference on the
/// inputs as the cache stores them; a narrower io dtype adds its own
/// rounding of q and o.
pub fn tolerance(cache: DType, io: DType) -> f64 {
    dtype_bound(cache).max(dtype_bound(io))
}

/// Looser bound against the reference on the inputs as given: it also
/// covers their rounding into the cache (up to 2^-8 relative per element for
/// bf16, 2^-11 for f16), so it is twice the cache dtype's bound.
pub fn quantization_tolerance(cache: DType, io: DType) -> f64 {
    let rounding = if cache == DType::F32 { 1.0 } else { 2.0 };
    (rounding * dtype_bound(cache)).max(dtype_bound(io))
}

fn dtype_bound(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::Bf16 => 1e-2,
        // Against the dequantized cache (docs/numerics.md, 8-bit caches).
        DType::Fp8E4m3 => 1e-2,
    }
}

/// Largest |actual − expected|.
pub fn max_abs(actual: &[f32], expected: &[f64]) -> f64 {
    actual
        .iter()
        .zip(expected)
        .map(|(&a, &e)| (a as f64 - e).abs())
        .fold(0.0, f64::max)
}

pub fn to_f64(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| v as f64).collect()
}
