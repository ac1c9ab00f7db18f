//! Which algorithms exist and how the datapath names them.
//!
//! The datapath announces a flow with a congestion-control name (`cong_alg` in libccp's CREATE
//! message). The mapping, used identically by the agent and the simulator:
//!
//! | requested name            | algorithm                      |
//! |---------------------------|--------------------------------|
//! | `ccp_<alg>` or `<alg>`    | `<alg>`, if registered         |
//! | `ccp`, empty, or unknown  | the agent's default (`--alg`)  |
//!
//! Names are matched case-sensitively, as the kernel's `tcp_congestion_ops` names are.

use std::sync::Arc;

use crate::controller::{Algorithm, FromConfig};
use crate::learned::LearnedAlgorithm;

/// Expands the registry table (below) into everything that lists algorithms.
///
/// ```text
///   <name>: builtin <Algorithm type>, <Config type>;   needs no model (Registry::from_config)
///   <name>: learned <Algorithm type>, <Config type>;   driven by a policy (learned())
///   <name>: reserved;                                  a name without an implementation yet
///   #[cfg(<predicate>)] <name>: ...;                   the line only where the predicate holds
/// ```
///
/// From it come [`ALGORITHMS`], [`AlgsConfig`] (one field per implemented algorithm, named
/// as the algorithm: `[algs.<name>]`) and its `validate()`, [`Registry::from_config`],
/// [`learned`], [`learned_names`], [`defaults`] and `ccp_algs::registered_names!` (the names
/// as tokens, for code that needs an item per algorithm at compile time: the agent's portus
/// adapters). The algorithm type implements [`FromConfig`] with that config type and
/// [`Algorithm`] (`builtin`) or [`LearnedAlgorithm`] (`learned`); the config type `Default`,
/// serde (with `#[serde(default, deny_unknown_fields)]`) and
/// `validate(&self) -> Result<(), KnobError>`.
macro_rules! algorithms {
    // a line under `#[cfg(..)]`: the table with it where the predicate holds, without it
    // elsewhere
    (@parse [$($all:ident)*] [$($imp:tt)*] [$($ln:ident)*]
        #[cfg($pred:meta)] $name:ident : $($line:tt)*) => {
        algorithms!(@cfg [$($all)*] [$($imp)*] [$($ln)*] ($pred) [$name :] $($line)*);
    };
    (@cfg $all:tt $imp:tt $ln:tt ($pred:meta) [$($line:tt)*] ; $($rest:tt)*) => {
        #[cfg($pred)]
        algorithms!(@parse $all $imp $ln $($line)* ; $($rest)*);
        #[cfg(not($pred))]
        algorithms!(@parse $all $imp $ln $($rest)*);
    };
    (@cfg $all:tt $imp:tt $ln:tt ($pred:meta) [$($line:tt)*] $next:tt $($rest:tt)*) => {
        algorithms!(@cfg $all $imp $ln ($pred) [$($line)* $next] $($rest)*);
    };
    // one line at a time into [every name] [implemented: (kind name type config)] [learned]
    (@parse [$($all:ident)*] [$($imp:tt)*] [$($ln:ident)*]
        $name:ident : reserved ; $($rest:tt)*) => {
        algorithms!(@parse [$($all)* $name] [$($imp)*] [$($ln)*] $($rest)*);
    };
    (@parse [$($all:ident)*] [$($imp:tt)*] [$($ln:ident)*]
        $name:ident : builtin $alg:ty, $cfg:ty ; $($rest:tt)*) => {
        algorithms!(@parse [$($all)* $name] [$($imp)* (builtin $name $alg, $cfg)] [$($ln)*]
            $($rest)*);
    };
    (@parse [$($all:ident)*] [$($imp:tt)*] [$($ln:ident)*]
        $name:ident : learned $alg:ty, $cfg:ty ; $($rest:tt)*) => {
        algorithms!(@parse [$($all)* $name] [$($imp)* (learned $name $alg, $cfg)]
            [$($ln)* $name] $($rest)*);
    };
    (@parse [$($all:ident)*] [$(($kind:ident $name:ident $alg:ty, $cfg:ty))*]
        [$($ln:ident)*]) => {
        /// Every algorithm the portfolio ships or reserves a name for, in registry order.
        pub const ALGORITHMS: [&str; [$(stringify!($all)),*].len()] = [$(stringify!($all)),*];

        algorithms!(@names ($) $($all)*);

        /// The learned algorithms' names, in registry order.
        const LEARNED: &[&str] = &[$(stringify!($ln)),*];

        /// Configuration of every algorithm: what the agent's `--config` TOML file holds under
        /// `[algs.<name>]`, and what tests and the simulator runner pass in code. Missing
        /// tables and keys take each paper's defaults; unknown keys are errors.
        #[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct AlgsConfig {
            $(pub $name: $cfg,)*
        }

        impl AlgsConfig {
            /// Check every knob of every algorithm against its range.
            pub fn validate(&self) -> Result<(), crate::config::KnobError> {
                $(self.$name.validate()?;)*
                Ok(())
            }
        }

        /// The default config table of `alg`, as JSON (`None`: not an implemented algorithm).
        pub fn defaults(alg: &str) -> Option<serde_json::Value> {
            $(if alg == stringify!($name) {
                return serde_json::to_value(<$cfg>::default()).ok();
            })*
            None
        }

        impl Registry {
            /// The algorithms that need no trained model, configured.
            pub fn from_config(cfg: &AlgsConfig) -> Self {
                let mut r = Self::new();
                $(algorithms!(@builtin $kind r cfg $name $alg);)*
                r
            }
        }

        /// The learned algorithms, unwrapped (no policy): what training environments drive,
        /// and what the agent registers with a model ([`crate::learned::WithPolicy`]).
        #[allow(clippy::vec_init_then_push)] // one push per learned line of the table
        pub fn learned(cfg: &AlgsConfig) -> Vec<Arc<dyn LearnedAlgorithm>> {
            let mut v: Vec<Arc<dyn LearnedAlgorithm>> = Vec::new();
            $(algorithms!(@learned $kind v cfg $name $alg);)*
            v
        }
    };
    // `$d` is a `$`, so that the generated macro can have metavariables of its own
    (@names ($d:tt) $($all:ident)*) => {
        /// `registered_names!(m)` expands to `m!(<names>)`, `registered_names!(m; args..)`
        /// to `m!(args..; <names>)`, where `<names>` are the names of
        /// [`ALGORITHMS`](crate::registry::ALGORITHMS), in its order, as identifiers: for
        /// code that needs an item per algorithm at compile time (the agent's portus
        /// adapters, one type each).
        #[macro_export]
        macro_rules! registered_names {
            ($d m:ident) => {
                $d m!($($all)*)
            };
            ($d m:ident; $d ($d args:tt)*) => {
                $d m!($d ($d args)* ; $($all)*)
            };
        }
    };
    (@builtin builtin $r:ident $cfg:ident $name:ident $alg:ty) => {
        $r.register(Arc::new(<$alg as FromConfig>::from_config(&$cfg.$name)));
    };
    (@builtin learned $($_:tt)*) => {};
    (@learned learned $v:ident $cfg:ident $name:ident $alg:ty) => {
        $v.push(Arc::new(<$alg as FromConfig>::from_config(&$cfg.$name)));
    };
    (@learned builtin $($_:tt)*) => {};
    ($($table:tt)*) => {
        algorithms!(@parse [] [] [] $($table)*);
    };
}

