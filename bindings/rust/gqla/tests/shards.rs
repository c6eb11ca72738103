// SPDX-License-Identifier: Apache-2.0
//! Group-sharded sessions (tensor parallelism): one session per shard, each
//! fed its heads' queries, gives the full layer's output gathered over
//! heads, against the float64 reference; a shard without the latent refuses
//! the absorb path.

mod common;

use common::reference::{self, GqlaDims};
use common::{rel_l2, Rng};
use gqla::{Config, DType, Device, ErrorKind, Path, Session};

const DIMS: GqlaDims = GqlaDims {
    heads: 8,
    groups: 4,
    r: 40,
    dc: 16,
    dr: 8,
    dv: 12,
};
const SHARDS: [(usize, usize); 3] = [(0, 1), (1, 2), (3, 1)];

fn shard(begin: usize, count: usize, keep_latent: bool, path: Path) -> Session {
    let cfg = Config::gqla()
        .heads(DIMS.heads, DIMS.groups)
        .latent_dim(DIMS.r)
        .nope_dim(DIMS.dc)
        .rope_dim(DIMS.dr)
        .value_dim(DIMS.dv)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .threads(2)
        .page_size(4)
        .max_tokens(512)
        .path(path)
        .groups(begin, count)
        .keep_latent(keep_latent)
        .build()
        .unwrap();
    assert_eq!(cfg.served_heads(), count * 2);
    Session::new(&cfg).unwrap()
}

fn check_shards(keep_latent: bool, path: Path) {
    let mut rng = Rng::fresh(17);
    let w = rng.vec(DIMS.weight_len(), 0.2);
    let (len, s_q) = (23, 3);
    let c = rng.vec(len * DIMS.r, 1.0);
    let kr = rng.vec(len * DIMS.dr, 1.0);
    let q = rng.vec(s_q * DIMS.heads * DIMS.dq(), 1.0);
    let mut o = vec![f32::NAN; s_q * DIMS.heads * DIMS.dv];
    for (i, &(begin, count)) in SHARDS.iter().enumerate() {
        let s = shard(begin, count, keep_latent, path);
        let per_group = (DIMS.dc + DIMS.dv) * DIMS.r;
        // Whole W_UKV on some ranks, the shard's rows on the others.
        if i % 2 == 0 {
            s.set_weights(0, &w).unwrap();
        } else {
            s.set_weights(0, &w[begin * per_group..(begin + count) * per_group])
                .unwrap();
        }
        let seq = s.add_sequence().unwrap();
        s.append(0, seq, &c, &kr).unwrap();
        let (h0, heads) = (begin * 2, count * 2);
        let mut q_shard = Vec::new();
        for row in 0..s_q {
            let start = (row * DIMS.heads + h0) * DIMS.dq();
            q_shard.extend_from_slice(&q[start..start + heads * DIMS.dq()]);
        }
        let mut o_shard = vec![0.0f32; s_q * heads * DIMS.dv];
        s.decode(0, &[seq], &q_shard, &mut o_shard).unwrap();
        for row in 0..s_q {
            let dst = (row * DIMS.heads + h0) * DIMS.dv;
            o[dst..dst + heads * DIMS.dv]
                .copy_from_slice(&o_shard[row * heads * DIMS.dv..][..heads * DIMS.dv]);
        }
        let stats = s.stats().unwrap();
        assert_eq!(
            stats.expanded_bytes_per_token,
            (count * (DIMS.dc + DIMS.dv) * 4) as u64
        );
        let kept = if keep_latent {
            DIMS.r + DIMS.dr
        } else {
            DIMS.dr
        };
        assert_eq!(stats.kept_bytes_per_token, (kept * 4) as u64);
        if !keep_latent {
            let err = s.select_path(Path::Absorb).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidState);
            assert!(err.message().contains("keep_latent"), "{}", err.message());
        }
    }
    let want = reference::gqla(DIMS, &w, &c, &kr, &q, len, s_q, DIMS.default_scale());
    let err = rel_l2(&o, &want.o);
    assert!(
        err <= 1e-5,
        "shards vs reference: rel L2 {err:.3e} ({})",
        rng.replay_hint()
    );
}

#[test]
fn shards_keeping_the_latent_match_the_reference_on_both_paths() {
    check_shards(true, Path::Gqa);
    check_shards(true, Path::Absorb);
}

#[test]
fn shards_without_the_latent_match_the_reference() {
    check_shards(false, Path::Auto);
}

#[test]
fn bad_shards_are_refused_naming_the_field() {
    let err = Config::gqla()
        .heads(8, 4)
        .latent_dim(40)
        .nope_dim(16)
        .rope_dim(8)
        .value_dim(12)
        .groups(3, 2)
        .build()
        .unwrap_err();
    assert!(
        err.message().contains("config.group_begin"),
        "{}",
        err.message()
    );
}
