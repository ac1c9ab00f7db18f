//! Toy: a learned algorithm that exists to be added. It is the whole of what
//! `docs/adding-an-algorithm.md` asks of a new learned algorithm — this folder and one line of
//! the registry — and `ops/toy_algorithm.sh` checks that those two are enough for it to reach
//! `ccp-agent --list`, the kernel module's name table, the bindings, the harness's algorithms
//! and the portfolio's candidates.
//!
//! Only under the test-only feature `toy` (its `pub mod` line in `lib.rs` and its registry
//! line carry `#[cfg(feature = "toy")]`), which no shipped build switches on.
//!
//! The model: every `interval_us` the policy sees how far the mean RTT is above the minimum,
//! `d = (RTT_mean − RTT_min) / RTT_min` clamped to [0, 4], and answers `a ∈ [−1, 1]`; the
//! window becomes `cwnd · (1 + gain · a)`, at least 2 packets. The reward is `−d`.

use crate::config::{KnobError, Knobs, Range};
use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics, FromConfig};
use crate::learned::{config_dynamics, Dynamics, LearnedAlgorithm, LearnedController, LearnedCore};
use crate::policy::{ConstantPolicy, PolicySpec};
use crate::signals::{fields, FoldProgram, Interval, ProgramBuilder};

/// The `[algs.toy]` table.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToyConfig {
    /// How far one action moves the window: `cwnd · (1 + gain · a)`.
    pub gain: f64,
    /// The report interval (µs).
    pub interval_us: u32,
}

impl Default for ToyConfig {
    fn default() -> Self {
        Self {
            gain: 0.5,
            interval_us: 20_000,
        }
    }
}

impl ToyConfig {
    pub fn validate(&self) -> Result<(), KnobError> {
        let k = Knobs("toy");
        k.real("gain", self.gain, Range::AboveTo(0.0, 1.0))?;
        k.interval_us("interval_us", self.interval_us)
    }
}

/// The toy algorithm, configured.
pub struct Toy {
    config: ToyConfig,
}

impl FromConfig for Toy {
    type Config = ToyConfig;
    fn from_config(config: &ToyConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }
}

const FIELDS: [&str; 4] = [
    fields::ACKED_BYTES,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
];

fn spec() -> PolicySpec {
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
        ProgramBuilder::new("toy_window", self.config.interval_us)
            .fields(&FIELDS)
            .build()
    }

    /// Without a model: the core under a policy that always answers 0 (the window holds).
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(LearnedController::new(
            self.new_core(info),
            Box::new(ConstantPolicy {
                obs_dim: 1,
                act_dim: 1,
                value: 0.0,
            }),
        ))
    }
}

impl LearnedAlgorithm for Toy {
    fn spec(&self) -> PolicySpec {
        spec()
    }

    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(ToyCore {
            spec: spec(),
            gain: self.config.gain,
            mss: f64::from(info.mss),
            cwnd: f64::from(info.init_cwnd_bytes),
            min_rtt: f64::INFINITY,
            delay: 0.0,
            metrics: FlowMetrics::default(),
        })
    }

    fn dynamics(&self) -> Dynamics {
        config_dynamics(&self.config, &[])
    }
}

struct ToyCore {
    spec: PolicySpec,
    gain: f64,
    mss: f64,
    cwnd: f64,
    min_rtt: f64,
    /// `d` of the last interval
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
        match (iv.rtt_mean_us, obs.first_mut()) {
            (Some(mean), Some(o)) if self.min_rtt.is_finite() && self.min_rtt > 0.0 => {
                self.delay = ((mean - self.min_rtt) / self.min_rtt).clamp(0.0, 4.0);
                *o = self.delay as f32;
                true
            }
            _ => false,
        }
    }

    fn apply(&mut self, action: &[f32]) -> Action {
        let a = action
            .first()
            .map_or(0.0, |&a| f64::from(a).clamp(-1.0, 1.0));
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
