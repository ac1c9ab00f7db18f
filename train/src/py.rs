//! The `ccp_train._native` Python module (feature `python`).

use crate::env;
use ccp_algs::learned::LearnedAlgorithm;
use ccp_algs::{AlgsConfig, Preference};
use ccp_runtime::AgentOptions;
use ccp_sim::Scenario;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2, ToPyArray};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn runtime_err(e: anyhow::Error) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

/// A training environment: `SimEnv(scenario_toml, alg, base_dir=".", w=None, algs_toml=None,
/// pause="all", with_mask=False, reward_in_capacity=False)`.
///
/// Every scenario flow with `alg = <alg>` is a learner. `reset(seed)` and `step(actions)`
/// return `(obs[num_learners, obs_dim], rewards[num_learners], active[num_learners], done,
/// sim_time_s)`; with `with_mask=True` a sixth item, `mask[num_learners, obs_dim]`: the state
/// mask the core wrote with each observation (1 present, 0 absent; masked specs such as Owl's,
/// all ones otherwise). A scenario with `[netstats]` delivers its bottleneck's statistics to
/// the learners as the agent does. `span_rewards()`: per learner, the sum and the count of the
/// core's rewards over every report since its last action. `reward_in_capacity=True`: rewards
/// measure each flow's rate against the bottleneck's capacity over the report's interval
/// (for cores whose reward has a rate unit, Owl's and Nuwa-RL's; the others keep theirs).
#[pyclass(unsendable, module = "ccp_train._native")]
struct SimEnv {
    env: env::TrainEnv,
    with_mask: bool,
    span: Vec<(f64, u32)>,
}

impl SimEnv {
    /// The step's tuple (see the class docs); the span rewards are kept for `span_rewards`.
    fn pack<'py>(&mut self, py: Python<'py>, out: env::StepOut) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.env.num_learners();
        let d = self.env.spec().obs_dim;
        let rows = |v: Vec<f32>, what: &str| {
            v.to_pyarray(py)
                .reshape([n, d])
                .map_err(|e| value_err(format!("{what} shape: {e}")))
        };
        let obs = rows(out.obs, "obs")?;
        self.span = out.span_reward;
        let mut items: Vec<Bound<'py, PyAny>> = vec![
            obs.into_any(),
            out.rewards.to_pyarray(py).into_any(),
            out.active.to_pyarray(py).into_any(),
            out.done.into_pyobject(py)?.to_owned().into_any(),
            out.sim_time_s.into_pyobject(py)?.into_any(),
        ];
        if self.with_mask {
            items.push(rows(out.mask, "mask")?.into_any());
        }
        PyTuple::new(py, items)
    }
}

