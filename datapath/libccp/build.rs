//! Compiles libccp's C sources from the `libccp` 1.2 crate's package directory, with the
//! project's patch (`datapath/libccp/libccp-1.2.0.patch`, the one the kernel module's build
//! applies too: the same fold-program machine in both datapaths), and generates Rust
//! bindings for `ccp.h`. The sources are copied into `OUT_DIR/libccp` and patched there with
//! `patch(1)`; a patch that does not apply stops the build.
//!
//! Why not link the `libccp` crate itself: its Rust wrapper hard-wires the datapath clock to
//! the wall clock, mallocs (does not zero) the connection table and reports every send as a
//! success. The simulator needs a simulated clock (and the BPF bridge the datapath's), so this
//! crate compiles the same C files (the ones the kernel module compiles) and supplies its own
//! callbacks (`src/datapath.rs`). The crate is a build-dependency only so that cargo downloads
//! it before this script runs.
//!
//! Locating the sources, in order:
//! 1. `CCP_LIBCCP_DIR` (a directory holding `ccp.c`, `ccp.h`, ...), if set;
//! 2. `$CARGO metadata --format-version 1 --frozen`: package `libccp` 1.2.x, its manifest
//!    directory + `libccp/`;
//! 3. `$CARGO_HOME/registry/src/*/libccp-1.2.*/libccp` (highest patch version).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const C_FILES: [&str; 4] = ["ccp.c", "ccp_priv.c", "machine.c", "serialize.c"];
const H_FILES: [&str; 5] = [
    "ccp.h",
    "ccp_priv.h",
    "serialize.h",
    "types.h",
    "ccp_error.h",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CCP_LIBCCP_DIR");
    println!("cargo:rerun-if-env-changed=CARGO_HOME");

    let (dir, how) = match locate_libccp() {
        Ok(d) => d,
        Err(why) => {
            eprintln!(
                "error: ccp-libccp could not find libccp 1.2's C sources: {why}\n\
                 fix: run `cargo fetch` in the workspace (the `libccp` crate is a \
                 build-dependency of ccp-libccp so cargo downloads it), or set \
                 CCP_LIBCCP_DIR to a directory containing ccp.c, ccp.h, machine.c, \
                 serialize.c and ccp_priv.c"
            );
            std::process::exit(1);
        }
    };
    for f in C_FILES.iter().chain(H_FILES.iter()) {
        println!("cargo:rerun-if-changed={}", dir.join(f).display());
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let patch = manifest_dir.join("libccp-1.2.0.patch");
    println!("cargo:rerun-if-changed={}", patch.display());
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let patched = match patched_copy(&dir, &patch, &out) {
        Ok(d) => d,
        Err(why) => {
            eprintln!(
                "error: ccp-libccp could not patch libccp's sources from {}: {why}\n\
                 fix: install patch(1) (Debian: apt-get install patch); if the sources are \
                 not libccp 1.2.0's, point CCP_LIBCCP_DIR at libccp 1.2.0",
                dir.display()
            );
            std::process::exit(1);
        }
    };
    // where the C came from, for `ccp_libccp::LIBCCP_SOURCE_DIR` and its test
    println!("cargo:rustc-env=CCP_LIBCCP_DIR_USED={}", dir.display());
    println!("cargo:rustc-env=CCP_LIBCCP_FOUND_BY={how}");

    let dir = patched;
    let mut build = cc::Build::new();
    build
        .include(&dir)
        .opt_level(2)
        .flag("-std=gnu99")
        .flag("-Wno-declaration-after-statement")
        .flag("-fgnu89-inline")
        // warn and error messages only (info/debug/trace compiled out); they reach the
        // datapath's log callback, which forwards them to `tracing`.
        .define("__LOG_WARN__", None)
        .warnings(false)
        .cargo_warnings(false);
    for f in C_FILES {
        build.file(dir.join(f));
    }
    build.compile("ccpsim_libccp");

    let bindings = bindgen::Builder::default()
        .header(dir.join("ccp.h").to_string_lossy())
        .clang_arg(format!("-I{}", dir.display()))
        .allowlist_function(
            "ccp_(init|free|connection_start|connection_free|connection_lookup|read_msg|invoke)",
        )
        .allowlist_type("ccp_(primitives|datapath_info|connection|datapath|log_level)")
        .allowlist_var("LIBCCP_.*")
        .allowlist_var("MAX_CONG_ALG_SIZE")
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!(
                "error: bindgen failed on {}: {e}\nfix: install libclang (Debian: apt-get \
                 install libclang-dev) or point LIBCLANG_PATH at it",
                dir.join("ccp.h").display()
            );
            std::process::exit(1);
        });
    bindings
        .write_to_file(out.join("libccp_bindings.rs"))
        .expect("writing bindings into OUT_DIR");
}

