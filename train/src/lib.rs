//! `ccp_train._native`: the simulator and the portfolio's algorithms for Python.
//!
//! [`env::TrainEnv`] is the environment in plain Rust; this module wraps it for Python as
//! `SimEnv` (NumPy in, NumPy out) and adds `run_scenario` (an agent run with ONNX models,
//! for evaluation). The Gymnasium and Stable-Baselines3 wrappers are in Python
//! (`ccp_train.envs`).

pub mod env;
#[cfg(feature = "python")]
mod py;

use std::sync::Arc;

use ccp_algs::learned::LearnedAlgorithm;
use ccp_algs::AlgsConfig;

/// Learned algorithms that can be trained, by registry name, configured.
pub fn learned_algorithm(name: &str, cfg: &AlgsConfig) -> Option<Arc<dyn LearnedAlgorithm>> {
    ccp_algs::registry::learned_by_name(cfg, name)
}
