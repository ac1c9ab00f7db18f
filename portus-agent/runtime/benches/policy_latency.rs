//! Per-decision latency of `OnnxPolicy::act` (single sample, one thread) for the fixture
//! models: MLP 64-32 (MOCC-like), MLP 512-256 with mask and 7 Q-values (Owl-like), LSTM-64
//! (Nuwa-like); plus the per-sample cost of `OnnxModel::act_batch` with 64 flows.
//!
//! `cargo bench -p ccp-agent --bench policy_latency` (release build). The fixtures are built
//! with `.venv/bin/python -m ccp_train.fixtures` into `target/policy-fixtures/` when absent.
//! Issue goal: p99 ≤ 30 µs per decision.
//!
//! With a shipped `models/mocc.onnx`, also one whole MOCC decision as the agent makes it
//! (`Controller::on_report`: features from the report, the ONNX policy, the rate update).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::sync::Arc;

use ccp_algs::policy::{Policy, PolicySpec};
use ccp_algs::{Algorithm, FlowInfo, Interval, Preference};
use ccp_runtime::policy::{ModelContract, ModelStore, OnnxPolicy};

const WARMUP: usize = 2_000;
const SAMPLES: usize = 20_000;
const BATCH: usize = 64;
const BATCH_SAMPLES: usize = 2_000;