/// Copy libccp's sources from `src` into `out/libccp` and apply `patch` there (`patch -p1`
/// from `out`: the patch's paths are `libccp/<file>`); the patched folder.
fn patched_copy(src: &Path, patch: &Path, out: &Path) -> Result<PathBuf, String> {
    let dst = out.join("libccp");
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    for f in C_FILES.iter().chain(H_FILES.iter()) {
        std::fs::copy(src.join(f), dst.join(f)).map_err(|e| format!("copying {f}: {e}"))?;
    }
    let input = std::fs::File::open(patch).map_err(|e| format!("{}: {e}", patch.display()))?;
    let r = Command::new("patch")
        .args([
            "-p1",
            "--forward",
            "--batch",
            "--no-backup-if-mismatch",
            "-d",
        ])
        .arg(out)
        .stdin(input)
        .output()
        .map_err(|e| format!("could not run patch: {e}"))?;
    if !r.status.success() {
        return Err(format!(
            "{} does not apply ({}): {}{}",
            patch.display(),
            r.status,
            String::from_utf8_lossy(&r.stdout).trim(),
            String::from_utf8_lossy(&r.stderr).trim()
        ));
    }
    Ok(dst)
}

fn has_sources(d: &Path) -> bool {
    C_FILES
        .iter()
        .chain(H_FILES.iter())
        .all(|f| d.join(f).is_file())
}

fn locate_libccp() -> Result<(PathBuf, &'static str), String> {
    let mut tried = Vec::new();
    if let Some(d) = env::var_os("CCP_LIBCCP_DIR") {
        let d = PathBuf::from(d);
        if has_sources(&d) {
            return Ok((d, "CCP_LIBCCP_DIR"));
        }
        return Err(format!(
            "CCP_LIBCCP_DIR={} does not contain the libccp C sources",
            d.display()
        ));
    }
    match from_metadata() {
        Ok(d) if has_sources(&d) => return Ok((d, "cargo metadata")),
        Ok(d) => tried.push(format!("cargo metadata pointed at {}", d.display())),
        Err(e) => tried.push(format!("cargo metadata: {e}")),
    }
    match from_registry_glob() {
        Ok(d) => return Ok((d, "registry glob")),
        Err(e) => tried.push(e),
    }
    Err(tried.join("; "))
}

fn from_metadata() -> Result<PathBuf, String> {
    let cargo = env::var_os("CARGO").ok_or("CARGO is not set")?;
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR unset")?;
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--frozen"])
        .arg("--manifest-path")
        .arg(Path::new(&manifest_dir).join("Cargo.toml"))
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("bad JSON: {e}"))?;
    let pkgs = v["packages"].as_array().ok_or("no packages array")?;
    let mut best: Option<(u64, PathBuf)> = None;
    for p in pkgs {
        if p["name"] != "libccp" {
            continue;
        }
        let ver = p["version"].as_str().unwrap_or("");
        let Some(patch) = ver.strip_prefix("1.2.") else {
            continue;
        };
        let patch: u64 = patch
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let Some(manifest) = p["manifest_path"].as_str() else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .ok_or("manifest_path has no parent")?
            .join("libccp");
        if best.as_ref().is_none_or(|(b, _)| patch > *b) {
            best = Some((patch, dir));
        }
    }
    best.map(|(_, d)| d)
        .ok_or_else(|| "no package libccp 1.2.x in the metadata".to_string())
}

fn from_registry_glob() -> Result<PathBuf, String> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let src = home.join("registry").join("src");
    let mut best: Option<(u64, PathBuf)> = None;
    let indices = std::fs::read_dir(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    for index in indices.flatten() {
        let Ok(crates) = std::fs::read_dir(index.path()) else {
            continue;
        };
        for c in crates.flatten() {
            let name = c.file_name().to_string_lossy().into_owned();
            let Some(patch) = name.strip_prefix("libccp-1.2.") else {
                continue;
            };
            let Ok(patch) = patch.parse::<u64>() else {
                continue;
            };
            let dir = c.path().join("libccp");
            if has_sources(&dir) && best.as_ref().is_none_or(|(b, _)| patch > *b) {
                best = Some((patch, dir));
            }
        }
    }
    best.map(|(_, d)| d)
        .ok_or_else(|| format!("no libccp-1.2.* with C sources under {}", src.display()))
}
