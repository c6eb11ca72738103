// SPDX-License-Identifier: Apache-2.0
//! merge_attention_states: two partial decodes (one query token each, so each
//! attends to all of its sequence) merge into the decode over a sequence that
//! holds both parts' tokens.

use gqla::{merge_attention_states, Config, DType, Device, ErrorKind, PartialState, Session};

const H: usize = 6;
const G: usize = 2;
const D: usize = 40;
const DV: usize = 24;

/// A small deterministic generator (no crates): xorshift64* mapped to [-1, 1).
struct Rng(u64);
impl Rng {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
                x as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }
}

#[test]
fn two_parts_merge_into_the_union() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut rng = Rng(seed);
    let cfg = Config::gqa()
        .heads(H, G)
        .head_dim(D)
        .value_dim(DV)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .max_tokens(4096)
        .build()
        .unwrap();
    let session = Session::new(&cfg).unwrap();
    let (nx, ny) = (37, 70);
    let (kx, vx) = (rng.vec(nx * G * D), rng.vec(nx * G * DV));
    let (ky, vy) = (rng.vec(ny * G * D), rng.vec(ny * G * DV));
    let (x, y, u) = (
        session.add_sequence().unwrap(),
        session.add_sequence().unwrap(),
        session.add_sequence().unwrap(),
    );
    session.append(0, x, &kx, &vx).unwrap();
    session.append(0, y, &ky, &vy).unwrap();
    session.append(0, u, &kx, &vx).unwrap();
    session.append(0, u, &ky, &vy).unwrap();

    let q = rng.vec(H * D);
    let decode = |seq| {
        let (mut o, mut lse) = (vec![f32::NAN; H * DV], vec![f32::NAN; H]);
        session
            .decode_with_lse(0, &[seq], &q, &mut o, &mut lse)
            .unwrap();
        (o, lse)
    };
    let ((ox, lx), (oy, ly), (ou, lu)) = (decode(x), decode(y), decode(u));
    let parts = [
        PartialState {
            output: &ox,
            lse: &lx,
        },
        PartialState {
            output: &oy,
            lse: &ly,
        },
    ];
    let (mut o, mut lse) = (vec![f32::NAN; H * DV], vec![f32::NAN; H]);
    merge_attention_states(&parts, DV, &mut o, Some(&mut lse)).unwrap();

    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in o.iter().zip(&ou) {
        num += (f64::from(*a) - f64::from(*b)).powi(2);
        den += f64::from(*b).powi(2);
    }
    assert!(
        (num / den).sqrt() <= 1e-5,
        "seed {seed}: rel. error {}",
        (num / den).sqrt()
    );
    for (a, b) in lse.iter().zip(&lu) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "seed {seed}: lse {a} vs {b}"
        );
    }
}

#[test]
fn mismatched_parts_are_refused() {
    let (a, b, lse) = ([0.0f32; 4], [0.0f32; 6], [0.0f32; 2]);
    let parts = [
        PartialState {
            output: &a[..],
            lse: &lse,
        },
        PartialState {
            output: &b[..],
            lse: &lse,
        },
    ];
    let mut out = [0.0f32; 4];
    let err = merge_attention_states(&parts, 2, &mut out, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("parts[1].output"),
        "{}",
        err.message()
    );
    let none: [PartialState<'_, f32>; 0] = [];
    let err = merge_attention_states(&none, 2, &mut out, None).unwrap_err();
    assert!(err.message().contains("parts"), "{}", err.message());
}
