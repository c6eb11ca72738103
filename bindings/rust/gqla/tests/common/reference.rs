// SPDX-License-Identifier: Apache-2.0
//! Float64 implementation of the attention math, per sequence.
//!
//! Causality: with cache length L and s_q queries, query i attends to
//! positions j <= L - s_q + i.

/// Output `o [s_q, H, dv]` and `lse [s_q, H]` of one sequence.
pub struct Attention {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// Softmax-weighted sum for one query head: `score(j)` for j in 0..=last,
/// `value(j, out)` adds p_j-weighted rows. Returns the natural-log LSE.
fn attend(last: usize, score: impl Fn(usize) -> f64, mut add_value: impl FnMut(usize, f64)) -> f64 {
    let scores: Vec<f64> = (0..=last).map(&score).collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let denom: f64 = scores.iter().map(|s| (s - max).exp()).sum();
    for (j, s) in scores.iter().enumerate() {
        add_value(j, (s - max).exp() / denom);
    }
    max + denom.ln()
}

/// GQA (docs/architecture.md, "The math"). k `[L, G, d]`, v `[L, G, dv]`, q `[s_q, H, d]`.
#[allow(clippy::too_many_arguments)]
pub fn gqa(
    k: &[f32],
    v: &[f32],
    q: &[f32],
    len: usize,
    s_q: usize,
    heads: usize,
    groups: usize,
    d: usize,
    dv: usize,
    scale: f64,
) -> Attention {
    let n_rep = heads / groups;
    let mut o = vec![0.0; s_q * heads * dv];
    let mut lse = vec![0.0; s_q * heads];
    for i in 0..s_q {
        let last = len - s_q + i;
        for h in 0..heads {
            let g = h / n_rep;
            let qh = &q[(i * heads + h) * d..][..d];
            let out = &mut o[(i * heads + h) * dv..][..dv];
            lse[i * heads + h] = attend(
                last,
                |j| {
                    let kj = &k[(j * groups + g) * d..][..d];
                    scale
                        * qh.iter()
                            .zip(kj)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                },
                |j, p| {
                    let vj = &v[(j * groups + g) * dv..][..dv];
                    for (acc, &x) in out.iter_mut().zip(vj) {
                        *acc += p * x as f64;
                    }
                },
            );
        }
    }
    Attention { o, lse }
}

/// Dims of a GQLA layer.
#[derive(Clone, Copy, Debug)]
pub struct GqlaDims {
    pub heads: usize,
    pub groups: usize,
    pub r: usize,
    pub dc: usize,
    pub dr: usize,
    pub dv: usize,
}

impl GqlaDims {
    pub fn dq(&self) -> usize {
        self.dc + self.dr
    }
    pub fn weight_len(&self) -> usize {
        self.groups * (self.dc + self.dv) * self.r
    }
    pub fn default_scale(&self) -> f64 {
        1.0 / ((self.dc + self.dr) as f64).sqrt()
    }
}

/// GQLA (docs/architecture.md, "The math"), straight from the definition:
/// s[h,j] = scale * (qc[h]·(W_UK[g] c[j]) + qr[h]·kr[j]), o[h] = Σ_j p (W_UV[g] c[j]).
/// w `[G*(dc+dv), r]`, c `[L, r]`, kr `[L, dr]`, q `[s_q, H, dc+dr]`.
#[allow(clippy::too_many_arguments)]
pub fn gqla(
    dims: GqlaDims,
    w: &[f32],
    c: &[f32],
    kr: &[f32],
    q: &[f32],
    len: usize,
    s_q: usize,
    scale: f64,
) -> Attention {
    let GqlaDims {
        heads,
        groups,
        r,
        dc,
        dr,
        dv,
    } = dims;
    let n_rep = heads / groups;
    let dq = dc + dr;
    // Project every cached latent once per group: K_nope[g][j] and V[g][j].
    let project = |g: usize, row0: usize, rows: usize| -> Vec<f64> {
        let mut out = vec![0.0; len * rows];
        for j in 0..len {
            let cj = &c[j * r..][..r];
            for row in 0..rows {
                let wrow = &w[(g * (dc + dv) + row0 + row) * r..][..r];
                out[j * rows + row] = wrow
                    .iter()
                    .zip(cj)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum();
            }
        }
        out
    };
    let keys: Vec<Vec<f64>> = (0..groups).map(|g| project(g, 0, dc)).collect();
    let values: Vec<Vec<f64>> = (0..groups).map(|g| project(g, dc, dv)).collect();

    let mut o = vec![0.0; s_q * heads * dv];
    let mut lse = vec![0.0; s_q * heads];
    for i in 0..s_q {
        let last = len - s_q + i;
        for h in 0..heads {
            let g = h / n_rep;
            let qh = &q[(i * heads + h) * dq..][..dq];
            let (qc, qr) = qh.split_at(dc);
            let out = &mut o[(i * heads + h) * dv..][..dv];
            lse[i * heads + h] = attend(
                last,
                |j| {
                    let nope: f64 = qc
                        .iter()
                        .zip(&keys[g][j * dc..][..dc])
                        .map(|(&a, &b)| a as f64 * b)
                        .sum();
                    let rope: f64 = qr
                        .iter()
                        .zip(&kr[j * dr..][..dr])
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum();
                    scale * (nope + rope)
                },
                |j, p| {
                    for (acc, &x) in out.iter_mut().zip(&values[g][j * dv..][..dv]) {
                        *acc += p * x;
                    }
                },
            );
        }
    }
    Attention { o, lse }
}