// The registry: adding an algorithm is one line here (plus its module).
algorithms! {
    reno:  builtin crate::reno::Reno,   crate::reno::RenoConfig;
    cubic: builtin crate::cubic::Cubic, crate::cubic::CubicConfig;
    bbr:   builtin crate::bbr::Bbr,     crate::bbr::BbrConfig;
    jury:  learned crate::jury::Jury,   crate::jury::JuryConfig;
    owl:   learned crate::owl::Owl,     crate::owl::OwlConfig;
    mocc:  learned crate::mocc::Mocc,   crate::mocc::MoccConfig;
    iris:  builtin crate::iris::Iris,   crate::iris::IrisConfig;
    nuwa:  learned crate::nuwa::Nuwa,   crate::nuwa::NuwaConfig;
    // test-only (ops/toy_algorithm.sh): what adding a learned algorithm takes
    #[cfg(feature = "toy")]
    toy:   learned crate::toy::Toy,     crate::toy::ToyConfig;
}

/// The learned algorithms' names, in registry order.
pub fn learned_names() -> &'static [&'static str] {
    LEARNED
}

/// Whether `name` (registry or datapath name: `mocc`, `ccp_mocc`) is a learned algorithm.
pub fn is_learned(name: &str) -> bool {
    LEARNED.contains(&strip_prefix(name))
}

