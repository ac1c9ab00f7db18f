//! Finding and loading the onnxruntime shared library (ort `load-dynamic`).
//!
//! ort only notices a missing library at first use, deep inside a session build; [`init`]
//! loads it up front and turns every failure into a [`PolicyLoadError`] that says what to
//! install. Where the library comes from, first match wins:
//!
//! 1. an explicit path ([`init_from`]);
//! 2. `ORT_DYLIB_PATH`, if set (set but missing is an error, not a fallback);
//! 3. the repository's virtualenv: `.venv/lib/python3*/site-packages/onnxruntime/capi/
//!    libonnxruntime.so*` in the models directory's parent, the current directory, the
//!    executable's directory, or any of their ancestors (the onnxruntime 1.31.1 wheel that
//!    `bash ops/setup.sh` installs).
//!
//! A process loads one library once: after a successful load every [`init`] returns it, and
//! [`init_from`] with another path is an error.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::error::PolicyLoadError;

/// The environment variable naming the library explicitly.
pub const DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// The loaded runtime.
#[derive(Debug)]
pub struct Runtime {
    /// The library that was loaded.
    pub library: PathBuf,
    /// onnxruntime's build description.
    pub build_info: String,
    pub(crate) env: ort::environment::Environment,
}

impl Runtime {
    /// The ort environment sessions are built in.
    pub fn environment(&self) -> &ort::environment::Environment {
        &self.env
    }
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// The runtime, if loaded.
pub fn get() -> Option<&'static Runtime> {
    RUNTIME.get()
}

/// Load onnxruntime from `ORT_DYLIB_PATH` or the repository's `.venv` (see the module docs);
/// `models_dir` adds the models directory's ancestors to the search. Idempotent.
pub fn init(models_dir: Option<&Path>) -> Result<&'static Runtime, PolicyLoadError> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let path = find_library(models_dir)?;
    init_from(&path)
}

/// Load onnxruntime from `path`.
pub fn init_from(path: &Path) -> Result<&'static Runtime, PolicyLoadError> {
    if !path.is_file() {
        return Err(PolicyLoadError::RuntimeMissing {
            detail: format!("{} does not exist", path.display()),
        });
    }
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = RUNTIME.get() {
        if same_file(&rt.library, path) {
            return Ok(rt);
        }
        return Err(PolicyLoadError::RuntimeLoad {
            path: path.to_path_buf(),
            reason: format!(
                "this process already loaded onnxruntime from {}",
                rt.library.display()
            ),
        });
    }
    let load_err = |reason: String| PolicyLoadError::RuntimeLoad {
        path: path.to_path_buf(),
        reason,
    };
    let builder = ort::init_from(path).map_err(|e| load_err(e.to_string()))?;
    let env = builder
        .with_name("ccp-agent")
        .with_telemetry(false)
        .build()
        .map_err(|e| load_err(e.to_string()))?;
    let rt = Runtime {
        library: path.to_path_buf(),
        build_info: ort::info().to_string(),
        env,
    };
    Ok(RUNTIME.get_or_init(|| rt))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Where the library is, per the module docs' order (without loading it).
pub fn find_library(models_dir: Option<&Path>) -> Result<PathBuf, PolicyLoadError> {
    if let Some(p) = std::env::var_os(DYLIB_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(PolicyLoadError::RuntimeMissing {
            detail: format!("{DYLIB_ENV}={} does not exist", p.display()),
        });
    }
    find_in_venv(models_dir)
}

/// The library in the repository's virtualenv (step 3 of the module docs' order, whether or
/// not `ORT_DYLIB_PATH` is set).
pub fn find_in_venv(models_dir: Option<&Path>) -> Result<PathBuf, PolicyLoadError> {
    let mut starts: Vec<PathBuf> = Vec::new();
    if let Some(d) = models_dir {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        starts.push(d.parent().map(Path::to_path_buf).unwrap_or(d));
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        starts.push(dir);
    }
    let mut searched: Vec<PathBuf> = Vec::new();
    for start in &starts {
        for dir in start.ancestors() {
            if searched.iter().any(|s| s == dir) {
                continue;
            }
            searched.push(dir.to_path_buf());
            if let Some(lib) = venv_library(&dir.join(".venv")) {
                return Ok(lib);
            }
        }
    }
    Err(PolicyLoadError::RuntimeMissing {
        detail: format!(
            "{DYLIB_ENV} is not set and no .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so* \
             was found above {}",
            starts
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// `venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*`, newest name last.
fn venv_library(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    let mut found: Vec<PathBuf> = Vec::new();
    for py in std::fs::read_dir(&lib).ok()?.flatten() {
        if !py.file_name().to_string_lossy().starts_with("python3") {
            continue;
        }
        let capi = py.path().join("site-packages/onnxruntime/capi");
        let Ok(entries) = std::fs::read_dir(&capi) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libonnxruntime.so") && e.path().is_file() {
                found.push(e.path());
            }
        }
    }
    found.sort();
    found.pop()
}