fn fixtures() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target/policy-fixtures");
    // reuse fixtures built before, unless their cards predate the `dynamics` section
    let current = std::fs::read_to_string(dir.join("fx_owl.json"))
        .is_ok_and(|card| card.contains("\"dynamics\""));
    if dir.join("fx_lstm.records.json").exists() && current {
        return dir;
    }
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash ops/setup.sh`",
        python.display()
    );
    let st = Command::new(python)
        .args(["-m", "ccp_train.fixtures"])
        .arg(&dir)
        .env("PYTHONPATH", root.join("train"))
        .status()
        .expect("run the fixture script");
    assert!(st.success(), "python -m ccp_train.fixtures failed");
    dir
}

fn spec(
    algorithm: &'static str,
    obs_dim: usize,
    low: f32,
    high: f32,
    hidden: Option<usize>,
    masked: bool,
) -> ModelContract {
    ModelContract {
        spec: PolicySpec {
            algorithm,
            feature_version: 1,
            obs_dim,
            act_dim: 1,
            act_low: vec![low],
            act_high: vec![high],
            recurrent_hidden: hidden,
            masked,
        },
        // the fixtures are trained under no dynamics knobs (train/ccp_train/fixtures.py)
        dynamics: Default::default(),
        // fx_owl is the one discrete fixture: 7 Q-values
        n_actions: (algorithm == "fx_owl").then_some(7),
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn report(name: &str, mut d: Vec<Duration>, per: usize) {
    d.sort_unstable();
    let mean = d.iter().sum::<Duration>().as_secs_f64() * 1e6 / d.len() as f64;
    let per = per as f64;
    println!(
        "{name:<34} p50 {:>8.2} µs  p99 {:>8.2} µs  p99.9 {:>8.2} µs  mean {:>8.2} µs  (n = {})",
        pct(&d, 0.50) / per,
        pct(&d, 0.99) / per,
        pct(&d, 0.999) / per,
        mean / per,
        d.len()
    );
}

fn inputs(dim: usize, masked: bool, n: usize) -> (Vec<Vec<f32>>, Option<Vec<Vec<f32>>>) {
    // Deterministic pseudo-random observations (xorshift), masks ~80% present.
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let obs: Vec<Vec<f32>> = (0..n)
        .map(|_| (0..dim).map(|_| next() * 4.0 - 2.0).collect())
        .collect();
    let mask = masked.then(|| {
        (0..n)
            .map(|_| {
                (0..dim)
                    .map(|_| if next() < 0.8 { 1.0 } else { 0.0 })
                    .collect()
            })
            .collect()
    });
    (obs, mask)
}

fn main() {
    let dir = fixtures();
    let specs = [
        spec("fx_mlp", 30, -1.0, 1.0, None, false),
        spec("fx_owl", 60, 0.0, 6.0, None, true),
        spec("fx_lstm", 4, -5.0, 5.0, Some(64), false),
    ];
    let t = Instant::now();
    let store = ModelStore::load(&dir, &specs).expect("load fixtures");
    println!(
        "loaded {} models (and onnxruntime) in {:.1} ms from {}",
        store.available().len(),
        t.elapsed().as_secs_f64() * 1e3,
        dir.display()
    );
    println!("single decision, one thread (OnnxPolicy::act):");
    let labels = [
        ("fx_mlp", "MLP 64-32 (obs 30, MOCC-like)"),
        ("fx_owl", "MLP 512-256 + mask, 7 Q (Owl-like)"),
        ("fx_lstm", "LSTM-64 (obs 4, Nuwa-like)"),
    ];
    for (s, (alg, label)) in specs.iter().zip(labels) {
        let (obs, mask) = inputs(s.spec.obs_dim, s.spec.masked, 1024);
        let mut p: OnnxPolicy = store.onnx_policy(alg).unwrap();
        let mut out = [0.0f32; 1];
        let mut times = Vec::with_capacity(SAMPLES);
        for i in 0..WARMUP + SAMPLES {
            let k = i % obs.len();
            let m = mask.as_ref().map(|m| &m[k][..]);
            let t = Instant::now();
            p.act(&obs[k], m, &mut out).unwrap();
            let e = t.elapsed();
            if i >= WARMUP {
                times.push(e);
            }
        }
        std::hint::black_box(out);
        report(label, times, 1);
    }
    // Reference: a bare ort session on the MLP, no abstraction (the runtime's overhead is
    // the difference to the first line above).
    {
        let rt = ccp_runtime::policy::runtime::get().expect("runtime loaded");
        let mut session = ort::session::Session::builder(rt.environment())
            .unwrap()
            .with_intra_threads(1)
            .unwrap()
            .with_inter_threads(1)
            .unwrap()
            .commit_from_file(dir.join("fx_mlp.onnx"))
            .unwrap();
        let (obs, _) = inputs(30, false, 1024);
        let mut times = Vec::with_capacity(SAMPLES);
        let mut sink = 0.0f32;
        for i in 0..WARMUP + SAMPLES {
            let o = &obs[i % obs.len()];
            let t = Instant::now();
            let x = ort::value::TensorRef::from_array_view(([1usize, 30], &o[..])).unwrap();
            let out = session.run(ort::inputs![x]).unwrap();
            sink += out[0].try_extract_tensor::<f32>().unwrap().1[0];
            drop(out);
            let e = t.elapsed();
            if i >= WARMUP {
                times.push(e);
            }
        }
        std::hint::black_box(sink);
        report("reference: bare ort run, MLP 64-32", times, 1);
    }
    println!("batch of {BATCH} flows, per sample (OnnxModel::act_batch):");
    for (s, (alg, label)) in specs.iter().zip(labels) {
        let model = store.model(alg).unwrap();
        let (obs, mask) = inputs(s.spec.obs_dim, s.spec.masked, BATCH);
        let obs: Vec<f32> = obs.into_iter().flatten().collect();
        let mask: Option<Vec<f32>> = mask.map(|m| m.into_iter().flatten().collect());
        let mut flows: Vec<OnnxPolicy> = (0..BATCH).map(|_| model.new_policy()).collect();
        let mut out = vec![0.0f32; BATCH];
        let mut times = Vec::with_capacity(BATCH_SAMPLES);
        for i in 0..BATCH_SAMPLES + 200 {
            let mut refs: Vec<&mut OnnxPolicy> = flows.iter_mut().collect();
            let t = Instant::now();
            model
                .act_batch(&mut refs, &obs, mask.as_deref(), &mut out)
                .unwrap();
            let e = t.elapsed();
            if i >= 200 {
                times.push(e);
            }
        }
        report(label, times, BATCH);
    }
    shipped_mocc();
}

/// One MOCC decision per report with the shipped model, after start-up: reports of a path
/// that alternates between a growing and a draining queue, so the features move.
fn shipped_mocc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let models = root.join("models");
    if !models.join("mocc.json").exists() {
        println!("no models/mocc.json: skipping the shipped-MOCC decision");
        return;
    }
    let mocc = Arc::new(ccp_algs::mocc::Mocc::default());
    let store = match ModelStore::load(&models, &[ModelContract::of(mocc.as_ref())]) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            // e.g. a model trained under other dynamics than MOCC's default knobs
            println!("models/mocc.onnx does not load with the default config: {e}; skipping the shipped-MOCC decision");
            return;
        }
    };
    let alg = ccp_algs::learned::WithPolicy::new(mocc, store);
    let info = FlowInfo {
        sock_id: 1,
        mss: 1448,
        init_cwnd_bytes: 14_480,
        preference: Preference::from_slice(&[0.4, 0.5, 0.1]).unwrap(),
    };
    let mut flow = alg.new_flow(&info);
    let mk = |i: usize| Interval {
        acked_bytes: 100 * 1448,
        acked_pkts: 100,
        rtt_samples: 100,
        rtt_min_us: Some(40_000),
        rtt_mean_us: Some(40_000.0 + 4_000.0 * (i % 8) as f64),
        inflight_bytes: Some(200 * 1448),
        send_rate_bps: Some(3_600_000),
        recv_rate_bps: Some(3_600_000),
        interval_us: 40_000,
        ..Default::default()
    };
    let mut times = Vec::with_capacity(SAMPLES);
    let mut sink = 0u64;
    for i in 0..WARMUP + SAMPLES {
        let iv = mk(i);
        let t = Instant::now();
        let a = flow.on_report(&iv);
        let e = t.elapsed();
        sink = sink.wrapping_add(a.rate_bps.unwrap_or(0));
        if i >= WARMUP {
            times.push(e);
        }
    }
    std::hint::black_box(sink);
    println!("shipped model, whole decision (Controller::on_report):");
    report("MOCC (features + ONNX + eq. 1)", times, 1);
}