/// One learned algorithm by registry or datapath name, configured (`None`: not a learned
/// algorithm).
pub fn learned_by_name(cfg: &AlgsConfig, name: &str) -> Option<Arc<dyn LearnedAlgorithm>> {
    let name = strip_prefix(name);
    learned(cfg).into_iter().find(|a| a.name() == name)
}

/// Prefix the kernel module puts in front of algorithm names (`ccp_cubic`).
pub const DATAPATH_PREFIX: &str = "ccp_";

/// The name a flow asks for (`ccp_auto`, `auto` in a scenario) to have the agent choose its
/// algorithm from its preference `w` and the preference portfolio table
/// (`portus-agent/runtime/src/flows/portfolio.rs`). Not an algorithm: no registry holds it.
pub const AUTO: &str = "auto";

/// Every congestion-control name a datapath offers, in this order: `ccp` (the agent's
/// default), `ccp_<alg>` for each name of [`ALGORITHMS`], and `ccp_auto` ([`AUTO`]). The
/// kernel module registers exactly these (`datapath/kernel/ccp_algs.h`, written by
/// `ccp-agent --list --format c-header`).
pub fn datapath_names() -> Vec<String> {
    let default = DATAPATH_PREFIX.trim_end_matches('_').to_string();
    std::iter::once(default)
        .chain(
            ALGORITHMS
                .iter()
                .chain(std::iter::once(&AUTO))
                .map(|n| format!("{DATAPATH_PREFIX}{n}")),
        )
        .collect()
}

/// Strip the datapath prefix: `ccp_mocc` → `mocc`, `mocc` → `mocc`, `ccp` → `` (default).
pub fn strip_prefix(requested: &str) -> &str {
    if requested == "ccp" {
        return "";
    }
    requested.strip_prefix(DATAPATH_PREFIX).unwrap_or(requested)
}

/// The algorithms an agent hosts.
#[derive(Clone, Default)]
pub struct Registry {
    algs: Vec<Arc<dyn Algorithm>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add an algorithm; a later one with the same name replaces the earlier.
    pub fn register(&mut self, alg: Arc<dyn Algorithm>) {
        self.algs.retain(|a| a.name() != alg.name());
        self.algs.push(alg);
    }

