// SPDX-License-Identifier: Apache-2.0
//! Probe and cost model through the safe API, including the worked checks of docs/cost-model.md.

use gqla::{Config, DType, Device, Path, Session, Workload};

fn llama3_8b_gqla() -> Config {
    Config::gqla()
        .heads(32, 8)
        .latent_dim(512)
        .nope_dim(64)
        .rope_dim(64)
        .value_dim(128)
        .cache_dtype(DType::Bf16)
        .device(Device::Cpu)
        .build()
        .unwrap()
}

fn deepseek_v3_mla() -> Config {
    Config::gqla()
        .heads(128, 128)
        .latent_dim(512)
        .nope_dim(128)
        .rope_dim(64)
        .value_dim(128)
        .cache_dtype(DType::Bf16)
        .device(Device::Cpu)
        .build()
        .unwrap()
}

/// The CPU probe with the roofline numbers replaced by a GPU's specs, and no
/// ISA bits (on an AVX512-BF16 host the CPU prices bf16 caches at twice the
/// f32 peak, which would move the worked checks' numbers).
fn machine(tflops: f64, tbps: f64) -> gqla::ProbeInfo {
    let mut probe = gqla::probe(Device::Cpu, false).unwrap();
    probe.peak_gflops_bf16 = tflops * 1e3;
    probe.peak_gflops_f32 = tflops * 1e3;
    probe.read_gbps = tbps * 1e3;
    probe.isa = gqla::Isa(0);
    probe
}

fn chosen(config: &Config, probe: &gqla::ProbeInfo, q_len: usize) -> Path {
    let workload = Workload {
        batch: 64,
        context: 4096,
        q_len,
    };
    gqla::predict_cost(config, Some(probe), &workload)
        .unwrap()
        .chosen
}

#[test]
fn probe_describes_this_cpu() {
    let cpu = gqla::probe(Device::Cpu, false).unwrap();
    assert_eq!(cpu.device, Device::Cpu);
    assert!(
        cpu.logical_cores >= 1 && cpu.read_gbps > 0.0 && cpu.peak_gflops_f32 > 0.0,
        "{cpu:?}"
    );
    assert_eq!(gqla::device_count(Device::Cpu).unwrap(), 1);
    // The raw round trip keeps every field.
    let again = gqla::predict_cost(
        &llama3_8b_gqla(),
        Some(&cpu),
        &Workload {
            batch: 1,
            context: 100,
            q_len: 1,
        },
    );
    assert!(again.is_ok(), "{again:?}");
}

#[test]
fn worked_checks_of_the_spec() {
    let (h100, h20) = (machine(990.0, 3.35), machine(148.0, 4.0));
    let llama = llama3_8b_gqla();
    assert_eq!(chosen(&llama, &h100, 1), Path::Absorb);
    assert_eq!(chosen(&llama, &h100, 2), Path::Absorb);
    assert_eq!(chosen(&llama, &h20, 1), Path::Absorb);
    assert_eq!(
        chosen(&llama, &h20, 2),
        Path::Gqa,
        "absorb turns compute-bound on H20"
    );
    let mla = deepseek_v3_mla();
    for probe in [&h100, &h20] {
        for q_len in [1, 2] {
            assert_eq!(chosen(&mla, probe, q_len), Path::Absorb);
        }
    }
}

#[test]
fn report_counts_per_spec() {
    let report = gqla::predict_cost(
        &llama3_8b_gqla(),
        None,
        &Workload {
            batch: 8,
            context: 2048,
            q_len: 1,
        },
    )
    .unwrap();
    assert!(
        report.gqa.bytes > report.absorb.bytes,
        "the expanded cache is larger: {report:?}"
    );
    assert!(
        report.absorb.flops > report.gqa.flops,
        "absorb does more arithmetic: {report:?}"
    );
    for cost in [report.gqa, report.absorb] {
        // time = max(memory, compute) / efficiency + overhead, efficiency <= 1.
        assert!(
            cost.time_s > 0.0 && cost.time_s >= cost.memory_s.max(cost.compute_s),
            "{cost:?}"
        );
    }
    assert!(report.expand_bytes > 0.0 && report.expand_flops > 0.0);
    assert_ne!(report.chosen, Path::Auto);
}

#[test]
fn session_prediction_uses_its_device() {
    let session = Session::new(&llama3_8b_gqla()).unwrap();
    let report = session
        .predict_cost(&Workload {
            batch: 4,
            context: 512,
            q_len: 2,
        })
        .unwrap();
    assert!(matches!(report.chosen, Path::Gqa | Path::Absorb));
    let gqa_kind = Config::gqa()
        .heads(8, 2)
        .head_dim(64)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let report = gqla::predict_cost(
        &gqa_kind,
        None,
        &Workload {
            batch: 4,
            context: 512,
            q_len: 1,
        },
    )
    .unwrap();
    assert_eq!(report.chosen, Path::Gqa);
    assert_eq!(report.absorb.bytes, 0.0, "GQA kind has no absorb path");
}

#[test]
fn isa_names_are_the_librarys() {
    for (bit, name) in gqla::Isa::ALL {
        assert_eq!(gqla::Isa::name_of(u64::from(bit)), Some(name));
    }
    assert_eq!(gqla::Isa::name_of(0), None);
    assert_eq!(gqla::Isa::name_of(1 << 40), None);
    let cpu = gqla::probe(Device::Cpu, false).unwrap();
    let expected: Vec<&str> = gqla::Isa::ALL
        .iter()
        .filter(|(bit, _)| cpu.isa.has(*bit))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(cpu.isa.names(), expected);
}
