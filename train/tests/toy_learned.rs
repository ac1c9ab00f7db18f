//! Adding a learned algorithm touches its own files and one registration line (issue 19).
//!
//! `Toy` below is a complete learned algorithm living only in this file: a fold program, a
//! core (features, action, reward) and its dynamics. One line registers it with the
//! platform — here `TrainEnv::new(.., toy, ..)` for training and
//! `registry.register(WithPolicy::new(toy, source))` for serving; in the portfolio it is its
//! line in `algs/src/registry.rs` — and the rest comes for free: the simulator drives it
//! through the agent's runtime while a learner chooses its actions, the agent serves it with a
//! policy through the same message loop, and the model-card contract refuses a model trained
//! under other dynamics, naming the knob.

use std::path::Path;
use std::sync::Arc;

use _native::env::TrainEnv;
use ccp_algs::learned::{Dynamics, LearnedAlgorithm, LearnedCore, WithPolicy};
use ccp_algs::policy::{Policy, PolicyError, PolicySource, PolicySpec};
use ccp_algs::signals::{fields, FoldProgram, ProgramBuilder};
use ccp_algs::{Action, Algorithm, AlgsConfig, Controller, FlowInfo, FlowMetrics, Interval};
use ccp_runtime::policy::card::{DynamicsDiff, ModelCard, ModelContract};
use ccp_runtime::simrun::{run_sim_with_registry, IpcKind, RunOptions};
use ccp_runtime::AgentOptions;
use ccp_sim::Scenario;

/// A window algorithm: every 20 ms the policy sees how far the mean RTT is above the
/// minimum and answers `a ∈ [−1, 1]`; the window becomes `cwnd·(1 + gain·a)`.
struct Toy {
    gain: f64,
}

const TOY_FIELDS: [&str; 4] = [
    fields::ACKED_BYTES,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
];

fn toy_spec() -> PolicySpec {
    PolicySpec {
        algorithm: "toy",
        feature_version: 1,
        obs_dim: 1,
        act_dim: 1,
        act_low: vec![-1.0],
        act_high: vec![1.0],
        recurrent_hidden: None,
        masked: false,
    }
}

impl Algorithm for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }
    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("toy_window", 20_000)
            .fields(&TOY_FIELDS)
            .build()
    }
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        // a bare toy holds its window (the agent serves it only with a policy)
        Box::new(ccp_algs::learned::LearnedController::new(
            self.new_core(info),
            Box::new(Constant(0.0)),
        ))
    }
}

impl LearnedAlgorithm for Toy {
    fn spec(&self) -> PolicySpec {
        toy_spec()
    }
    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(ToyCore {
            spec: toy_spec(),
            gain: self.gain,
            mss: f64::from(info.mss),
            cwnd: f64::from(info.init_cwnd_bytes),
            min_rtt: f64::INFINITY,
            delay: 0.0,
            metrics: FlowMetrics::default(),
        })
    }
    fn dynamics(&self) -> Dynamics {
        [("gain".to_string(), serde_json::json!(self.gain))].into()
    }
}

struct ToyCore {
    spec: PolicySpec,
    gain: f64,
    mss: f64,
    cwnd: f64,
    min_rtt: f64,
    /// (mean RTT − min RTT) / min RTT of the last interval
    delay: f64,
    metrics: FlowMetrics,
}

impl ToyCore {
    fn window(&self) -> Action {
        Action {
            cwnd_bytes: Some(self.cwnd as u32),
            ..Default::default()
        }
    }
}

