//! Shared by the integration tests: a PRNG, the float64 reference of the
//! attention math, and error measures. Kept independent of the library: it
//! implements the defining formulas, not either decode path.

#![allow(dead_code)]

pub mod gqla_fixture;
pub mod io;
pub mod reference;

/// xorshift64* — fresh, reproducible-per-seed random inputs without crates.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from the clock and `salt`, so every run draws new
    /// data; the seed is printed so that a failure can be replayed.
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
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
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
