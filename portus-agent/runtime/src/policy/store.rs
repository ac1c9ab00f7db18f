//! The model directory: `<alg>.onnx` + `<alg>.json` per learned algorithm.
//!
//! [`ModelStore::load`] checks every present model against its card, and the card against
//! its algorithm's [`ModelContract`] (the [`PolicySpec`] and the dynamics the agent serves
//! the policy under, `--config [algs.<alg>]`); a mismatch is an error, an absent pair only
//! makes that algorithm unavailable (unless [`LoadOptions::require_all`]). [`ModelStore::policy`] hands out
//! per-flow instances and runs on the portus thread; [`ModelStore::reload`] (SIGHUP, on the
//! signal thread) re-reads every file and swaps the model table atomically (`arc-swap`: a
//! lock-free read per new flow).
//!
//! Reload semantics: a flow keeps the model it started with for its whole life (its
//! recurrent state belongs to that model); flows created after the reload get the new one.
//! A bad or missing new file keeps the old model, and the outcome says why.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
#[cfg(doc)]
use ccp_algs::policy::PolicySpec;
use ccp_algs::policy::{Policy, PolicySource};

use super::card::ModelContract;

use super::error::PolicyLoadError;
use super::onnx::{sha256_hex, OnnxModel, OnnxPolicy};

/// How strict [`ModelStore::load_with`] is.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// A missing model is an error instead of an unavailable algorithm.
    pub require_all: bool,
}

#[derive(Debug, Clone, Default)]
struct Table {
    models: BTreeMap<&'static str, Arc<OnnxModel>>,
    unavailable: BTreeMap<&'static str, String>,
}

/// The loaded models of one directory.
pub struct ModelStore {
    dir: PathBuf,
    contracts: Vec<ModelContract>,
    table: ArcSwap<Table>,
    reloading: Mutex<()>,
}

impl fmt::Debug for ModelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.table.load();
        f.debug_struct("ModelStore")
            .field("dir", &self.dir)
            .field("available", &t.models.keys().collect::<Vec<_>>())
            .field("unavailable", &t.unavailable)
            .finish()
    }
}

/// What a reload did for one algorithm.
#[derive(Debug, Clone, PartialEq)]
pub struct ReloadOutcome {
    pub algorithm: &'static str,
    pub status: ReloadStatus,
}

/// See [`ReloadOutcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadStatus {
    /// Same files as before (same sha256 and card): the loaded session stays.
    Unchanged,
    /// A new model replaced the old one (new flows use it).
    Reloaded { sha256: String },
    /// A model appeared for an algorithm that had none.
    Loaded { sha256: String },
    /// The new files are bad (or gone): the old model stays in service.
    KeptOld { reason: PolicyLoadError },
    /// Still no usable model for this algorithm.
    Unavailable { reason: String },
}

impl fmt::Display for ReloadOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.algorithm;
        match &self.status {
            ReloadStatus::Unchanged => write!(f, "{a}: unchanged"),
            ReloadStatus::Reloaded { sha256 } => write!(f, "{a}: reloaded (sha256 {sha256})"),
            ReloadStatus::Loaded { sha256 } => write!(f, "{a}: loaded (sha256 {sha256})"),
            ReloadStatus::KeptOld { reason } => write!(f, "{a}: kept the old model: {reason}"),
            ReloadStatus::Unavailable { reason } => write!(f, "{a}: unavailable: {reason}"),
        }
    }
}

impl ModelStore {
    /// Load the models of `dir` for `contracts` (one per learned algorithm); missing models
    /// make their algorithm unavailable.
    pub fn load(
        dir: impl AsRef<Path>,
        contracts: &[ModelContract],
    ) -> Result<Self, PolicyLoadError> {
        Self::load_with(dir, contracts, &LoadOptions::default())
    }

    /// [`ModelStore::load`] with options.
    pub fn load_with(
        dir: impl AsRef<Path>,
        contracts: &[ModelContract],
        options: &LoadOptions,
    ) -> Result<Self, PolicyLoadError> {
        let dir = dir.as_ref().to_path_buf();
        let mut table = Table::default();
        for contract in contracts {
            let alg = contract.algorithm();
            match load_one(&dir, contract, options.require_all)? {
                Loaded::Model(m) => {
                    table.models.insert(alg, m);
                }
                Loaded::Absent(reason) => {
                    tracing::info!(algorithm = alg, "{reason}");
                    table.unavailable.insert(alg, reason);
                }
            }
        }
        Ok(ModelStore {
            dir,
            contracts: contracts.to_vec(),
            table: ArcSwap::from_pointee(table),
            reloading: Mutex::new(()),
        })
    }

    /// The models directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh per-flow policy for `algorithm`, `None` when it has no model.
    pub fn policy(&self, algorithm: &str) -> Option<Box<dyn Policy>> {
        self.onnx_policy(algorithm)
            .map(|p| Box::new(p) as Box<dyn Policy>)
    }

    /// [`ModelStore::policy`] with the concrete type (raw outputs, state, batching).
    pub fn onnx_policy(&self, algorithm: &str) -> Option<OnnxPolicy> {
        self.table
            .load()
            .models
            .get(algorithm)
            .map(OnnxModel::new_policy)
    }

    /// The current model of `algorithm` (for batched inference).
    pub fn model(&self, algorithm: &str) -> Option<Arc<OnnxModel>> {
        self.table.load().models.get(algorithm).cloned()
    }