impl LearnedCore for ToyCore {
    fn spec(&self) -> &PolicySpec {
        &self.spec
    }
    fn observe(&mut self, iv: &Interval, obs: &mut [f32], _mask: &mut [f32]) -> bool {
        self.metrics.observe(iv);
        if let Some(m) = iv.rtt_min_us {
            self.min_rtt = self.min_rtt.min(m as f64);
        }
        match iv.rtt_mean_us {
            Some(mean) if self.min_rtt.is_finite() => {
                self.delay = ((mean - self.min_rtt) / self.min_rtt).clamp(0.0, 4.0);
                obs[0] = self.delay as f32;
                true
            }
            _ => false,
        }
    }
    fn apply(&mut self, action: &[f32]) -> Action {
        let a = f64::from(action[0]);
        self.cwnd = (self.cwnd * (1.0 + self.gain * a)).clamp(2.0 * self.mss, 1e7);
        let act = self.window();
        self.metrics.record(&act);
        act
    }
    fn hold(&mut self) -> Action {
        self.window()
    }
    fn reward(&self) -> f64 {
        -self.delay
    }
    fn initial_action(&mut self) -> Action {
        self.window()
    }
    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

/// A policy that always answers the same action.
struct Constant(f32);

impl Policy for Constant {
    fn obs_dim(&self) -> usize {
        1
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(&mut self, _o: &[f32], _m: Option<&[f32]>, out: &mut [f32]) -> Result<(), PolicyError> {
        out[0] = self.0;
        Ok(())
    }
}

impl PolicySource for Constant {
    fn policy(&self, _alg: &str) -> Option<Box<dyn Policy>> {
        Some(Box::new(Constant(self.0)))
    }
}

/// One toy flow on 20 Mbit/s, 40 ms, a 2-BDP buffer. Scenario files name only the
/// portfolio's algorithms, so the flow is renamed in code.
fn scenario() -> Scenario {
    let mut s = Scenario::from_toml_str(
        r#"
duration_s = 6
seed = 3
[link]
rate_mbps = 20
buffer_bdp = 2.0
[[flow]]
alg = "ccp"
rtt_ms = 40
"#,
        Path::new("."),
    )
    .expect("scenario");
    s.flows[0].alg = Some("toy".into());
    s
}

/// Train-side: a learner steps the toy; returns (decisions, mean reward, throughput Mbit/s).
fn train_with(action: f32) -> (u64, f64, f64) {
    let toy: Arc<dyn LearnedAlgorithm> = Arc::new(Toy { gain: 0.5 });
    let mut env = TrainEnv::new(scenario(), toy, AgentOptions::default()).expect("env");
    let mut out = env.reset(Some(3)).expect("reset");
    let (mut sum, mut n) = (0.0, 0u64);
    while !out.done {
        out = env.step(&[action]).expect("step");
        if out.active[0] {
            assert!(out.rewards[0].is_finite() && out.rewards[0] <= 0.0);
            sum += out.rewards[0];
            n += 1;
        }
    }
    let decisions = env.decisions()[0];
    let res = env.results().expect("results");
    (
        decisions,
        sum / n.max(1) as f64,
        res.flows[0].throughput_mbps,
    )
}

#[test]
fn a_toy_learned_algorithm_trains_in_the_simulator() {
    let (dec_up, reward_up, thr_up) = train_with(1.0);
    let (dec_down, reward_down, thr_down) = train_with(-1.0);
    // ~6 s of 20 ms reports with an RTT sample: the learner decided on nearly every one
    assert!(
        dec_up > 100 && dec_down > 50,
        "decisions {dec_up} / {dec_down}"
    );
    // the action is applied: always growing fills the link and its queue (a worse delay
    // reward), always shrinking starves the flow
    assert!(
        thr_up > 10.0 * thr_down,
        "throughput {thr_up} vs {thr_down} Mbit/s"
    );
    assert!(
        reward_up < reward_down,
        "reward {reward_up} vs {reward_down}"
    );
}

#[test]
fn the_agent_serves_a_toy_with_a_policy_through_the_same_loop() {
    let toy: Arc<dyn LearnedAlgorithm> = Arc::new(Toy { gain: 0.5 });
    let mut registry = ccp_algs::Registry::from_config(&AlgsConfig::default());
    registry.register(Arc::new(WithPolicy::new(toy, Arc::new(Constant(1.0)))));
    let opts = RunOptions {
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    let run = run_sim_with_registry(&scenario(), &opts, registry).expect("run");
    let thr = run.results.flows[0].throughput_mbps;
    assert!(
        thr > 15.0,
        "an always-growing toy fills the 20 Mbit/s link: {thr}"
    );
    let (_, _, trained_thr) = train_with(1.0);
    // same scenario, same actions: the agent and the training env agree
    assert!(
        (thr - trained_thr).abs() < 1e-9,
        "agent {thr} vs env {trained_thr}"
    );
}

#[test]
fn a_card_trained_under_other_dynamics_is_refused_naming_the_knob() {
    let contract = ModelContract::of(&Toy { gain: 0.5 });
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/mocc.json"))
            .expect("a card to start from");
    let card_with = |dynamics: serde_json::Value| {
        let mut v: serde_json::Value = serde_json::from_str(&shipped).unwrap();
        v["algorithm"] = "toy".into();
        match dynamics {
            serde_json::Value::Null => {
                v.as_object_mut().unwrap().remove("dynamics");
            }
            d => v["dynamics"] = d,
        }
        ModelCard::from_json(&v.to_string()).expect("card parses")
    };
    let same = card_with(serde_json::json!({ "gain": 0.5 }));
    assert_eq!(same.check_dynamics(&contract.dynamics), Ok(()));

    let other = card_with(serde_json::json!({ "gain": 0.7 }));
    let err = other.check_dynamics(&contract.dynamics).unwrap_err();
    let DynamicsDiff::Knob(e) = err else {
        panic!("expected a knob mismatch, got {err:?}")
    };
    let msg = e.to_string();
    assert!(
        msg.contains("algs.toy.gain = 0.7") && msg.contains("0.5"),
        "{msg}"
    );

    let none = card_with(serde_json::Value::Null);
    assert_eq!(
        none.check_dynamics(&contract.dynamics),
        Err(DynamicsDiff::Absent)
    );
}
