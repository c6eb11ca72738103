// SPDX-License-Identifier: Apache-2.0
//! GQLA decode on both paths against the float64 reference, within the dtype bounds.

mod common;

use common::gqla_fixture::{GqlaFixture, Options, ODD_DIMS};
use common::reference::GqlaDims;
use common::{rel_l2, to_f64};
use gqla::{Bf16, DType, Path, F16};

const F32_TOLERANCE: f64 = 1e-5;
const F16_TOLERANCE: f64 = 2e-3;
const BF16_TOLERANCE: f64 = 1e-2;

/// Ragged lengths around the page size 16 (1, 15, 16, 17) and a longer one,
/// appended in two uneven batches (one with a zero count).
fn ragged_fixture(dims: GqlaDims, options: Options, salt: u64) -> GqlaFixture {
    let mut fx = GqlaFixture::new(dims, options, salt);
    let all: Vec<usize> = (0..5).map(|_| fx.add_sequence()).collect();
    fx.append_many::<f32>(&all, &[1, 9, 16, 0, 60]);
    fx.append_many::<f32>(&all[1..], &[6, 0, 17, 77]);
    fx
}

/// Decodes with s_q = 1..=5 on both paths, checks each against the reference
/// and the two paths against each other.
fn check_both_paths(fx: &mut GqlaFixture, tolerance: f64) {
    let everyone: Vec<usize> = (0..fx.seqs.len()).collect();
    for s_q in 1..=5 {
        // s_q may not exceed a sequence's length.
        let batch: Vec<usize> = everyone
            .iter()
            .copied()
            .filter(|&i| fx.seqs[i].len(fx.dims) >= s_q)
            .collect();
        let q = fx.random_queries(batch.len(), s_q);
        fx.session.select_path(Path::Absorb).unwrap();
        assert_eq!(fx.session.path().unwrap(), Path::Absorb);
        let absorb = fx.decode_checked::<f32>(&batch, s_q, &q, tolerance);
        fx.session.select_path(Path::Gqa).unwrap();
        assert_eq!(fx.session.path().unwrap(), Path::Gqa);
        let gqa = fx.decode_checked::<f32>(&batch, s_q, &q, tolerance);
        // Each path is within `tolerance` of the reference, so they agree within
        // twice that; with an f32 cache they must agree within 1e-5.
        let limit = if tolerance <= F32_TOLERANCE {
            F32_TOLERANCE
        } else {
            2.0 * tolerance
        };
        let agreement = rel_l2(&absorb, &to_f64(&gqa));
        assert!(
            agreement <= limit,
            "paths disagree: rel L2 {agreement:.3e} > {limit:.0e} (s_q {s_q}, {})",
            fx.rng.replay_hint()
        );
    }
}

#[test]
fn both_paths_match_reference_with_f32_cache() {
    for groups in [2, 3] {
        let dims = GqlaDims { groups, ..ODD_DIMS };
        let mut fx = ragged_fixture(dims, Options::default(), 1 + groups as u64);
        check_both_paths(&mut fx, F32_TOLERANCE);
    }
}

#[test]
fn mla_case_g_equals_h() {
    let dims = GqlaDims {
        heads: 4,
        groups: 4,
        r: 64,
        dc: 32,
        dr: 16,
        dv: 24,
    };
    let mut fx = ragged_fixture(dims, Options::default(), 3);
    check_both_paths(&mut fx, F32_TOLERANCE);
}

#[test]
fn bf16_cache_within_1e_2() {
    let mut fx = ragged_fixture(
        ODD_DIMS,
        Options {
            cache: DType::Bf16,
            ..Options::default()
        },
        4,
    );
    check_both_paths(&mut fx, BF16_TOLERANCE);
}

#[test]
fn f16_cache_within_2e_3() {
    let mut fx = ragged_fixture(
        ODD_DIMS,
        Options {
            cache: DType::F16,
            ..Options::default()
        },
        5,
    );
    check_both_paths(&mut fx, F16_TOLERANCE);
}

#[test]
fn bf16_buffers_and_cache() {
    let options = Options {
        cache: DType::Bf16,
        io: DType::Bf16,
        ..Options::default()
    };
    let mut fx = GqlaFixture::new(ODD_DIMS, options, 6);
    let (a, b) = (fx.add_sequence(), fx.add_sequence());
    fx.append::<Bf16>(a, 23);
    fx.append_many::<Bf16>(&[b, a], &[40, 2]);
    for path in [Path::Absorb, Path::Gqa] {
        fx.session.select_path(path).unwrap();
        for s_q in [1, 4] {
            let q = fx.random_queries(2, s_q);
            fx.decode_checked::<Bf16>(&[a, b], s_q, &q, BF16_TOLERANCE);
        }
    }
}

#[test]
fn f16_buffers_and_cache() {
    let options = Options {
        cache: DType::F16,
        io: DType::F16,
        ..Options::default()
    };
    let mut fx = GqlaFixture::new(ODD_DIMS, options, 7);
    let a = fx.add_sequence();
    fx.append::<F16>(a, 33);
    for path in [Path::Absorb, Path::Gqa] {
        fx.session.select_path(path).unwrap();
        let q = fx.random_queries(1, 2);
        fx.decode_checked::<F16>(&[a], 2, &q, F16_TOLERANCE);
    }
}

