// SPDX-License-Identifier: Apache-2.0
//! Sparse (top-k) attention through `AttendOptions::indices`: the absorb path
//! and GQA_TRANSIENT against a float64 reference of dense attention
//! restricted to the listed positions, and refused index slices.

mod common;

use common::gqla_fixture::{GqlaFixture, Options, ODD_DIMS};
use common::reference::GqlaDims;
use common::{lse_error, rel_l2, Rng};
use gqla::{AttendOptions, ErrorKind, Path, SequenceId};

const TOLERANCE: f64 = 1e-5; // f32 cache and io
const LENGTHS: [usize; 4] = [1, 16, 17, 90];

/// Lists of `topk` entries for the `n` queries of a sequence of `len`
/// tokens: visible positions, -1, the causal tail, out-of-range entries and
/// repeats; query `empty` lists nothing visible.
fn lists(rng: &mut Rng, len: usize, n: usize, topk: usize, empty: Option<usize>) -> Vec<i32> {
    let mut out = Vec::with_capacity(n * topk);
    for i in 0..n {
        let limit = len - n + i;
        for t in 0..topk {
            let pick = rng.next_u64();
            let visible = (pick % (limit as u64 + 1)) as i32;
            let tail = if limit + 1 < len {
                (limit + 1 + (pick as usize >> 8) % (len - limit - 1)) as i32
            } else {
                -1
            };
            let v = if Some(i) == empty {
                [-1, tail, (len + 3) as i32][(pick >> 20) as usize % 3]
            } else {
                match (pick >> 40) % 6 {
                    0 => -1,
                    1 => tail,
                    2 => (len + (pick as usize >> 12) % 40) as i32,
                    3 if t > 0 => out[out.len() - 1], // a repeat
                    _ => visible,
                }
            };
            out.push(v);
        }
    }
    out
}

/// Float64 o and lse of one sequence's n queries over its listed positions.
fn sparse_reference(
    d: GqlaDims,
    fx: &GqlaFixture,
    seq: usize,
    q: &[f32],
    idx: &[i32],
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let s = &fx.seqs[seq];
    let len = s.len(d);
    let topk = idx.len() / n;
    let n_rep = d.heads / d.groups;
    let project = |g: usize, row: usize, j: usize| -> f64 {
        let w = &fx.w[(g * (d.dc + d.dv) + row) * d.r..][..d.r];
        w.iter()
            .zip(&s.c[j * d.r..][..d.r])
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum()
    };
    let mut o = vec![0.0; n * d.heads * d.dv];
    let mut lse = vec![f64::NEG_INFINITY; n * d.heads];
    for i in 0..n {
        let pos: Vec<usize> = idx[i * topk..][..topk]
            .iter()
            .filter(|&&j| j >= 0 && (j as usize) <= len - n + i)
            .map(|&j| j as usize)
            .collect();
        if pos.is_empty() {
            continue;
        }
        for h in 0..d.heads {
            let g = h / n_rep;
            let qh = &q[(i * d.heads + h) * d.dq()..][..d.dq()];
            let scores: Vec<f64> = pos
                .iter()
                .map(|&j| {
                    let nope: f64 = (0..d.dc).map(|e| qh[e] as f64 * project(g, e, j)).sum();
                    let rope: f64 = (0..d.dr)
                        .map(|e| qh[d.dc + e] as f64 * s.kr[j * d.dr + e] as f64)
                        .sum();
                    d.default_scale() * (nope + rope)
                })
                .collect();
            let peak = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - peak).exp()).collect();
            let total: f64 = weights.iter().sum();
            let out = &mut o[(i * d.heads + h) * d.dv..][..d.dv];
            for (&j, &w) in pos.iter().zip(&weights) {
                for (e, acc) in out.iter_mut().enumerate() {
                    *acc += w / total * project(g, d.dc + e, j);
                }
            }
            lse[i * d.heads + h] = peak + total.ln();
        }
    }
    (o, lse)
}

#[test]
fn sparse_attend_matches_the_reference_on_absorb_and_transient() {
    let d = ODD_DIMS;
    for path in [Path::Absorb, Path::GqaTransient] {
        let mut fx = GqlaFixture::new(d, Options::default(), 31);
        let all: Vec<usize> = LENGTHS.iter().map(|_| fx.add_sequence()).collect();
        fx.append_many::<f32>(&all, &LENGTHS);
        let hint = fx.rng.replay_hint();
        let q_lens = [1usize, 3, 1, 5];
        let topk = 24;
        let rows: usize = q_lens.iter().sum();
        let q = fx.rng.vec(rows * d.heads * d.dq(), 1.0);
        let mut idx = Vec::new();
        for (k, (&len, &n)) in LENGTHS.iter().zip(&q_lens).enumerate() {
            idx.extend(lists(
                &mut fx.rng,
                len,
                n,
                topk,
                if k == 1 { Some(0) } else { None },
            ));
        }
        let ids: Vec<SequenceId> = fx.seqs.iter().map(|s| s.id).collect();
        let mut o = vec![f32::NAN; rows * d.heads * d.dv];
        let mut lse = vec![f32::NAN; rows * d.heads];
        let options = AttendOptions::new()
            .q_lens(&q_lens)
            .lse(&mut lse)
            .path(path)
            .indices(&idx);
        let taken = fx
            .session
            .attend(0, &ids, &q, &mut o, options)
            .expect("attend");
        assert_eq!(taken, path);
        let (mut want_o, mut want_l) = (Vec::new(), Vec::new());
        let mut row = 0;
        for (k, &n) in q_lens.iter().enumerate() {
            let (ro, rl) = sparse_reference(
                d,
                &fx,
                k,
                &q[row * d.heads * d.dq()..][..n * d.heads * d.dq()],
                &idx[row * topk..][..n * topk],
                n,
            );
            want_o.extend(ro);
            want_l.extend(rl);
            row += n;
        }
        // Rows without a visible entry: o = 0, lse = -inf; the rest compared.
        let (mut go, mut wo, mut gl, mut wl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..rows * d.heads {
            if want_l[r].is_infinite() {
                assert_eq!(lse[r], f32::NEG_INFINITY, "{hint}");
                assert!(o[r * d.dv..][..d.dv].iter().all(|&x| x == 0.0), "{hint}");
                continue;
            }
            go.extend_from_slice(&o[r * d.dv..][..d.dv]);
            wo.extend_from_slice(&want_o[r * d.dv..][..d.dv]);
            gl.push(lse[r]);
            wl.push(want_l[r]);
        }
        assert!(
            rel_l2(&go, &wo) <= TOLERANCE,
            "{path:?} o: {} ({hint})",
            rel_l2(&go, &wo)
        );
        assert!(lse_error(&gl, &wl) <= TOLERANCE, "{path:?} lse ({hint})");
    }
}

#[test]
fn sparse_attend_refuses_a_ragged_index_slice() {
    let d = ODD_DIMS;
    let mut fx = GqlaFixture::new(d, Options::default(), 32);
    let seq = fx.add_sequence();
    fx.append::<f32>(seq, 20);
    let q = fx.rng.vec(2 * d.heads * d.dq(), 1.0);
    let mut o = vec![0.0f32; 2 * d.heads * d.dv];
    let ids = [fx.seqs[0].id];
    let idx = [0i32, 1, 2]; // 3 entries for 2 query rows
    let err = fx
        .session
        .attend(
            0,
            &ids,
            &q,
            &mut o,
            AttendOptions::new().q_lens(&[2]).indices(&idx),
        )
        .expect_err("a ragged slice");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("indices"), "{err}");
}
