//! Why a model (or the runtime that runs it) could not be loaded.

use std::path::PathBuf;

/// What to install when the onnxruntime library cannot be found or loaded.
pub const INSTALL_HINT: &str = "install it with `bash ops/setup.sh` (builds .venv with the \
onnxruntime 1.31.1 wheel, found automatically), or `pip install onnxruntime==1.31.1` and set \
ORT_DYLIB_PATH=<site-packages>/onnxruntime/capi/libonnxruntime.so.1.31.1";

/// A start-up (or reload) error of the policy runtime. Every variant names the file and, for
/// mismatches, the field, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyLoadError {
    /// The onnxruntime shared library is nowhere to be found.
    #[error("onnxruntime library not found: {detail}; {hint}", hint = INSTALL_HINT)]
    RuntimeMissing {
        /// Where we looked (or the `ORT_DYLIB_PATH` that does not exist).
        detail: String,
    },
    /// The library exists but does not load (not a shared library, too old, ...).
    #[error("onnxruntime library {} could not be loaded: {reason}; {hint}", path.display(), hint = INSTALL_HINT)]
    RuntimeLoad { path: PathBuf, reason: String },
    /// `<alg>.onnx` or `<alg>.json` is missing (both missing: only an error when required).
    #[error("{algorithm}: {} is missing{}", path.display(), if *required { " (a model is required for this algorithm)" } else { ": every model needs its card next to it, and every card its model" })]
    Missing {
        algorithm: String,
        path: PathBuf,
        /// Both files are absent and the caller asked for this algorithm.
        required: bool,
    },
    /// A file could not be read.
    #[error("cannot read {}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    /// The model card is not valid JSON for card schema 1, or breaks the I/O convention.
    #[error("model card {}: {reason}", path.display())]
    CardInvalid { path: PathBuf, reason: String },
    /// The card does not fit what the algorithm expects (its `PolicySpec`).
    #[error("model card {}: field `{field}`: the algorithm expects {expected}, the card says {found}", path.display())]
    SpecMismatch {
        path: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
    /// The card has no `dynamics` section: it was written by a trainer older than the
    /// train/serve contract, so nothing says the model was trained under the dynamics the
    /// agent serves.
    #[error("model card {}: no `dynamics` section: the {algorithm} model was exported by a trainer that does not record the dynamics it trained under; retrain it, or re-export it with the current trainer (train/ccp_train/card.py writes `dynamics`)", path.display())]
    DynamicsMissing { path: PathBuf, algorithm: String },
    /// The card's dynamics are not the ones the agent serves (`--config [algs.<alg>]`).
    #[error("model card {}: field `dynamics.{knob}`: {reason}", path.display())]
    DynamicsMismatch {
        path: PathBuf,
        /// The first knob (by name) that differs, is missing or is unknown.
        knob: String,
        reason: Box<ccp_algs::learned::DynamicsError>,
    },
    /// The card's sha256 is not the model file's: the card must describe the file it sits next to.
    #[error("model card {} does not describe {}: field `sha256`: the file's is {expected}, the card says {found}", card.display(), model.display())]
    Checksum {
        card: PathBuf,
        model: PathBuf,
        expected: String,
        found: String,
    },
    /// The ONNX file does not load (truncated, garbage, unsupported operator).
    #[error("model {} does not load: {reason}", path.display())]
    ModelInvalid { path: PathBuf, reason: String },
    /// The card's inputs/outputs are not the model's real ones.
    #[error("model card {} does not describe {}: field `{field}`: the model has {expected}, the card says {found}", card.display(), model.display())]
    ModelMismatch {
        card: PathBuf,
        model: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
}

impl PolicyLoadError {
    /// The file the error is about, when there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::RuntimeMissing { .. } => None,
            Self::RuntimeLoad { path, .. }
            | Self::Missing { path, .. }
            | Self::Io { path, .. }
            | Self::CardInvalid { path, .. }
            | Self::SpecMismatch { path, .. }
            | Self::DynamicsMissing { path, .. }
            | Self::DynamicsMismatch { path, .. }
            | Self::ModelInvalid { path, .. } => Some(path),
            Self::Checksum { card, .. } | Self::ModelMismatch { card, .. } => Some(card),
        }
    }
}
