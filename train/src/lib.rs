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

/// Named `[start, end)` slices of a learned algorithm's observation that a trainer needs to
/// build its networks (`_native.spec(alg)["layout"]`): MOCC's preference sub-network reads
/// `w`, its towers `state`. Empty for an algorithm whose trainer needs none.
///
/// Read from the algorithm's own constants, never copied; it belongs in `PolicySpec` (a
/// layout field) once the algorithms expose one, and this function then goes.
pub fn obs_layout(alg: &str) -> Vec<(&'static str, std::ops::Range<usize>)> {
    match alg {
        "mocc" => {
            use ccp_algs::mocc::{OBS_DIM, W_OFFSET};
            vec![("state", 0..W_OFFSET), ("w", W_OFFSET..OBS_DIM)]
        }
        _ => Vec::new(),
    }
}
