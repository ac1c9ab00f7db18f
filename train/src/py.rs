//! The `ccp_train._native` Python module (feature `python`).

use crate::env;
use ccp_algs::{AlgsConfig, Preference};
use ccp_runtime::AgentOptions;
use ccp_sim::Scenario;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, ToPyArray};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn runtime_err(e: anyhow::Error) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

/// A training environment: `SimEnv(scenario_toml, alg, base_dir=".", w=None, algs_toml=None)`.
///
/// Every scenario flow with `alg = <alg>` is a learner. `reset(seed)` and `step(actions)`
/// return `(obs[num_learners, obs_dim], rewards[num_learners], active[num_learners], done)`.
#[pyclass(unsendable, module = "ccp_train._native")]
struct SimEnv {
    env: env::TrainEnv,
}

type StepTuple<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<bool>>,
    bool,
    f64,
);

impl SimEnv {
    fn pack<'py>(&self, py: Python<'py>, out: env::StepOut) -> PyResult<StepTuple<'py>> {
        let n = self.env.num_learners();
        let d = self.env.spec().obs_dim;
        let obs = out
            .obs
            .to_pyarray(py)
            .reshape([n, d])
            .map_err(|e| value_err(format!("obs shape: {e}")))?;
        Ok((
            obs,
            out.rewards.to_pyarray(py),
            out.active.to_pyarray(py),
            out.done,
            out.sim_time_s,
        ))
    }
}

#[pymethods]
impl SimEnv {
    #[new]
    #[pyo3(signature = (scenario_toml, alg, base_dir = ".", w = None, algs_toml = None))]
    fn new(
        scenario_toml: &str,
        alg: &str,
        base_dir: &str,
        w: Option<&str>,
        algs_toml: Option<&str>,
    ) -> PyResult<Self> {
        let scenario =
            Scenario::from_toml_str(scenario_toml, PathBuf::from(base_dir)).map_err(value_err)?;
        let algs: AlgsConfig = match algs_toml {
            Some(t) => toml_algs(t)?,
            None => AlgsConfig::default(),
        };
        let learned = crate::learned_algorithm(alg, &algs).ok_or_else(|| {
            value_err(format!(
                "{alg:?} is not a trainable (learned) algorithm; available: {:?}",
                ccp_algs::registry::learned(&algs)
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
            ))
        })?;
        let default_w = match w {
            Some(s) => s.parse::<Preference>().map_err(value_err)?,
            None => Preference::default(),
        };
        let opts = AgentOptions {
            default_w,
            algs,
            ..Default::default()
        };
        let env = env::TrainEnv::new(scenario, learned, opts).map_err(runtime_err)?;
        Ok(Self { env })
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

    #[pyo3(signature = (seed = None))]
    fn reset<'py>(&mut self, py: Python<'py>, seed: Option<u64>) -> PyResult<StepTuple<'py>> {
        let out = self.env.reset(seed).map_err(runtime_err)?;
        self.pack(py, out)
    }

    fn step<'py>(
        &mut self,
        py: Python<'py>,
        actions: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<StepTuple<'py>> {
        let a = actions.as_slice().map_err(value_err)?.to_vec();
        let out = self.env.step(&a).map_err(runtime_err)?;
        self.pack(py, out)
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

fn toml_algs(text: &str) -> PyResult<AlgsConfig> {
    ccp_runtime::agent::algs_from_toml(text).map_err(value_err)
}

/// MOCC's default knobs (`MoccConfig::default()`, what the agent runs) as a dict: the
/// trainer's defaults for the knobs that change the dynamics a policy learns.
#[pyfunction]
fn mocc_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    to_dict(py, &ccp_algs::mocc::MoccConfig::default())
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
    m.add_function(wrap_pyfunction!(mocc_defaults, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