    /// Look up by registry name or datapath name (`cubic`, `ccp_cubic`).
    pub fn get(&self, requested: &str) -> Option<&Arc<dyn Algorithm>> {
        let name = strip_prefix(requested);
        self.algs.iter().find(|a| a.name() == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.algs.iter().map(|a| a.name()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Algorithm>> {
        self.algs.iter()
    }

    /// The algorithms that need no trained model, with their default knobs.
    pub fn builtin() -> Self {
        Self::from_config(&AlgsConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_with_and_without_prefix() {
        let r = Registry::builtin();
        assert_eq!(r.get("cubic").map(|a| a.name()), Some("cubic"));
        assert_eq!(r.get("ccp_cubic").map(|a| a.name()), Some("cubic"));
        assert_eq!(r.get("ccp_reno").map(|a| a.name()), Some("reno"));
        assert!(r.get("ccp").is_none());
        assert!(r.get("").is_none());
        assert!(r.get("Cubic").is_none());
        assert_eq!(r.get("bbr").map(|a| a.name()), Some("bbr"));
        assert_eq!(r.get("ccp_bbr").map(|a| a.name()), Some("bbr"));
        assert!(r.get("BBR").is_none());
        assert!(r.get("vegas").is_none());
    }

    #[test]
    fn program_names_are_unique_and_prefixed() {
        let r = Registry::builtin();
        let mut seen = std::collections::HashSet::new();
        for a in r.iter() {
            let p = a.program();
            assert!(p.name.starts_with(a.name()), "{} not prefixed", p.name);
            assert!(seen.insert(p.name), "duplicate program name {}", p.name);
        }
    }

    /// What the table says, checked as properties, so that a new line needs no line here.
    #[test]
    fn the_table_gives_every_list_in_its_order() {
        // unique names, each a lowercase identifier the datapath can prefix
        let mut seen = std::collections::HashSet::new();
        for name in ALGORITHMS {
            assert!(seen.insert(name), "{name} twice");
            let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
            assert!(
                name.starts_with(|c: char| c.is_ascii_lowercase()) && name.bytes().all(ok),
                "{name}"
            );
            assert!(name != AUTO && !name.starts_with(DATAPATH_PREFIX), "{name}");
            // the kernel's congestion-control names are at most 15 bytes (TCP_CA_NAME_MAX 16)
            assert!(
                DATAPATH_PREFIX.len() + name.len() <= 15,
                "ccp_{name} is too long"
            );
        }
        let in_order = |names: &[&str]| {
            let at = |n: &str| ALGORITHMS.iter().position(|a| *a == n);
            names.iter().all(|n| at(n).is_some()) && names.windows(2).all(|p| at(p[0]) < at(p[1]))
        };
        // the learned ones and the built-in ones: each in registry order
        assert!(in_order(learned_names()), "{:?}", learned_names());
        let cfg = AlgsConfig::default();
        let l: Vec<_> = learned(&cfg).iter().map(|a| a.name()).collect();
        assert_eq!(l, learned_names());
        let builtin = Registry::builtin().names();
        assert!(in_order(&builtin), "{builtin:?}");
        assert!(builtin.iter().all(|n| !is_learned(n)));
        // the shipped algorithms (models, cards, the kernel suite and the README name them)
        for n in ["reno", "cubic", "bbr", "iris"] {
            assert!(builtin.contains(&n), "{n}");
        }
        for n in ["jury", "owl", "mocc", "nuwa"] {
            assert!(is_learned(n) && is_learned(&format!("ccp_{n}")), "{n}");
            assert_eq!(
                learned_by_name(&cfg, &format!("ccp_{n}")).map(|a| a.name()),
                Some(n)
            );
        }
        assert!(!is_learned("cubic") && !is_learned("ccp"));
        assert!(learned_by_name(&cfg, "cubic").is_none());
        // every name is either implemented (builtin or learned) or reserved
        for name in ALGORITHMS {
            let implemented = defaults(name).is_some();
            let registered = Registry::builtin().get(name).is_some() || is_learned(name);
            assert_eq!(implemented, registered, "{name}");
        }
        assert!(defaults("vegas").is_none());
        assert_eq!(
            defaults("nuwa").unwrap(),
            serde_json::to_value(crate::nuwa::NuwaConfig::default()).unwrap()
        );
        assert_eq!(
            defaults("owl").unwrap(),
            serde_json::to_value(crate::owl::OwlConfig::default()).unwrap()
        );
    }

    #[test]
    fn the_datapath_offers_the_default_every_name_and_auto() {
        let names = datapath_names();
        assert_eq!(names.first().map(String::as_str), Some("ccp"));
        assert_eq!(names.last().map(String::as_str), Some("ccp_auto"));
        assert_eq!(names.len(), ALGORITHMS.len() + 2);
        for (n, alg) in names[1..].iter().zip(ALGORITHMS) {
            assert_eq!(strip_prefix(n), alg);
        }
        assert_eq!(strip_prefix(&names[0]), "");
    }

    #[test]
    fn config_tables_round_trip_and_defaults_are_the_structs() {
        let mut cfg = AlgsConfig::default();
        cfg.cubic.beta = 0.6;
        cfg.mocc.alpha = 0.05;
        let v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v["mocc"]["alpha"], serde_json::json!(0.05));
        let back: AlgsConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back, cfg);
        let d = defaults("mocc").unwrap();
        assert_eq!(
            d,
            serde_json::to_value(crate::mocc::MoccConfig::default()).unwrap()
        );
        assert_eq!(
            defaults("reno").unwrap(),
            serde_json::to_value(AlgsConfig::default().reno).unwrap()
        );
        // unknown tables are refused
        assert!(serde_json::from_value::<AlgsConfig>(serde_json::json!({"vegas": {}})).is_err());
        assert!(serde_json::from_value::<AlgsConfig>(serde_json::json!({"nuwa": {}})).is_ok());
        assert!(
            serde_json::from_value::<AlgsConfig>(serde_json::json!({"nuwa": {"bogus": 1}}))
                .is_err()
        );
        assert!(
            serde_json::from_value::<AlgsConfig>(serde_json::json!({"owl": {"bogus": 1}})).is_err()
        );
    }

    #[test]
    fn defaults_are_valid() {
        AlgsConfig::default().validate().unwrap();
    }

    /// Every knob of every algorithm is checked: each struct refuses one bad value per knob.
    #[test]
    fn every_knob_is_checked() {
        fn refused(knob: &str, c: AlgsConfig) {
            let e = c.validate().expect_err(knob);
            assert_eq!(e.knob, knob, "{e}");
        }
        macro_rules! bad {
            ($alg:ident . $knob:ident = $($v:expr),+) => {$(
                let mut c = AlgsConfig::default();
                c.$alg.$knob = $v;
                refused(stringify!($knob), c);
            )+};
        }
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        bad!(reno.min_interval_us = 0, 99_999_999);
        bad!(reno.initial_interval_us = 0, 99_999_999);
        bad!(cubic.c = inf, 0.0, nan, -1.0);
        bad!(cubic.beta = 1.5, 1.0, 0.0, nan);
        bad!(cubic.min_interval_us = 0);
        bad!(cubic.initial_interval_us = 0);
        bad!(bbr.high_gain = nan, 0.5);
        bad!(bbr.cwnd_gain = 0.0, inf);
        bad!(bbr.probe_up_gain = 0.5);
        bad!(bbr.probe_down_gain = 1.5, 0.0);
        bad!(bbr.pacing_margin_percent = -1.0, 50.0);
        bad!(bbr.full_bw_thresh = 1.0);
        bad!(bbr.full_bw_rounds = 0);
        bad!(bbr.bw_window_rounds = 0, 1025);
        bad!(bbr.min_rtt_window_us = 0);
        bad!(bbr.probe_rtt_duration_us = 0);
        bad!(bbr.min_cwnd_pkts = 0);
        bad!(bbr.quantization_pkts = 100_000);
        bad!(bbr.reports_per_rtt = 0);
        bad!(bbr.min_interval_us = 0);
        bad!(bbr.initial_interval_us = 0);
        bad!(iris.epoch_ms = 0);
        bad!(iris.queue_target_pkts = -1.0, 0.0);
        bad!(iris.expansion = inf);
        bad!(iris.delta_ms = 0.0);
        bad!(iris.min_window_s = 0.0);
        bad!(iris.median_window_s = -inf);
        bad!(iris.refit_interval_s = 0.0);
        bad!(iris.history_s = nan);
        bad!(iris.min_fit_samples = 0);
        bad!(iris.max_condition = 0.5);
        bad!(iris.min_fit_correlation = 2.0);
        bad!(iris.initial_rate_kbps = -5.0);
        bad!(iris.min_rate_kbps = 0.0);
        bad!(iris.max_rate_mbps = 0.0);
        bad!(iris.max_step = 0.0);
        bad!(iris.drain_gain = 0.0);
        bad!(iris.reprobe_gain = 0.5);
        bad!(iris.max_random_loss = 1.0);
        bad!(mocc.alpha = 0.0, nan);
        bad!(mocc.initial_rtt_ms = 0.0);
        bad!(mocc.min_mi_ms = -1.0);
        bad!(mocc.max_mi_ms = nan);
        bad!(mocc.min_rate_kbps = -1.0);
        bad!(mocc.max_rate_mbps = 0.0);
        bad!(mocc.startup_exit_latency_ratio = 0.5);
        bad!(mocc.cwnd_headroom_pkts = -1.0);
        bad!(mocc.initial_rate_mbps = Some(0.0), Some(nan));
        bad!(mocc.additive_increase_pkts = -1.0);
        bad!(mocc.additive_increase_cap = 2.0);
        bad!(mocc.additive_increase_min_action = inf);
        bad!(mocc.min_rate_pkts = -1.0);
        bad!(mocc.share_probe_every_mis = 10_000_000);
        bad!(mocc.share_probe_delta = 1.0);
        bad!(mocc.share_probe_half_mis = 0, 5);
        bad!(mocc.share_probe_below_capacity = -1.0);
        bad!(mocc.share_probe_min_latency_ratio = -1.0);
        bad!(mocc.share_probe_early_doublings = 100);
        bad!(mocc.share_gain = 0.0);
        bad!(mocc.share_guard_below = 2.0);
        bad!(mocc.share_guard_min_trials = 10_000_000);
        bad!(mocc.share_guard_min_action = nan);
        bad!(mocc.share_guard_pkts = -1.0);
        bad!(mocc.share_guard_loss_factor = 0.0);
        bad!(mocc.share_peers_fair = -1.0);
        bad!(mocc.share_peers_busy = -1.0);
        bad!(jury.interval_ms = 0.0, nan, 20_000.0);
        bad!(jury.alpha = 0.0, 1.0, nan);
        bad!(jury.history = 0, 65);
        bad!(jury.signal_window = 0);
        bad!(jury.occupancy_window = 0, 257);
        bad!(jury.min_probe = 0.0, 2.0);
        bad!(jury.mu_bound = 0.0, 1.5, nan);
        bad!(jury.min_delta = -0.1, 1.5, nan);
        bad!(jury.explore_band = -0.1, 1.5);
        bad!(jury.explore_prob = 2.0, nan);
        bad!(jury.min_pkts = 2_000_000);
        bad!(jury.initial_rtt_ms = 0.0, inf);
        bad!(jury.min_cwnd_pkts = 0.5);
        bad!(jury.max_cwnd_bdp = 0.5, 2000.0);
        bad!(jury.initial_cwnd_pkts = Some(0.0), Some(nan));
        bad!(jury.zeta = 0.0, 1.0);
        bad!(jury.beta1 = -1.0, nan);
        bad!(jury.beta2 = -1.0, 1e4);
        bad!(nuwa.target_delay_ms = 0.0, nan);
        bad!(nuwa.rho = 0.0, inf);
        bad!(nuwa.k_min = 0.0, 1e9);
        bad!(nuwa.k_max = 0.0, nan);
        bad!(nuwa.k_init = 0.0, 1e9);
        bad!(nuwa.slow_start_exit = -1.0, 20.0);
        bad!(nuwa.loss_decrease = 0.0, 2.0);
        bad!(nuwa.interval_rtts = 0.0, nan);
        bad!(nuwa.min_interval_ms = 0.0);
        bad!(nuwa.initial_interval_ms = -1.0);
        bad!(nuwa.window_s = 0.0, inf);
        bad!(nuwa.lstm_hidden = 0, 5000);
        bad!(nuwa.reward_throughput = -1.0);
        bad!(nuwa.reward_delay = nan);
        bad!(nuwa.reward_loss = 1e4);
        bad!(nuwa.alpha = 0.0, 11.0);
        bad!(owl.history = 0, 65);
        bad!(owl.interval_rtts = 0.0, nan, 20.0);
        bad!(owl.min_interval_ms = 0.0, inf);
        bad!(owl.initial_interval_ms = -1.0);
        bad!(owl.loss_decrease = 0.0, 1.0, nan);
        bad!(owl.min_cwnd_pkts = 0.5);
        bad!(owl.window_s = 0.0, inf);
        bad!(owl.stats_stale_ms = 0.0, -1.0);
        bad!(owl.delta = -0.1, nan);
        bad!(owl.beta = -1.0, inf);
        // relations between knobs
        let mut c = AlgsConfig::default();
        c.mocc.min_mi_ms = 600.0;
        refused("min_mi_ms", c);
        let mut c = AlgsConfig::default();
        c.iris.min_rate_kbps = 2e6;
        c.iris.max_rate_mbps = 1.0;
        refused("min_rate_kbps", c);
        let mut c = AlgsConfig::default();
        c.bbr.probe_rtt_duration_us = 2_000_000;
        c.bbr.min_rtt_window_us = 1_000_000;
        refused("probe_rtt_duration_us", c);
    }
}