#[pymethods]
impl SimEnv {
    #[new]
    #[pyo3(signature = (scenario_toml, alg, base_dir = ".", w = None, algs_toml = None, pause = "all", with_mask = false, reward_in_capacity = false))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn new(
        scenario_toml: &str,
        alg: &str,
        base_dir: &str,
        w: Option<&str>,
        algs_toml: Option<&str>,
        pause: &str,
        with_mask: bool,
        reward_in_capacity: bool,
    ) -> PyResult<Self> {
        let pause = match pause {
            "all" => env::Pause::All,
            "any" => env::Pause::Any,
            other => {
                return Err(value_err(format!(
                    "pause = {other:?}: expected \"all\" (every learner decides once per step) \
                     or \"any\" (a step ends at any learner's report)"
                )))
            }
        };
        let scenario =
            Scenario::from_toml_str(scenario_toml, PathBuf::from(base_dir)).map_err(value_err)?;
        let algs = algs_config(algs_toml)?;
        let learned = learned(alg, &algs)?;
        let default_w = match w {
            Some(s) => s.parse::<Preference>().map_err(value_err)?,
            None => Preference::default(),
        };
        let opts = AgentOptions {
            default_w,
            algs,
            ..Default::default()
        };
        let mut env = env::TrainEnv::new(scenario, learned, opts).map_err(runtime_err)?;
        env.set_pause(pause);
        env.set_reward_in_capacity(reward_in_capacity);
        Ok(Self {
            env,
            with_mask,
            span: Vec::new(),
        })
    }

    #[getter]
    fn num_learners(&self) -> usize {
        self.env.num_learners()
    }
    #[getter]
    fn obs_dim(&self) -> usize {
        self.env.spec().obs_dim
    }
    #[getter]
    fn act_dim(&self) -> usize {
        self.env.spec().act_dim
    }
    #[getter]
    fn act_low(&self) -> Vec<f32> {
        self.env.spec().act_low.clone()
    }
    #[getter]
    fn act_high(&self) -> Vec<f32> {
        self.env.spec().act_high.clone()
    }
    #[getter]
    fn feature_version(&self) -> u32 {
        self.env.spec().feature_version
    }
    /// Whether the policy takes a state mask (Owl).
    #[getter]
    fn masked(&self) -> bool {
        self.env.spec().masked
    }
    /// `n` for a discrete policy (the action is an index in `[0, n − 1]`), else `None`.
    #[getter]
    fn n_actions(&self) -> Option<usize> {
        self.env.discrete_actions()
    }

    #[pyo3(signature = (seed = None))]
    fn reset<'py>(&mut self, py: Python<'py>, seed: Option<u64>) -> PyResult<Bound<'py, PyTuple>> {
        let out = self.env.reset(seed).map_err(runtime_err)?;
        self.pack(py, out)
    }

    fn step<'py>(
        &mut self,
        py: Python<'py>,
        actions: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let a = actions.as_slice().map_err(value_err)?.to_vec();
        let out = self.env.step(&a).map_err(runtime_err)?;
        self.pack(py, out)
    }

    /// Per learner, `(sums, counts)`: the sum and the number of the core's rewards over every
    /// report since the learner's last action, as of the last `reset`/`step` (the reports its
    /// action led to, the returned observation's included; decisions are not taken at every
    /// report, e.g. Owl's in slow start and loss recovery).
    fn span_rewards<'py>(
        &self,
        py: Python<'py>,
    ) -> (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<u32>>) {
        let sums: Vec<f64> = self.span.iter().map(|s| s.0).collect();
        let counts: Vec<u32> = self.span.iter().map(|s| s.1).collect();
        (sums.to_pyarray(py), counts.to_pyarray(py))
    }

    /// The finished episode's results as a dict (once per episode; the figures of
    /// `ccp-agent --sim --json`). `windows`: a list of `(t0, t1)` seconds; the dict then also
    /// holds `throughput_windows`, for each window the `(flow id, Mbit/s)` of every flow that
    /// ran over all of it.
    #[pyo3(signature = (windows = None))]
    fn results<'py>(
        &mut self,
        py: Python<'py>,
        windows: Option<Vec<(f64, f64)>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let r = self.env.results().map_err(runtime_err)?;
        let d = to_dict(py, &r)?;
        if let Some(ws) = windows {
            let per: Vec<Vec<(usize, f64)>> = ws
                .iter()
                .map(|&(t0, t1)| r.throughput_window(t0, t1))
                .collect();
            d.set_item("throughput_windows", per)?;
        }
        Ok(d)
    }

    fn decisions(&self) -> Vec<u64> {
        self.env.decisions()
    }
}

/// The learned algorithm `alg`, configured, or a `ValueError` listing the learned ones.
fn learned(alg: &str, algs: &AlgsConfig) -> PyResult<Arc<dyn LearnedAlgorithm>> {
    crate::learned_algorithm(alg, algs).ok_or_else(|| {
        value_err(format!(
            "{alg:?} is not a trainable (learned) algorithm; available: {:?}",
            ccp_algs::registry::learned_names()
        ))
    })
}

/// `algorithms()`: every algorithm of the registry as `(name, kind)`, `kind` one of
/// `builtin` (needs no model), `learned` (served with a trained model) or `reserved` (a name
/// without an implementation), in registry order: the one list the harness and the
/// portfolio derive theirs from.
#[pyfunction]
fn algorithms() -> Vec<(&'static str, &'static str)> {
    let builtin = ccp_algs::Registry::builtin();
    ccp_algs::registry::ALGORITHMS
        .iter()
        .map(|&n| {
            let kind = if ccp_algs::registry::is_learned(n) {
                "learned"
            } else if builtin.get(n).is_some() {
                "builtin"
            } else {
                "reserved"
            };
            (n, kind)
        })
        .collect()
}

/// `receiver_forms()`: the simulator's receiver-side laws as `(algorithm, receiver)` pairs
/// (a scenario flow's `receiver = "<receiver>"` with `alg = "<algorithm>"`).
#[pyfunction]
fn receiver_forms() -> Vec<(&'static str, &'static str)> {
    ccp_sim::ReceiverKind::ALL
        .iter()
        .map(|k| (k.alg(), k.name()))
        .collect()
}

/// `learned_algorithms()`: the learned (trainable) algorithms' registry names.
#[pyfunction]
fn learned_algorithms() -> Vec<&'static str> {
    ccp_algs::registry::learned_names().to_vec()
}

