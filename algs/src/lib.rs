//! `ccp-algs`: the portfolio's congestion-control algorithms as pure logic.
//!
//! - [`controller`]: the [`Algorithm`]/[`Controller`] traits every algorithm implements.
//! - [`signals`]: the interval signals fold programs measure, and the program builder.
//! - [`pref`]: the preference vector `w = <thr, lat, loss>`.
//! - [`policy`]: the learned-policy boundary.
//! - [`learned`]: learned algorithms as features/actions/reward ([`learned::LearnedCore`]) plus a policy.
//! - [`registry`]: names and the datapath name mapping.
//! - [`config`]: every algorithm's knobs.
//! - One module per algorithm: [`reno`], [`cubic`], [`bbr`], [`iris`], [`mocc`].

pub mod bbr;
pub mod config;
pub mod controller;
pub mod cubic;
pub mod iris;
pub mod learned;
pub mod mocc;
pub mod policy;
pub mod pref;
pub mod registry;
pub mod reno;
pub mod signals;

pub use bbr::{Bbr, BbrConfig};
pub use config::AlgsConfig;
pub use controller::{clamp_output, Action, Algorithm, Controller, FlowInfo, FlowMetrics};
pub use iris::{Iris, IrisConfig};
pub use policy::{Policy, PolicyError};
pub use pref::{Preference, PreferenceError};
pub use registry::Registry;
pub use signals::{FoldProgram, Interval};
