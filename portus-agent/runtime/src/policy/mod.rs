//! The learned-policy runtime: ONNX models behind [`ccp_algs::Policy`].
//!
//! - [`runtime`]: finds and loads the onnxruntime shared library (ort `load-dynamic`), with an
//!   explicit [`runtime::init`] so a missing library is a start-up error that says what to
//!   install.
//! - [`card`]: the model card (`<alg>.json`, schema 1), the model I/O convention, and the
//!   [`ModelContract`] a card is checked against (spec and dynamics).
//! - [`onnx`]: [`OnnxModel`] (one shared session per model) and [`OnnxPolicy`] (one per flow,
//!   carrying recurrent state and the clamp counter); batched inference with
//!   [`OnnxModel::act_batch`].
//! - [`store`]: [`ModelStore`], the `--models DIR` directory: load, per-flow policies,
//!   SIGHUP reload.
//! - [`error`]: the load error, [`PolicyLoadError`].
//!
//! The Python side (`train/ccp_train/export.py`, `card.py`) writes what this reads.
//!
//! ```no_run
//! use ccp_runtime::policy::{ModelContract, ModelStore};
//! use ccp_algs::AlgsConfig;
//! // Start-up: loads onnxruntime (if any model is present) and checks every model against
//! // its card, and the card against its algorithm's spec and the dynamics the agent serves
//! // (as configured); a mismatch is an error, a missing model is not.
//! let contracts: Vec<ModelContract> = ccp_algs::registry::learned(&AlgsConfig::default())
//!     .iter()
//!     .map(|a| ModelContract::of(a.as_ref()))
//!     .collect();
//! let store = ModelStore::load("models", &contracts)?;
//! for (alg, why) in store.unavailable() {
//!     eprintln!("{alg} unavailable: {why}");
//! }
//! // Per flow (portus thread): a fresh instance sharing the model's session.
//! if let Some(mut p) = store.policy("mocc") {
//!     let mut out = vec![0.0f32; p.act_dim()];
//!     p.act(&vec![0.0; p.obs_dim()], None, &mut out)?;
//!     let _clamped_so_far = p.clamped();
//! }
//! // SIGHUP (signal thread): re-read every file, keep the old model where the new one is bad.
//! for outcome in store.reload() {
//!     eprintln!("{outcome}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Threads: `ModelStore` is `Send + Sync` (an `arc-swap` table; `policy()` is a lock-free
//! read); an `OnnxModel`'s session is shared through an `Arc` and runs under a mutex (ort's
//! `Session::run` takes `&mut self`); each `OnnxPolicy` belongs to one flow. A flow keeps the
//! model it started with across reloads; flows created afterwards get the new one.

pub mod card;
pub mod error;
pub mod onnx;
pub mod runtime;
pub mod store;

pub use card::{DynamicsDiff, ModelCard, ModelContract, OutputKind, CARD_VERSION};
pub use error::PolicyLoadError;
pub use onnx::{argmax_q, q_action, sha256_hex, OnnxModel, OnnxPolicy};
pub use store::{LoadOptions, ModelStore, ReloadOutcome, ReloadStatus};

/// Default models directory of the agent (`--models`).
pub const DEFAULT_MODELS_DIR: &str = "models";