/// `spec(alg)`: what `alg`'s models look like and how its observation is laid out, as a dict:
/// `algorithm`, `feature_version`, `obs_dim`, `act_dim`, `action_low`, `action_high`,
/// `masked`, `recurrent_hidden` (LSTM size or None), `n_actions` (a discrete policy's number
/// of Q-values, `LearnedAlgorithm::discrete_actions`; None: continuous), and `layout`, named `[start, end)`
/// slices of the observation a trainer builds its networks on (`LearnedAlgorithm::obs_layout`;
/// MOCC: `state`, `w`).
#[pyfunction]
fn spec<'py>(py: Python<'py>, alg: &str) -> PyResult<Bound<'py, PyDict>> {
    let a = learned(alg, &AlgsConfig::default())?;
    let s = a.spec();
    let d = PyDict::new(py);
    d.set_item("algorithm", s.algorithm)?;
    d.set_item("feature_version", s.feature_version)?;
    d.set_item("obs_dim", s.obs_dim)?;
    d.set_item("act_dim", s.act_dim)?;
    d.set_item("action_low", s.act_low.clone())?;
    d.set_item("action_high", s.act_high.clone())?;
    d.set_item("masked", s.masked)?;
    d.set_item("recurrent_hidden", s.recurrent_hidden)?;
    d.set_item("n_actions", a.discrete_actions())?;
    let layout = PyDict::new(py);
    for (name, range) in a.obs_layout() {
        layout.set_item(name, (range.start, range.end))?;
    }
    d.set_item("layout", layout)?;
    Ok(d)
}

/// `defaults(alg)`: the algorithm's default knobs (its `[algs.<alg>]` table), as a dict.
#[pyfunction]
fn defaults<'py>(py: Python<'py>, alg: &str) -> PyResult<Bound<'py, PyDict>> {
    let v = ccp_algs::registry::defaults(alg)
        .ok_or_else(|| value_err(format!("{alg:?} is not an implemented algorithm")))?;
    to_dict(py, &v)
}

fn toml_algs(text: &str) -> PyResult<AlgsConfig> {
    ccp_runtime::agent::algs_from_toml(text).map_err(value_err)
}

/// The algorithms configured by an `[algs.*]` TOML text (`None`: every default), as the
/// agent reads its `--config`.
fn algs_config(algs_toml: Option<&str>) -> PyResult<AlgsConfig> {
    match algs_toml {
        Some(t) => toml_algs(t),
        None => Ok(AlgsConfig::default()),
    }
}

/// `dynamics(alg, algs_toml=None)`: `LearnedAlgorithm::dynamics()` of `alg` configured by
/// `algs_toml` — exactly what the agent computes for its `--config` and checks a model
/// card's `dynamics` section against.
#[pyfunction]
#[pyo3(signature = (alg, algs_toml = None))]
fn dynamics<'py>(
    py: Python<'py>,
    alg: &str,
    algs_toml: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let algs = algs_config(algs_toml)?;
    to_dict(py, &learned(alg, &algs)?.dynamics())
}

/// `trace_mean_mbps(path)`: a trace's mean capacity in Mbit/s (a mahimahi file or a
/// throughput log), as the simulator reads and serves it (`Capacity::mean_bps`, scale 1).
#[pyfunction]
fn trace_mean_mbps(path: &str) -> PyResult<f64> {
    let cap = ccp_sim::Capacity::from_trace(PathBuf::from(path), 1.0).map_err(value_err)?;
    Ok(cap.mean_bps() / 1e6)
}

/// `portfolio_choose(table_json, w, cls=None)`: the `ccp_auto` table's choice for a flow of
/// preference `w` on path class `cls` (None: the default class), as `(alg, score)` with
/// `score = w · o` of the chosen entry — the agent's own rule
/// (`ccp_runtime::flows::portfolio`), so reports and the table builder see exactly what a
/// flow gets. A table the agent would refuse raises `ValueError` with its reason.
#[pyfunction]
#[pyo3(signature = (table_json, w, cls = None))]
fn portfolio_choose(table_json: &str, w: [f64; 3], cls: Option<&str>) -> PyResult<(String, f64)> {
    let table = ccp_runtime::flows::portfolio::Portfolio::parse(table_json, "<table>")
        .map_err(value_err)?;
    let w = Preference::new(w[0], w[1], w[2]).map_err(value_err)?;
    table
        .choose(&w, cls, |_| true)
        .map(|c| (c.alg, c.score))
        .ok_or_else(|| value_err("the table has no entry for that class"))
}

/// `sim_limits()`: the simulator's packet size (bytes) and largest buffer (packets), so a
/// scenario generator can stay inside what `Scenario::validate` accepts.
#[pyfunction]
fn sim_limits() -> (u32, u64) {
    (ccp_sim::PACKET_BYTES, ccp_sim::MAX_BUFFER_PKTS)
}

/// A serializable struct as a Python dict (through JSON).
fn to_dict<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyDict>> {
    let json = serde_json::to_string(v).map_err(|e| runtime_err(e.into()))?;
    py.import("json")?
        .call_method1("loads", (json,))?
        .cast_into::<PyDict>()
        .map_err(|e| value_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SimEnv>()?;
    m.add_function(wrap_pyfunction!(dynamics, m)?)?;
    m.add_function(wrap_pyfunction!(trace_mean_mbps, m)?)?;
    m.add_function(wrap_pyfunction!(sim_limits, m)?)?;
    m.add_function(wrap_pyfunction!(portfolio_choose, m)?)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(learned_algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(receiver_forms, m)?)?;
    m.add_function(wrap_pyfunction!(spec, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
