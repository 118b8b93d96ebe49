//! `cargo xtask gt4py [--reduced | --warm-only REPEATS | --icon4py | --nodes N [--redis]] [--python PYTHON]`: the proof on GT4Py itself (README "gridkey for GT4Py");
//! `--nodes N` runs `gt4py_nodes.py` instead (N nodes sharing GT4Py's builds through gridkey's store, in `target/gt4py-nodes`);
//! `--redis` makes them share a private `redis-server` instead (ADR 0041), with the figures in `target/gt4py-nodes.json`.
//!
//! 1. Uses the test command's environment `target/test-venv` when it runs a CPython 3.12 or later and no `--python`
//!    is given (`cargo xtask test` installs GT4Py there); else creates `target/gt4py-venv` (kept between runs) with a
//!    CPython 3.12 or later (GT4Py 1.2.3 requires it): `--python`, else `python3.13`, `python3.12`, `python3` on
//!    `PATH`, else the newest under `~/.pyenv/versions`; fails naming every candidate tried. An existing environment
//!    is kept whatever `--python` says.
//! 2. Installs `gt4py==1.2.3` and what its `gtfn_cpu` backend needs (cmake, ninja, nanobind, gridtools-cpp) and
//!    SciPy (the netCDF reader) from PyPI (nothing when they are there).
//! 3. Builds and installs the `gridkey` wheel (`pip install ./crates/gridkey-python`) unless the environment holds
//!    the wheel of these sources already (`crate::py::install_wheel_once`: the test command's, in CI).
//! 4. Runs `crates/gridkey-python/proof/gt4py_proof.py` on the shipped ICON R02B04 grid, scratch caches under
//!    `target/gt4py-proof` (results in `target/gt4py-proof/gt4py-proof.json`): the mode matrix without and with
//!    `gridkey.gt4py` (full: C and Fortran order, both allocators, the nine ordered pairs of modes; `--reduced`:
//!    three programs, C-order `np` tables, serial -> process, process -> serial and the control serial -> thread; N = 4 ranks only), the C++ identity, one
//!    key's cost at R02B04 and tiled 100x, and the warm starts.
//!
//! `--icon4py`: icon4py 0.4.1's own programs on GT4Py 1.2.1 in their own environment instead (`icon4py.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The GT4Py release the adapter and the proof are written for.
pub const GT4PY: &str = "gt4py==1.2.3";
/// What GT4Py's gtfn_cpu backend builds with, and the netCDF reader of the proof.
pub const BACKEND_DEPS: [&str; 5] = ["cmake", "ninja", "nanobind", "gridtools-cpp", "scipy"];
/// The oldest CPython GT4Py 1.2.3 runs on.
pub const MIN_PYTHON: (u32, u32) = (3, 12);