    /// Algorithms with a model.
    pub fn available(&self) -> Vec<&'static str> {
        self.table.load().models.keys().copied().collect()
    }

    /// Algorithms without a model, and why.
    pub fn unavailable(&self) -> Vec<(&'static str, String)> {
        self.table
            .load()
            .unavailable
            .iter()
            .map(|(a, r)| (*a, r.clone()))
            .collect()
    }

    /// Re-read every model and card (SIGHUP). A bad new file keeps the old model; see the
    /// module docs for what running flows do.
    pub fn reload(&self) -> Vec<ReloadOutcome> {
        let _guard = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.table.load_full();
        let mut new = Table::default();
        let mut outcomes = Vec::with_capacity(self.contracts.len());
        for contract in &self.contracts {
            let alg = contract.algorithm();
            let current = old.models.get(alg);
            let status = match (reload_one(&self.dir, contract, current), current) {
                (Ok(Reread::Same), Some(m)) => {
                    new.models.insert(alg, Arc::clone(m));
                    ReloadStatus::Unchanged
                }
                (Ok(Reread::Model(m)), prev) => {
                    let sha256 = m.sha256().to_string();
                    new.models.insert(alg, m);
                    if prev.is_some() {
                        ReloadStatus::Reloaded { sha256 }
                    } else {
                        ReloadStatus::Loaded { sha256 }
                    }
                }
                (Ok(Reread::Absent(reason)), None) => {
                    new.unavailable.insert(alg, reason.clone());
                    ReloadStatus::Unavailable { reason }
                }
                (Ok(Reread::Absent(_)), Some(m)) => {
                    new.models.insert(alg, Arc::clone(m));
                    ReloadStatus::KeptOld {
                        reason: PolicyLoadError::Missing {
                            algorithm: alg.to_string(),
                            path: self.dir.join(format!("{alg}.onnx")),
                            required: false,
                        },
                    }
                }
                (Ok(Reread::Same), None) => unreachable!("Same needs a current model"),
                (Err(e), Some(m)) => {
                    new.models.insert(alg, Arc::clone(m));
                    ReloadStatus::KeptOld { reason: e }
                }
                (Err(e), None) => {
                    let reason = e.to_string();
                    new.unavailable.insert(alg, reason.clone());
                    ReloadStatus::Unavailable { reason }
                }
            };
            match &status {
                ReloadStatus::KeptOld { .. } => tracing::warn!(
                    "model reload: {}",
                    ReloadOutcome {
                        algorithm: alg,
                        status: status.clone()
                    }
                ),
                _ => tracing::info!(
                    "model reload: {}",
                    ReloadOutcome {
                        algorithm: alg,
                        status: status.clone()
                    }
                ),
            }
            outcomes.push(ReloadOutcome {
                algorithm: alg,
                status,
            });
        }
        self.table.store(Arc::new(new));
        outcomes
    }
}

impl PolicySource for ModelStore {
    fn policy(&self, algorithm: &str) -> Option<Box<dyn Policy>> {
        ModelStore::policy(self, algorithm)
    }
}

enum Loaded {
    Model(Arc<OnnxModel>),
    Absent(String),
}

enum Reread {
    Same,
    Model(Arc<OnnxModel>),
    Absent(String),
}

fn paths(dir: &Path, alg: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{alg}.onnx")),
        dir.join(format!("{alg}.json")),
    )
}

fn present(p: &Path) -> Result<bool, PolicyLoadError> {
    crate::sources::files::present(p).map_err(|e| PolicyLoadError::Io {
        path: p.to_path_buf(),
        reason: e.to_string(),
    })
}

fn load_one(
    dir: &Path,
    contract: &ModelContract,
    required: bool,
) -> Result<Loaded, PolicyLoadError> {
    let alg = contract.algorithm();
    let (model, card) = paths(dir, alg);
    // "there" without following links: a symlink loop or a dangling link is an error
    // (from the reader, naming the file), not an absent model
    match (present(&model)?, present(&card)?) {
        (false, false) if !required => Ok(Loaded::Absent(format!(
            "no model: {} and {} are absent",
            model.display(),
            card.display()
        ))),
        (false, _) => Err(PolicyLoadError::Missing {
            algorithm: alg.into(),
            path: model,
            required,
        }),
        (true, false) => Err(PolicyLoadError::Missing {
            algorithm: alg.into(),
            path: card,
            required,
        }),
        (true, true) => OnnxModel::load(&model, &card, contract).map(Loaded::Model),
    }
}

fn reload_one(
    dir: &Path,
    contract: &ModelContract,
    current: Option<&Arc<OnnxModel>>,
) -> Result<Reread, PolicyLoadError> {
    let (model, card) = paths(dir, contract.algorithm());
    if !present(&model)? && !present(&card)? {
        return Ok(Reread::Absent(format!(
            "no model: {} and {} are absent",
            model.display(),
            card.display()
        )));
    }
    if let Some(cur) = current {
        // Unchanged files keep the running session (no rebuild).
        if let (Ok(bytes), Ok(text)) = (
            crate::sources::files::read_regular(&model, super::onnx::MAX_MODEL_BYTES),
            crate::sources::files::read_regular_to_string(&card, super::onnx::MAX_CARD_BYTES),
        ) {
            let same_card = super::card::ModelCard::from_json(&text)
                .map(|c| &c == cur.card())
                .unwrap_or(false);
            if same_card && sha256_hex(&bytes) == cur.sha256() {
                return Ok(Reread::Same);
            }
        }
    }
    match load_one(dir, contract, false)? {
        Loaded::Model(m) => Ok(Reread::Model(m)),
        Loaded::Absent(r) => Ok(Reread::Absent(r)),
    }
}
