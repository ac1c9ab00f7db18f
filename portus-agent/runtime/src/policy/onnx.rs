//! ONNX policies: one shared session per model ([`OnnxModel`]), one [`OnnxPolicy`] per flow.
//!
//! The session is built once (one intra-op and one inter-op thread) and shared between flows
//! through an `Arc`; ort's `Session::run` takes `&mut self`, so runs are serialized by a
//! mutex (decisions are microseconds; the agent decides on one thread anyway). Recurrent state
//! (`h`/`c`) lives in the per-flow [`OnnxPolicy`]. Outputs go through
//! [`ccp_algs::clamp_output`] with the card's bounds; every changed value is counted.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ccp_algs::policy::{Policy, PolicyError, PolicySpec};
use ort::session::{Session, SessionInputValue};
use ort::value::{TensorElementType, TensorRef};
use sha2::{Digest, Sha256};

use super::card::{self, DynamicsDiff, ModelCard, ModelContract, OutputKind};
use super::error::PolicyLoadError;
use super::runtime;
use ccp_algs::learned::DynamicsError;

/// A loaded model: its card, the spec it was checked against, and the shared session.
#[derive(Debug)]
pub struct OnnxModel {
    card: ModelCard,
    spec: PolicySpec,
    model_path: PathBuf,
    card_path: PathBuf,
    session: Mutex<Session>,
    /// `(num_layers, hidden)` when recurrent.
    recurrent: Option<(usize, usize)>,
    batch_dynamic: bool,
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Largest model file read (only regular files are read: a FIFO would block).
pub const MAX_MODEL_BYTES: u64 = 1 << 30;
/// Largest model card read.
pub const MAX_CARD_BYTES: u64 = 16 << 20;

impl OnnxModel {
    /// Load `model` with its `card`, checking (in this order) the card's schema, the card
    /// against the contract's spec and dynamics, the card's sha256 against the file, that the file loads, the card's
    /// inputs/outputs against the model's real ones, and the I/O convention. Loads the
    /// onnxruntime library first if needed ([`runtime::init`], searching from the model's
    /// directory).
    pub fn load(
        model: &Path,
        card: &Path,
        contract: &ModelContract,
    ) -> Result<Arc<Self>, PolicyLoadError> {
        let card_text = crate::sources::files::read_regular_to_string(card, MAX_CARD_BYTES)
            .map_err(|e| PolicyLoadError::Io {
                path: card.to_path_buf(),
                reason: e.to_string(),
            })?;
        let bytes = crate::sources::files::read_regular(model, MAX_MODEL_BYTES).map_err(|e| {
            PolicyLoadError::Io {
                path: model.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
        Self::from_parts(model, card, &card_text, &bytes, contract)
    }

    pub(crate) fn from_parts(
        model: &Path,
        card_path: &Path,
        card_text: &str,
        bytes: &[u8],
        contract: &ModelContract,
    ) -> Result<Arc<Self>, PolicyLoadError> {
        let card =
            ModelCard::from_json(card_text).map_err(|reason| PolicyLoadError::CardInvalid {
                path: card_path.to_path_buf(),
                reason,
            })?;
        card.check_spec(&contract.spec)
            .and_then(|()| card.check_output(contract.n_actions))
            .map_err(|(field, expected, found)| PolicyLoadError::SpecMismatch {
                path: card_path.to_path_buf(),
                field,
                expected,
                found,
            })?;
        card.check_dynamics(&contract.dynamics)
            .map_err(|d| match d {
                DynamicsDiff::Absent => PolicyLoadError::DynamicsMissing {
                    path: card_path.to_path_buf(),
                    algorithm: card.algorithm.clone(),
                },
                DynamicsDiff::Knob(reason) => PolicyLoadError::DynamicsMismatch {
                    path: card_path.to_path_buf(),
                    knob: match &reason {
                        DynamicsError::Mismatch { knob, .. }
                        | DynamicsError::Missing { knob, .. }
                        | DynamicsError::Unknown { knob, .. } => knob.clone(),
                    },
                    reason: Box::new(reason),
                },
            })?;
        let sha = sha256_hex(bytes);
        if !card.sha256.eq_ignore_ascii_case(&sha) {
            return Err(PolicyLoadError::Checksum {
                card: card_path.to_path_buf(),
                model: model.to_path_buf(),
                expected: sha,
                found: card.sha256.clone(),
            });
        }
        let rt = runtime::init(model.parent())?;
        let invalid = |reason: String| PolicyLoadError::ModelInvalid {
            path: model.to_path_buf(),
            reason,
        };
        let session = Session::builder(&rt.env)
            .and_then(|b| Ok(b.with_intra_threads(1)?))
            .and_then(|b| Ok(b.with_inter_threads(1)?))
            .and_then(|mut b| b.commit_from_memory(bytes))
            .map_err(|e| invalid(e.to_string()))?;
        let io = |outlets: &[ort::value::Outlet]| -> Vec<(String, Vec<i64>, bool)> {
            outlets
                .iter()
                .map(|o| {
                    let shape = o
                        .dtype()
                        .tensor_shape()
                        .map(|s| s.iter().map(|&d| if d < 0 { -1 } else { d }).collect())
                        .unwrap_or_default();
                    let f32 = o.dtype().tensor_type() == Some(TensorElementType::Float32);
                    (o.name().to_string(), shape, f32)
                })
                .collect()
        };
        let mismatch = |(field, expected, found): card::Diff| PolicyLoadError::ModelMismatch {
            card: card_path.to_path_buf(),
            model: model.to_path_buf(),
            field,
            expected,
            found,
        };
        card::compare_io("inputs", &card.inputs, &io(session.inputs())).map_err(mismatch)?;
        card::compare_io("outputs", &card.outputs, &io(session.outputs())).map_err(mismatch)?;
        let file_name = model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        card.check_convention(&file_name)
            .map_err(|reason| PolicyLoadError::CardInvalid {
                path: card_path.to_path_buf(),
                reason,
            })?;
        Ok(Arc::new(OnnxModel {
            recurrent: card
                .recurrent
                .as_ref()
                .map(|r| (r.num_layers, r.hidden_size)),
            batch_dynamic: card.batch_dynamic(),
            card,
            spec: contract.spec.clone(),
            model_path: model.to_path_buf(),
            card_path: card_path.to_path_buf(),
            session: Mutex::new(session),
        }))
    }

    /// The model card.
    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    /// The spec the card was checked against.
    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// The model file's sha256 (verified at load).
    pub fn sha256(&self) -> &str {
        &self.card.sha256
    }

    pub fn model_path(&self) -> &Path {
        &self.model_path
    }

    pub fn card_path(&self) -> &Path {
        &self.card_path
    }

    /// Whether batched inference is possible (dynamic batch dimension).
    pub fn batch_dynamic(&self) -> bool {
        self.batch_dynamic
    }

    /// A fresh per-flow policy (zero recurrent state) sharing this session.
    pub fn new_policy(self: &Arc<Self>) -> OnnxPolicy {
        let state = self.recurrent.map_or(0, |(l, h)| l * h);
        OnnxPolicy {
            model: Arc::clone(self),
            h: vec![0.0; state],
            c: vec![0.0; state],
            raw: vec![0.0; self.card.output_width()],
            clamped: 0,
        }
    }

    /// One run for `n` rows: `obs`/`mask` `[n, obs_dim]`, `h`/`c` `[L, n, H]` (updated in
    /// place), raw `action` outputs into `raw` (`[n, output_width]`).
    fn run(
        &self,
        n: usize,
        obs: &[f32],
        mask: Option<&[f32]>,
        state: Option<(&mut [f32], &mut [f32])>,
        raw: &mut [f32],
    ) -> Result<(), PolicyError> {
        let d = self.card.obs_dim;
        if obs.len() != n * d {
            return Err(PolicyError::ObsShape {
                expected: n * d,
                got: obs.len(),
            });
        }
        let inf = |e: ort::Error| PolicyError::Inference(e.to_string());
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(4);
        inputs.push((
            card::OBS.into(),
            TensorRef::from_array_view(([n, d], obs))
                .map_err(inf)?
                .into(),
        ));
        if self.card.masked {
            let m = mask.ok_or_else(|| {
                PolicyError::Inference(format!(
                    "{} takes a mask input; none given",
                    self.card.algorithm
                ))
            })?;
            if m.len() != n * d {
                return Err(PolicyError::Inference(format!(
                    "mask has {} values, expected {}",
                    m.len(),
                    n * d
                )));
            }
            inputs.push((
                card::MASK.into(),
                TensorRef::from_array_view(([n, d], m)).map_err(inf)?.into(),
            ));
        }
        let (l, hs) = self.recurrent.unwrap_or((0, 0));
        let mut state = state;
        if let Some((h, c)) = state.as_ref() {
            inputs.push((
                card::H_IN.into(),
                TensorRef::from_array_view(([l, n, hs], &h[..]))
                    .map_err(inf)?
                    .into(),
            ));
            inputs.push((
                card::C_IN.into(),
                TensorRef::from_array_view(([l, n, hs], &c[..]))
                    .map_err(inf)?
                    .into(),
            ));
        }
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let outputs = session.run(inputs).map_err(inf)?;
        let (_, a) = outputs[card::ACTION]
            .try_extract_tensor::<f32>()
            .map_err(inf)?;
        if a.len() != raw.len() {
            return Err(PolicyError::Inference(format!(
                "output `action` has {} values, expected {}",
                a.len(),
                raw.len()
            )));
        }
        raw.copy_from_slice(a);
        if let Some((h, c)) = state.as_mut() {
            for (name, dst) in [(card::H_OUT, &mut **h), (card::C_OUT, &mut **c)] {
                let (_, v) = outputs[name].try_extract_tensor::<f32>().map_err(inf)?;
                if v.len() != dst.len() {
                    return Err(PolicyError::Inference(format!(
                        "output `{name}` has {} values, expected {}",
                        v.len(),
                        dst.len()
                    )));
                }
                dst.copy_from_slice(v);
            }
        }
        Ok(())
    }

    /// Turn one row of raw outputs into the action; returns how many values were clamped.
    fn finish(&self, raw: &[f32], out: &mut [f32]) -> Result<u64, PolicyError> {
        match self.card.output_kind {
            OutputKind::Continuous => {
                out.copy_from_slice(raw);
                Ok(self.spec.clamp(out))
            }
            OutputKind::QValues => q_action(raw, out),
        }
    }

    /// Decide for several flows of this model at once (one run with batch `flows.len()`):
    /// `obs` (and `mask`) are the flows' observations back to back, `out` receives
    /// `act_dim` values per flow. Recurrent state is gathered from and written back to each
    /// flow; clamps are counted per flow. Needs a model exported with a dynamic batch
    /// dimension, and every flow must belong to this model.
    pub fn act_batch(
        &self,
        flows: &mut [&mut OnnxPolicy],
        obs: &[f32],
        mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError> {
        let n = flows.len();
        if n == 0 {
            return Ok(());
        }
        if !self.batch_dynamic && n > 1 {
            return Err(PolicyError::Inference(format!(
                "{}: the model has a fixed batch of 1; export it with a dynamic batch dimension for act_batch",
                self.card.algorithm
            )));
        }
        if flows
            .iter()
            .any(|f| !std::ptr::eq(Arc::as_ptr(&f.model), self))
        {
            return Err(PolicyError::Inference(
                "act_batch: a flow belongs to another model".into(),
            ));
        }
        let act = self.card.act_dim;
        if out.len() != n * act {
            return Err(PolicyError::Inference(format!(
                "act_batch: out has {} values, expected {}",
                out.len(),
                n * act
            )));
        }
        let w = self.card.output_width();
        let mut raw = vec![0.0f32; n * w];
        match self.recurrent {
            None => self.run(n, obs, mask, None, &mut raw)?,
            Some((l, hs)) => {
                let mut h = vec![0.0f32; l * n * hs];
                let mut c = vec![0.0f32; l * n * hs];
                for (b, f) in flows.iter().enumerate() {
                    for layer in 0..l {
                        let src = layer * hs..(layer + 1) * hs;
                        let dst = (layer * n + b) * hs..(layer * n + b + 1) * hs;
                        h[dst.clone()].copy_from_slice(&f.h[src.clone()]);
                        c[dst].copy_from_slice(&f.c[src]);
                    }
                }
                self.run(n, obs, mask, Some((&mut h, &mut c)), &mut raw)?;
                for (b, f) in flows.iter_mut().enumerate() {
                    for layer in 0..l {
                        let dst = layer * hs..(layer + 1) * hs;
                        let src = (layer * n + b) * hs..(layer * n + b + 1) * hs;
                        f.h[dst.clone()].copy_from_slice(&h[src.clone()]);
                        f.c[dst].copy_from_slice(&c[src]);
                    }
                }
            }
        }
        for (b, f) in flows.iter_mut().enumerate() {
            let r = &raw[b * w..(b + 1) * w];
            f.raw.copy_from_slice(r);
            f.clamped += self.finish(r, &mut out[b * act..(b + 1) * act])?;
        }
        Ok(())
    }
}

/// A discrete policy's action from its Q-values: the index of the largest finite one
/// (the first on a tie) into `out[0]`; returns 1 when some Q-values were NaN/inf (a clamp,
/// counted), 0 otherwise. No finite Q-value is an error: the flow then holds its last
/// decision (`LearnedController` counts a policy error) rather than taking an index the
/// model never chose.
pub fn q_action(q: &[f32], out: &mut [f32]) -> Result<u64, PolicyError> {
    let (idx, bad) = argmax_q(q);
    let i = idx.ok_or_else(|| {
        PolicyError::Inference(format!("none of the {} Q-values is finite", q.len()))
    })?;
    let slot = out
        .first_mut()
        .ok_or_else(|| PolicyError::Inference("no room for the action index (act_dim 0)".into()))?;
    *slot = i as f32;
    Ok(u64::from(bad))
}

/// Index of the largest finite Q-value, and whether any value was NaN/inf.
pub fn argmax_q(q: &[f32]) -> (Option<usize>, bool) {
    let mut best: Option<(usize, f32)> = None;
    let mut bad = false;
    for (i, &v) in q.iter().enumerate() {
        if !v.is_finite() {
            bad = true;
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    (best.map(|(i, _)| i), bad)
}

/// A per-flow policy instance backed by a shared [`OnnxModel`].
#[derive(Debug)]
pub struct OnnxPolicy {
    model: Arc<OnnxModel>,
    h: Vec<f32>,
    c: Vec<f32>,
    raw: Vec<f32>,
    clamped: u64,
}

impl OnnxPolicy {
    /// The model this flow runs (kept across reloads of the store).
    pub fn model(&self) -> &Arc<OnnxModel> {
        &self.model
    }

    /// The last decision's raw `action` output, before clamping (Q-values for a discrete
    /// policy).
    pub fn raw_output(&self) -> &[f32] {
        &self.raw
    }

    /// The recurrent state `(h, c)` (`[num_layers, hidden]` each), if any.
    pub fn state(&self) -> Option<(&[f32], &[f32])> {
        self.model.recurrent.map(|_| (&self.h[..], &self.c[..]))
    }
}

impl Policy for OnnxPolicy {
    fn obs_dim(&self) -> usize {
        self.model.card.obs_dim
    }

    fn act_dim(&self) -> usize {
        self.model.card.act_dim
    }

    fn act(
        &mut self,
        obs: &[f32],
        mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError> {
        if obs.len() != self.model.card.obs_dim {
            return Err(PolicyError::ObsShape {
                expected: self.model.card.obs_dim,
                got: obs.len(),
            });
        }
        if out.len() != self.model.card.act_dim {
            return Err(PolicyError::Inference(format!(
                "out has {} values, the policy writes {}",
                out.len(),
                self.model.card.act_dim
            )));
        }
        let state = if self.model.recurrent.is_some() {
            Some((&mut self.h[..], &mut self.c[..]))
        } else {
            None
        };
        // On failure the state and the last raw output stay as they were.
        self.model.run(1, obs, mask, state, &mut self.raw)?;
        self.clamped += self.model.finish(&self.raw, out)?;
        Ok(())
    }

    fn reset(&mut self) {
        self.h.fill(0.0);
        self.c.fill(0.0);
    }

    fn clamped(&self) -> u64 {
        self.clamped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_values_give_the_index_of_the_largest_finite_one() {
        let mut out = [9.0f32];
        assert_eq!(q_action(&[0.1, 0.5, -2.0, 0.4], &mut out), Ok(0));
        assert_eq!(out, [1.0]);
        // ties go to the first
        assert_eq!(q_action(&[3.0, 3.0, 1.0], &mut out), Ok(0));
        assert_eq!(out, [0.0]);
        // NaN and infinities are skipped, and counted once
        assert_eq!(
            q_action(
                &[f32::NAN, 1.0, f32::INFINITY, 2.0, f32::NEG_INFINITY],
                &mut out
            ),
            Ok(1)
        );
        assert_eq!(out, [3.0]);
        // seven Q-values (Owl): the last one wins
        let q = [-1.0, -0.5, 0.0, 0.1, 0.2, 0.3, 0.4];
        assert_eq!(q_action(&q, &mut out), Ok(0));
        assert_eq!(out, [6.0]);
    }

    #[test]
    fn no_finite_q_value_is_an_error_not_an_index() {
        let mut out = [5.0f32];
        for q in [&[f32::NAN; 7][..], &[f32::INFINITY, f32::NEG_INFINITY], &[]] {
            let e = q_action(q, &mut out).unwrap_err();
            assert!(e.to_string().contains("finite"), "{e}");
            // the output is left alone: the controller holds its last decision
            assert_eq!(out, [5.0]);
        }
        assert!(q_action(&[1.0], &mut []).is_err());
        assert_eq!(argmax_q(&[f32::NAN, f32::NAN]), (None, true));
        assert_eq!(argmax_q(&[0.0, 1.0]), (Some(1), false));
    }
}
