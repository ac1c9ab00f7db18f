//! The learned-policy runtime: ONNX models behind [`ccp_algs::Policy`].
//!
//! - [`runtime`]: finds and loads the onnxruntime shared library (ort `load-dynamic`), with an
//!   explicit [`runtime::init`] so a missing library is a start-up error that says what to
//!   install.
//! - [`card`]: the model card (`<alg>.json`, schema 1) and the model I/O convention.
//! - [`onnx`]: [`OnnxModel`] (one shared session per model) and [`OnnxPolicy`] (one per flow,
//!   carrying recurrent state and the clamp counter); batched inference with
//!   [`OnnxModel::act_batch`].
//! - [`store`]: [`ModelStore`], the `--models DIR` directory: load, per-flow policies,
//!   SIGHUP reload.
//! - [`error`]: the load error, [`PolicyLoadError`].
//!
//! The Python side (`train/ccp_train/export.py`, `card.py`) writes what this reads.

pub mod card;
pub mod error;
pub mod onnx;
pub mod runtime;
pub mod store;

pub use card::{ModelCard, OutputKind, CARD_VERSION};
pub use error::PolicyLoadError;
pub use onnx::{argmax_q, sha256_hex, OnnxModel, OnnxPolicy};
pub use store::{LoadOptions, ModelStore, ReloadOutcome, ReloadStatus};

/// Default models directory of the agent (`--models`).
pub const DEFAULT_MODELS_DIR: &str = "models";
