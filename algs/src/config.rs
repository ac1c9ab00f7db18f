//! Every algorithm's knobs in one place: `AlgsConfig` is what the agent's `--config` TOML
//! file holds under `[algs.<name>]`, and what tests and the simulator runner pass in code.
//! Missing tables and keys take each paper's defaults; unknown keys are errors.

use crate::bbr::BbrConfig;
use crate::cubic::CubicConfig;
use crate::iris::IrisConfig;
use crate::mocc::MoccConfig;
use crate::reno::RenoConfig;

/// Configuration of every algorithm.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlgsConfig {
    pub reno: RenoConfig,
    pub cubic: CubicConfig,
    pub bbr: BbrConfig,
    pub iris: IrisConfig,
    pub mocc: MoccConfig,
}
