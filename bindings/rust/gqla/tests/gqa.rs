// SPDX-License-Identifier: Apache-2.0
//! GQA-kind sessions against the float64 reference, within the dtype bounds.

mod common;

use common::io::{as_stored, decode, encode, poisoned, rounded, TestElement};
use common::{lse_error, quantization_tolerance, reference, rel_l2, Rng};
use gqla::{Bf16, Config, DType, Device, ErrorKind, Path, SequenceId, Session, F16};

/// H=6 query heads in G=3 groups, D=64, Dv=80 (value dim differs from D).
const H: usize = 6;
const G: usize = 3;
const D: usize = 64;
const DV: usize = 80;

/// A sequence and its keys/values as given to append (io-rounded, before
/// rounding into the cache).
struct Cached {
    id: SequenceId,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn session(cache: DType, io: DType, page_size: usize) -> Session {
    let cfg = Config::gqa()
        .heads(H, G)
        .head_dim(D)
        .value_dim(DV)
        .cache_dtype(cache)
        .io_dtype(io)
        .page_size(page_size)
        .max_tokens(8192)
        .device(Device::Cpu)
        .build()
        .unwrap();
    Session::new(&cfg).unwrap()
}

/// Sequences of the given lengths, filled through one ragged `append_many`
/// plus one `append` each (when longer than 1).
fn fill<T: TestElement>(session: &Session, rng: &mut Rng, lengths: &[usize]) -> Vec<Cached> {
    let mut seqs: Vec<Cached> = lengths
        .iter()
        .map(|_| Cached {
            id: session.add_sequence().unwrap(),
            k: vec![],
            v: vec![],
        })
        .collect();
    let first: Vec<usize> = lengths.iter().map(|&l| (l + 1) / 2).collect();
    let total: usize = first.iter().sum();
    let (k, v) = (
        rounded::<T>(&rng.vec(total * G * D, 1.0)),
        rounded::<T>(&rng.vec(total * G * DV, 1.0)),
    );
    let ids: Vec<SequenceId> = seqs.iter().map(|s| s.id).collect();
    session
        .append_many(0, &ids, &first, &encode::<T>(&k), &encode::<T>(&v))
        .unwrap();
    let mut row = 0;
    for (seq, &n) in seqs.iter_mut().zip(&first) {
        seq.k.extend_from_slice(&k[row * G * D..(row + n) * G * D]);
        seq.v
            .extend_from_slice(&v[row * G * DV..(row + n) * G * DV]);
        row += n;
    }
    for (seq, (&len, &done)) in seqs.iter_mut().zip(lengths.iter().zip(&first)) {
        let n = len - done;
        if n == 0 {
            continue;
        }
        let (k, v) = (
            rounded::<T>(&rng.vec(n * G * D, 1.0)),
            rounded::<T>(&rng.vec(n * G * DV, 1.0)),
        );
        session
            .append(0, seq.id, &encode::<T>(&k), &encode::<T>(&v))
            .unwrap();
        seq.k.extend(k);
        seq.v.extend(v);
    }
    for (seq, &len) in seqs.iter().zip(lengths) {
        assert_eq!(session.length(seq.id, 0).unwrap(), len);
    }
    seqs
}

/// o (rel. L2) and lse (`lse_error`) within `tolerance` of the reference on
/// the inputs as a `cache` cache stores them, and within the quantization
/// bound of the reference on the inputs as given.
fn check_decode<T: TestElement>(
    session: &Session,
    rng: &mut Rng,
    seqs: &[&Cached],
    s_q: usize,
    (cache, io): (DType, DType),
    tolerance: f64,
) {
    let batch = seqs.len();
    let q = rounded::<T>(&rng.vec(batch * s_q * H * D, 2.0));
    let ids: Vec<SequenceId> = seqs.iter().map(|s| s.id).collect();
    let mut o = poisoned::<T>(batch * s_q * H * DV);
    let mut lse = vec![f32::NAN; batch * s_q * H];
    session
        .decode_with_lse(0, &ids, &encode::<T>(&q), &mut o, &mut lse)
        .unwrap();
    let o = decode(&o);
    let scale = 1.0 / (D as f64).sqrt();
    let context = format!("s_q {s_q}, {}", rng.replay_hint());
    for stored in [true, false] {
        if !stored && (cache == DType::F32 || cache == io) {
            break; // the cache holds the inputs unchanged
        }
        let (bound, against) = if stored {
            (tolerance, "stored inputs")
        } else {
            (quantization_tolerance(cache, io), "given inputs")
        };
        let (mut ref_o, mut ref_lse) = (vec![], vec![]);
        for (b, seq) in seqs.iter().enumerate() {
            let len = seq.k.len() / (G * D);
            let qb = &q[b * s_q * H * D..][..s_q * H * D];
            let (k, v) = if stored {
                (as_stored(&seq.k, cache), as_stored(&seq.v, cache))
            } else {
                (seq.k.clone(), seq.v.clone())
            };
            let r = reference::gqa(&k, &v, qb, len, s_q, H, G, D, DV, scale);
            ref_o.extend(r.o);
            ref_lse.extend(r.lse);
        }
        let err = rel_l2(&o, &ref_o);
        assert!(
            err <= bound,
            "o: rel L2 {err:.3e} > {bound:.0e} against the {against} ({context})"
        );
        let lse_err = lse_error(&lse, &ref_lse);
        assert!(
            lse_err <= bound,
            "lse: error {lse_err:.3e} > {bound:.0e} against the {against} ({context})"
        );
    }
}

fn check_all_q_lens<T: TestElement>(cache: DType, io: DType, tolerance: f64, salt: u64) {
    let mut rng = Rng::fresh(salt);
    let page = 32;
    let s = session(cache, io, page);
    let seqs = fill::<T>(&s, &mut rng, &[1, page - 1, page, page + 1, 700]);
    for s_q in 1..=5 {
        let batch: Vec<&Cached> = seqs.iter().filter(|c| c.k.len() / (G * D) >= s_q).collect();
        check_decode::<T>(&s, &mut rng, &batch, s_q, (cache, io), tolerance);
    }
}

#[test]
fn f32_cache_matches_reference() {
    check_all_q_lens::<f32>(DType::F32, DType::F32, 1e-5, 21);
}

#[test]
fn f16_cache_within_2e_3() {
    check_all_q_lens::<f32>(DType::F16, DType::F32, 2e-3, 22);
    check_all_q_lens::<F16>(DType::F16, DType::F16, 2e-3, 23);
}

#[test]
fn bf16_cache_within_1e_2() {
    check_all_q_lens::<f32>(DType::Bf16, DType::F32, 1e-2, 24);
    check_all_q_lens::<Bf16>(DType::Bf16, DType::Bf16, 1e-2, 25);
}

#[test]
fn many_sequences_of_different_lengths() {
    let mut rng = Rng::fresh(26);
    let s = session(DType::F32, DType::F32, 16);
    let lengths: Vec<usize> = (0..40).map(|i| 1 + (i * 37) % 90).collect();
    let seqs = fill::<f32>(&s, &mut rng, &lengths);
    let batch: Vec<&Cached> = seqs.iter().collect();
    check_decode::<f32>(&s, &mut rng, &batch, 1, (DType::F32, DType::F32), 1e-5);
}

#[test]
fn the_only_path_is_gqa() {
    let s = session(DType::F32, DType::F32, 16);
    assert_eq!(s.path().unwrap(), Path::Gqa);
    s.select_path(Path::Auto).unwrap();
    s.select_path(Path::Gqa).unwrap();
    assert_eq!(
        s.select_path(Path::Absorb).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(s.path().unwrap(), Path::Gqa);
}
