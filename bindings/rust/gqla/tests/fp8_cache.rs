// SPDX-License-Identifier: Apache-2.0
//! An 8-bit (e4m3) cache: append, decode and compare with the float64
//! reference on the cache as stored (rebuilt from the documented rule: one
//! scale = amax / 448 per token and KV head, docs/fp8-cache.md) and on the
//! inputs as given, with the quantization-error bound.

mod common;

use common::{lse_error, reference, rel_l2, Rng};
use gqla::{Config, DType, Device, ErrorKind, Session};

const H: usize = 6;
const G: usize = 2;
const D: usize = 72;
const DV: usize = 40;
/// Against the reference on the dequantized cache (the kernels alone) and
/// on the inputs as given (plus the 8-bit rounding).
const STORED_BOUND: f64 = 1e-2;
const GIVEN_BOUND: f64 = 6e-2;

/// Nearest e4m3 value (ties to the even code), saturating at 448.
fn e4m3_round(x: f32) -> f32 {
    let values: Vec<f32> = (0..0x7f_u32)
        .map(|code| {
            let (e, m) = ((code >> 3) as i32, (code & 7) as f32);
            if e == 0 {
                m / 8.0 * 2f32.powi(-6)
            } else {
                (1.0 + m / 8.0) * 2f32.powi(e - 7)
            }
        })
        .collect();
    let mag = x.abs().min(448.0);
    let mut best = 0;
    for (code, &v) in values.iter().enumerate() {
        let (d, db) = ((v - mag).abs(), (values[best] - mag).abs());
        if d < db || (d == db && code % 2 == 0) {
            best = code;
        }
    }
    values[best].copysign(x)
}

/// Each run of `group` values quantized with its own scale and read back.
fn stored(values: &[f32], group: usize) -> Vec<f32> {
    values
        .chunks(group)
        .flat_map(|row| {
            let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if amax > 0.0 { amax / 448.0 } else { 1.0 };
            row.iter()
                .map(move |&v| e4m3_round(v / scale) * scale)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn fp8_cache_decode_matches_the_reference() {
    let mut rng = Rng::fresh(0xf8);
    let cfg = Config::gqa()
        .heads(H, G)
        .head_dim(D)
        .value_dim(DV)
        .cache_dtype(DType::Fp8E4m3)
        .page_size(16)
        .max_tokens(1024)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let session = Session::new(&cfg).unwrap();
    assert_eq!(session.config().cache_dtype(), DType::Fp8E4m3);
    assert_eq!(DType::Fp8E4m3.to_string(), "fp8_e4m3");
    let seq = session.add_sequence().unwrap();
    let len = 57;
    let mut k = rng.vec(len * G * D, 1.0);
    for row in k.chunks_mut(D) {
        row[3] *= 50.0; // an outlier channel
    }
    let v = rng.vec(len * G * DV, 1.0);
    session
        .append(0, seq, &k[..20 * G * D], &v[..20 * G * DV])
        .unwrap();
    session
        .append(0, seq, &k[20 * G * D..], &v[20 * G * DV..])
        .unwrap();
    let s_q = 2;
    let q = rng.vec(s_q * H * D, 1.0);
    let mut o = vec![f32::NAN; s_q * H * DV];
    let mut lse = vec![f32::NAN; s_q * H];
    session
        .decode_with_lse(0, &[seq], &q, &mut o, &mut lse)
        .unwrap();
    let scale = 1.0 / (D as f64).sqrt();
    let at_stored = reference::gqa(
        &stored(&k, D),
        &stored(&v, DV),
        &q,
        len,
        s_q,
        H,
        G,
        D,
        DV,
        scale,
    );
    let as_given = reference::gqa(&k, &v, &q, len, s_q, H, G, D, DV, scale);
    let hint = rng.replay_hint();
    assert!(
        rel_l2(&o, &at_stored.o) <= STORED_BOUND,
        "o vs stored: {} ({hint})",
        rel_l2(&o, &at_stored.o)
    );
    assert!(
        lse_error(&lse, &at_stored.lse) <= STORED_BOUND,
        "lse ({hint})"
    );
    assert!(
        rel_l2(&o, &as_given.o) <= GIVEN_BOUND,
        "o vs given: {} ({hint})",
        rel_l2(&o, &as_given.o)
    );
}

#[test]
fn fp8_is_not_an_io_dtype() {
    let err = Config::gqa()
        .heads(H, G)
        .head_dim(D)
        .cache_dtype(DType::Fp8E4m3)
        .io_dtype(DType::Fp8E4m3)
        .max_tokens(64)
        .device(Device::Cpu)
        .build()
        .and_then(|cfg| Session::new(&cfg).map(|_| ()))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}
