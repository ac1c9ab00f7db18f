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

use crate::config::AlgsConfig;
use crate::controller::Algorithm;

/// Every algorithm the portfolio ships, in registry order.
pub const ALGORITHMS: [&str; 8] = [
    "reno", "cubic", "bbr", "jury", "owl", "mocc", "iris", "nuwa",
];

/// Prefix the kernel module puts in front of algorithm names (`ccp_cubic`).
pub const DATAPATH_PREFIX: &str = "ccp_";

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

    /// The algorithms that need no trained model, configured.
    pub fn from_config(cfg: &AlgsConfig) -> Self {
        let mut r = Self::new();
        r.register(Arc::new(crate::reno::Reno {
            config: cfg.reno.clone(),
        }));
        r.register(Arc::new(crate::cubic::Cubic {
            config: cfg.cubic.clone(),
        }));
        r.register(Arc::new(crate::bbr::Bbr {
            config: cfg.bbr.clone(),
        }));
        r.register(Arc::new(crate::iris::Iris {
            config: cfg.iris.clone(),
        }));
        r
    }
}

/// The learned algorithms, unwrapped (no policy): what training environments drive, and what
/// the agent registers with a model ([`crate::learned::WithPolicy`]).
pub fn learned(cfg: &AlgsConfig) -> Vec<Arc<dyn crate::learned::LearnedAlgorithm>> {
    vec![Arc::new(crate::mocc::Mocc::new(cfg.mocc.clone()))]
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
}