#[test]
fn thousands_of_tokens() {
    let mut fx = GqlaFixture::new(
        ODD_DIMS,
        Options {
            page_size: 64,
            ..Options::default()
        },
        8,
    );
    let (long, short) = (fx.add_sequence(), fx.add_sequence());
    for chunk in [777, 1000, 223, 1] {
        fx.append::<f32>(long, chunk);
    }
    fx.append::<f32>(short, 65);
    for path in [Path::Absorb, Path::Gqa] {
        fx.session.select_path(path).unwrap();
        let q = fx.random_queries(2, 3);
        fx.decode_checked::<f32>(&[long, short], 3, &q, F32_TOLERANCE);
    }
}

#[test]
fn path_switch_keeps_the_cache_consistent() {
    let mut fx = GqlaFixture::new(
        ODD_DIMS,
        Options {
            path: Path::Absorb,
            ..Options::default()
        },
        9,
    );
    let (a, b) = (fx.add_sequence(), fx.add_sequence());
    fx.append::<f32>(a, 20);
    fx.append::<f32>(b, 3);
    assert_eq!(
        fx.session.stats().unwrap().expanded_bytes,
        0,
        "absorb keeps no expanded cache"
    );
    let q = fx.random_queries(2, 1);
    let before = fx.decode_checked::<f32>(&[a, b], 1, &q, F32_TOLERANCE);

    // Switching to GQA expands the latent cache of every live sequence.
    fx.session.select_path(Path::Gqa).unwrap();
    assert_eq!(fx.session.paths().unwrap(), (Path::Gqa, Path::Gqa));
    assert!(
        fx.session.stats().unwrap().expanded_bytes > 0,
        "GQA path keeps the expanded cache"
    );
    let after = fx.decode_checked::<f32>(&[a, b], 1, &q, F32_TOLERANCE);
    assert!(rel_l2(&after, &to_f64(&before)) <= F32_TOLERANCE);

    // Tokens appended while on the GQA path are visible after switching back.
    fx.append::<f32>(a, 13);
    fx.append_many::<f32>(&[b, a], &[14, 1]);
    let q = fx.random_queries(2, 2);
    let on_gqa = fx.decode_checked::<f32>(&[a, b], 2, &q, F32_TOLERANCE);
    fx.session.select_path(Path::Absorb).unwrap();
    assert_eq!(
        fx.session.stats().unwrap().expanded_bytes,
        0,
        "switching to absorb frees the expanded cache"
    );
    let on_absorb = fx.decode_checked::<f32>(&[a, b], 2, &q, F32_TOLERANCE);
    assert!(rel_l2(&on_absorb, &to_f64(&on_gqa)) <= F32_TOLERANCE);

    // AUTO resolves to a concrete path.
    fx.session.select_path(Path::Auto).unwrap();
    let (active, requested) = fx.session.paths().unwrap();
    assert_eq!(requested, Path::Auto);
    assert!(
        matches!(active, Path::Gqa | Path::Absorb),
        "active path {active:?}"
    );
    fx.decode_checked::<f32>(&[b, a], 2, &q, F32_TOLERANCE);
}

#[test]
fn fork_shares_the_prefix_then_diverges() {
    let mut fx = GqlaFixture::new(ODD_DIMS, Options::default(), 10);
    let parent = fx.add_sequence();
    fx.append::<f32>(parent, 21); // a shared partial page (page size 16)
    let child_id = fx.session.fork(fx.seqs[parent].id).unwrap();
    fx.seqs.push(common::gqla_fixture::Sequence {
        id: child_id,
        c: fx.seqs[parent].c.clone(),
        kr: fx.seqs[parent].kr.clone(),
    });
    let child = fx.seqs.len() - 1;
    assert_eq!(fx.session.length(child_id, 0).unwrap(), 21);
    fx.append::<f32>(parent, 4);
    fx.append::<f32>(child, 7);
    for path in [Path::Gqa, Path::Absorb] {
        fx.session.select_path(path).unwrap();
        let q = fx.random_queries(2, 2);
        fx.decode_checked::<f32>(&[parent, child], 2, &q, F32_TOLERANCE);
    }
    fx.session.release(fx.seqs[parent].id).unwrap();
    let q = fx.random_queries(1, 1);
    fx.decode_checked::<f32>(&[child], 1, &q, F32_TOLERANCE);
}

#[test]
fn stats_track_sequences_and_tokens() {
    let mut fx = GqlaFixture::new(ODD_DIMS, Options::default(), 11);
    let (a, b) = (fx.add_sequence(), fx.add_sequence());
    fx.append::<f32>(a, 17);
    fx.append::<f32>(b, 5);
    let stats = fx.session.stats().unwrap();
    assert_eq!(stats.sequences, 2);
    assert_eq!(stats.tokens_cached, 22);
    assert_eq!(stats.page_size, 16);
    assert_eq!(stats.pages_used + stats.pages_free, stats.pages_total);
    assert!(stats.pages_used >= 3, "17 + 5 tokens need 3 pages of 16");
    assert_eq!(stats.token_capacity_left, stats.pages_free * 16);
    assert!(stats.weight_bytes > 0);
    fx.session.release(fx.seqs[a].id).unwrap();
    let after = fx.session.stats().unwrap();
    assert_eq!(after.sequences, 1);
    assert!(after.pages_free > stats.pages_free, "release returns pages");
}
