// SPDX-License-Identifier: Apache-2.0
//! Element types as test inputs: convert from the f32 test data and back, so
//! that the reference sees exactly the values the library received.

use gqla::{Bf16, DType, Element, F16};

pub trait TestElement: Element {
    fn from_f32(value: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl TestElement for f32 {
    fn from_f32(value: f32) -> f32 {
        value
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl TestElement for F16 {
    fn from_f32(value: f32) -> F16 {
        F16::from_f32(value)
    }
    fn to_f32(self) -> f32 {
        F16::to_f32(self)
    }
}

impl TestElement for Bf16 {
    fn from_f32(value: f32) -> Bf16 {
        Bf16::from_f32(value)
    }
    fn to_f32(self) -> f32 {
        Bf16::to_f32(self)
    }
}

pub fn encode<T: TestElement>(values: &[f32]) -> Vec<T> {
    values.iter().map(|&v| T::from_f32(v)).collect()
}

pub fn decode<T: TestElement>(values: &[T]) -> Vec<f32> {
    values.iter().map(|&v| v.to_f32()).collect()
}

/// The values as a `T` buffer holds them.
pub fn rounded<T: TestElement>(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| T::from_f32(v).to_f32()).collect()
}

/// The values as a cache of `cache` dtype stores them after append (round to
/// nearest even).
pub fn as_stored(values: &[f32], cache: DType) -> Vec<f32> {
    match cache {
        DType::F32 => values.to_vec(),
        DType::F16 => rounded::<F16>(values),
        DType::Bf16 => rounded::<Bf16>(values),
        // Needs the row's scale: tests/fp8_cache.rs quantizes whole rows.
        DType::Fp8E4m3 => {
            panic!("as_stored: an fp8_e4m3 cache rounds whole rows (see fp8_cache.rs)")
        }
    }
}

/// A buffer of NaNs, so that any element decode leaves unwritten is caught.
pub fn poisoned<T: TestElement>(len: usize) -> Vec<T> {
    vec![T::from_f32(f32::NAN); len]
}