pub fn gt4py(args: &[String]) -> Result<bool> {
    let mut reduced = false;
    let mut warm_only: Option<String> = None;
    let mut python: Option<PathBuf> = None;
    let mut nodes: Option<String> = None;
    let mut icon4py = false;
    let mut redis = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--reduced" => reduced = true,
            "--icon4py" => icon4py = true,
            "--redis" => redis = true,
            "--warm-only" => warm_only = Some(it.next().context("--warm-only needs a number of repeats")?.clone()),
            "--python" => python = Some(PathBuf::from(it.next().context("--python needs an interpreter path")?)),
            "--nodes" => nodes = Some(it.next().context("--nodes needs a number of nodes")?.clone()),
            other => {
                bail!(
                    "unexpected argument {other:?}: expected [--reduced | --warm-only REPEATS | --icon4py | --nodes N [--redis]] [--python PYTHON]"
                )
            }
        }
    }
    if icon4py {
        return crate::icon4py::icon4py(python);
    }
    if redis && nodes.is_none() {
        bail!("--redis shares the Redis tier between nodes: give --nodes N too");
    }
    let root = crate::root();
    let target = crate::target_dir();
    // The test command's environment, when it runs a CPython 3.12 or later, holds GT4Py and the wheel of this
    // checkout already (its stamp says which sources it was built from): reused, one wheel build less in CI.
    let test_venv = target.join("test-venv");
    let reuse =
        python.is_none() && python_version(&test_venv.join("bin").join("python")).is_some_and(|v| v >= MIN_PYTHON);
    let venv = if reuse { test_venv } else { target.join("gt4py-venv") };
    let venv_python = venv.join("bin").join("python");
    if !venv_python.is_file() {
        let (interpreter, (major, minor)) = find_python(python)?;
        println!("gt4py: creating {} with {} (Python {major}.{minor})", venv.display(), interpreter.display());
        run(Command::new(&interpreter).args(["-m", "venv"]).arg(&venv), "creating the virtual environment")?;
    }
    match python_version(&venv_python) {
        Some((major, minor)) if (major, minor) >= MIN_PYTHON => {
            println!("gt4py: virtual environment {} (Python {major}.{minor})", venv.display())
        }
        found => bail!(
            "the virtual environment {} runs {}, not a CPython 3.12 or later: remove it and run again",
            venv.display(),
            found.map_or("no Python".to_owned(), |(a, b)| format!("Python {a}.{b}"))
        ),
    }
    install_gt4py(&venv_python, &root)?;
    crate::py::install_wheel_once(&venv, &root)?;

    let grid = root.join(gridkey::SHIPPED_GRID);
    let work = target.join("gt4py-proof");
    let mut command = Command::new(&venv_python);
    // --nodes N: GT4Py's builds shared by N nodes through gridkey's store (gt4py_nodes.py), not the mode matrix.
    let (script, work) = match &nodes {
        Some(_) => ("crates/gridkey-python/proof/gt4py_nodes.py", target.join("gt4py-nodes")),
        None => ("crates/gridkey-python/proof/gt4py_proof.py", work),
    };
    command
        .arg(root.join(script))
        .arg("--grid")
        .arg(&grid)
        .arg("--work")
        .arg(&work)
        .env("PATH", prepend_path(&venv.join("bin")))
        .current_dir(&root);
    for var in gridkey::environment() {
        command.env_remove(var);
    }
    // The server lives until the proof is done (dropped at the end of this function).
    let mut server = None;
    if let Some(n) = &nodes {
        let _ = std::fs::remove_dir_all(&work);
        command.args(["--nodes", n]);
        if redis {
            let started = crate::redis_server::RedisServer::start(&crate::redis_server::ensure_installed()?, None)?;
            println!("gt4py: redis-server on {} for the nodes", started.url());
            command.arg("--redis").arg(started.url()).arg("--json").arg(target.join("gt4py-nodes.json"));
            server = Some(started);
        }
    } else if reduced {
        command.arg("--reduced");
    }
    if let Some(repeats) = &warm_only {
        command.args(["--warm-only", "--warm-repeats", repeats]);
    }
    let status = command.status().context("cannot run the GT4Py proof script")?;
    drop(server);
    Ok(status.success())
}

/// Installs GT4Py and what its gtfn_cpu backend builds with into the environment of `venv_python` (pip does nothing
/// for what is there already).
///
/// Errors: a failed `pip install`.
pub fn install_gt4py(venv_python: &Path, root: &Path) -> Result<()> {
    let mut command = Command::new(venv_python);
    command.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", GT4PY]).args(BACKEND_DEPS);
    run(command.current_dir(root), "installing GT4Py and its gtfn_cpu build dependencies")
}

/// The first CPython >= 3.12 among the candidates, with its version.
pub fn find_python(given: Option<PathBuf>) -> Result<(PathBuf, (u32, u32))> {
    let candidates: Vec<PathBuf> = match given {
        Some(p) => vec![p],
        None => {
            let mut c: Vec<PathBuf> = ["python3.13", "python3.12", "python3"].iter().map(PathBuf::from).collect();
            c.extend(pyenv_pythons().into_iter().filter(|p| p.is_file()));
            c
        }
    };
    let mut tried = Vec::new();
    for candidate in &candidates {
        match python_version(candidate) {
            Some(v) if v >= MIN_PYTHON => return Ok((candidate.clone(), v)),
            Some((major, minor)) => tried.push(format!("{} (Python {major}.{minor})", candidate.display())),
            None => tried.push(format!("{} (not found)", candidate.display())),
        }
    }
    bail!(
        "no CPython 3.12 or later found, which GT4Py 1.2.3 requires; tried {}: install one (for example `pyenv install \
         3.12`) or pass --python /path/to/python3.12",
        tried.join(", ")
    )
}

/// `~/.pyenv/versions/3.*/bin/python`, newest first.
fn pyenv_pythons() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME") else { return Vec::new() };
    let versions = Path::new(&home).join(".pyenv").join("versions");
    let Ok(entries) = std::fs::read_dir(&versions) else { return Vec::new() };
    let mut found: Vec<((u32, u32, u32), PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let mut parts = name.split('.').map(|p| p.parse::<u32>().ok());
            let version = (parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0));
            Some((version, e.path().join("bin").join("python")))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, p)| p).collect()
}

/// `(major, minor)` of a Python interpreter, or None when it does not run.
pub fn python_version(python: &Path) -> Option<(u32, u32)> {
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.version_info[0], sys.version_info[1], sys.implementation.name)"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut words = text.split_whitespace();
    let version = (words.next()?.parse().ok()?, words.next()?.parse().ok()?);
    (words.next()? == "cpython").then_some(version)
}

pub fn prepend_path(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).expect("PATH entries hold no separator")
}

pub(crate) fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command.status().with_context(|| format!("{what}: cannot start {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{what} failed ({status}): see the output above");
    }
    Ok(())
}
