// SPDX-License-Identifier: Apache-2.0
//! A GQLA layer shaped like LLaMA-3-8B converted to GQLA (H=32 query heads in
//! G=8 groups, latent rank 512), one short prompt per sequence, then a few
//! decode steps. Prints the path the cost model chose and how closely the
//! GQA path and the absorb path agree on the same inputs.

use gqla::{Config, DType, Device, Path, SequenceId, Session, Workload};

const HEADS: usize = 32;
const GROUPS: usize = 8;
const LATENT: usize = 512;
const NOPE: usize = 64;
const ROPE: usize = 64;
const VALUE: usize = 128;

/// Deterministic stand-in for model activations (xorshift, values in [-1, 1)).
struct Activations(u64);

impl Activations {
    fn take(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }
}

fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| ((x - y) as f64).powi(2))
        .sum();
    let norm: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (diff / norm).sqrt()
}

fn decode_on(
    session: &Session,
    path: Path,
    seqs: &[SequenceId],
    q: &[f32],
) -> gqla::Result<Vec<f32>> {
    session.select_path(path)?;
    let mut o = vec![0.0f32; seqs.len() * HEADS * VALUE];
    session.decode(0, seqs, q, &mut o)?;
    Ok(o)
}

fn main() -> gqla::Result<()> {
    let (major, minor, patch) = gqla::version();
    let cpu = gqla::probe(Device::Cpu, false)?;
    println!(
        "gqla {major}.{minor}.{patch} on {} ({} cores, {:.0} GB/s, {:.0} GFLOP/s f32)",
        cpu.name, cpu.logical_cores, cpu.read_gbps, cpu.peak_gflops_f32
    );

    let config = Config::gqla()
        .heads(HEADS, GROUPS)
        .latent_dim(LATENT)
        .nope_dim(NOPE)
        .rope_dim(ROPE)
        .value_dim(VALUE)
        .cache_dtype(DType::F32)
        .device(Device::Cpu)
        .max_tokens(8192)
        .build()?;
    let session = Session::new(&config)?;

    let mut activations = Activations(0x5eed_1234_abcd_0042);
    // W_UKV [G*(d_c+d_v), r], laid out like DeepSeek's kv_b_proj.weight.
    session.set_weights(
        0,
        &activations.take(
            GROUPS * (NOPE + VALUE) * LATENT,
            1.0 / (LATENT as f32).sqrt(),
        ),
    )?;

    // Three prompts of different lengths, appended in one call.
    let prompt_lengths = [37usize, 120, 5];
    let seqs: Vec<SequenceId> = prompt_lengths
        .iter()
        .map(|_| session.add_sequence())
        .collect::<Result<_, _>>()?;
    let total: usize = prompt_lengths.iter().sum();
    session.append_many(
        0,
        &seqs,
        &prompt_lengths,
        &activations.take(total * LATENT, 1.0),
        &activations.take(total * ROPE, 1.0),
    )?;

    let report = session.predict_cost(&Workload {
        batch: seqs.len(),
        context: total / seqs.len(),
        q_len: 1,
    })?;
    println!(
        "cost model: gqa {:.2} us ({:?}-bound), absorb {:.2} us ({:?}-bound) -> {}",
        report.gqa.time_s * 1e6,
        report.gqa.bound,
        report.absorb.time_s * 1e6,
        report.absorb.bound,
        report.chosen
    );

    // Serving loop: each step the new token's latent and rope key join the
    // cache, then its query attends to everything so far (s_q = 1) on the path
    // AUTO picks (with hysteresis, so it does not flip-flop between steps).
    session.select_path(Path::Auto)?;
    let mut q = Vec::new();
    for step in 0..4 {
        for &seq in &seqs {
            session.append(
                0,
                seq,
                &activations.take(LATENT, 1.0),
                &activations.take(ROPE, 1.0),
            )?;
        }
        q = activations.take(seqs.len() * HEADS * (NOPE + ROPE), 2.0);
        let mut o = vec![0.0f32; seqs.len() * HEADS * VALUE];
        session.decode(0, &seqs, &q, &mut o)?;
        let lengths: Vec<usize> = seqs
            .iter()
            .map(|&s| session.length(s, 0))
            .collect::<Result<_, _>>()?;
        println!(
            "step {step}: lengths {lengths:?}, decoded on the {} path",
            session.path()?
        );
    }

    // The two paths are the same math over the same weights: decode the last
    // step again on each and compare.
    let on_gqa = decode_on(&session, Path::Gqa, &seqs, &q)?;
    let on_absorb = decode_on(&session, Path::Absorb, &seqs, &q)?;
    let agreement = relative_l2(&on_absorb, &on_gqa);
    println!("agreement of the two paths: |absorb - gqa| / |gqa| = {agreement:.2e}");

    let stats = session.stats()?;
    println!(
        "cache: {} tokens in {} of {} pages, latent {} KiB, expanded {} KiB",
        stats.tokens_cached,
        stats.pages_used,
        stats.pages_total,
        stats.latent_bytes / 1024,
        stats.expanded_bytes / 1024
    );
    if agreement > 1e-5 {
        eprintln!("the paths disagree by more than 1e-5");
        std::process::exit(1);
    }
    Ok(())
}
