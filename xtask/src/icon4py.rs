//! `cargo xtask gt4py --icon4py [--python PYTHON]`: icon4py as the client of the GT4Py proof (README "gridkey for
//! GT4Py").
//!
//! 1. Creates the virtual environment `target/icon4py-venv` (kept between runs) with a CPython 3.12 or later (icon4py
//!    0.4.1 requires it), found as `cargo xtask gt4py` finds one.
//! 2. Installs icon4py 0.4.1 from PyPI (`icon4py-atmosphere-diffusion`, `icon4py-atmosphere-dycore`, `icon4py-common`)
//!    with the GT4Py it pins (1.2.1, which brings DaCe), what the gtfn_cpu backend builds with, what icon4py's grid
//!    manager imports without declaring it (netCDF4, xarray) and pytest with the gridkey test dependencies.
//! 3. Builds and installs the `gridkey` wheel, then runs the adapter's tests (`tests/test_gt4py_adapter.py`) on this
//!    GT4Py 1.2.1, as `cargo xtask py-test` runs them on 1.2.3.
//! 4. Starts a private `redis-server` (the one `cargo xtask with-redis` starts) and runs
//!    `crates/gridkey-python/proof/icon4py_proof.py --dace --redis URL` on the shipped ICON R02B04 grid: the cells, the
//!    warm starts, the DaCe cells, and icon4py's programs in N ranks on one cache and in 4 nodes sharing that server;
//!    scratch caches under `target/gt4py-proof/icon4py`, results in `target/gt4py-proof/icon4py-proof.json`.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::gt4py::{find_python, prepend_path, python_version, run, BACKEND_DEPS, MIN_PYTHON};

/// icon4py's packages of the proof, and the GT4Py release icon4py 0.4.1 pins.
const ICON4PY: [&str; 4] = [
    "icon4py-atmosphere-diffusion==0.4.1",
    "icon4py-atmosphere-dycore==0.4.1",
    "icon4py-common==0.4.1",
    "gt4py==1.2.1",
];
/// What icon4py's grid manager imports (its `io` extra, without the plotting and partitioning packages it also lists)
/// and the test runner of the adapter's tests with gridkey's test extras. With [`BACKEND_DEPS`] (the gtfn_cpu build
/// dependencies, and SciPy, the netCDF reader of the adapter's tests and the proof) it is all that is installed
/// beside icon4py.
const EXTRA_DEPS: [&str; 5] = ["netCDF4", "xarray>=2024.10.0,<2026.4", "pytest", "hypothesis", "xxhash"];

/// Runs the icon4py proof; `python` is the interpreter that creates the environment when it does not exist.
pub fn icon4py(python: Option<std::path::PathBuf>) -> Result<bool> {
    let root = crate::root();
    let target = crate::target_dir();
    let venv = target.join("icon4py-venv");
    let venv_python = venv.join("bin").join("python");
    if !venv_python.is_file() {
        let (interpreter, (major, minor)) = find_python(python)?;
        println!("icon4py: creating {} with {} (Python {major}.{minor})", venv.display(), interpreter.display());
        run(Command::new(&interpreter).args(["-m", "venv"]).arg(&venv), "creating the virtual environment")?;
    }
    match python_version(&venv_python) {
        Some((major, minor)) if (major, minor) >= MIN_PYTHON => {
            println!("icon4py: virtual environment {} (Python {major}.{minor})", venv.display())
        }
        found => bail!(
            "the virtual environment {} runs {}, not a CPython 3.12 or later: remove it and run again",
            venv.display(),
            found.map_or("no Python".to_owned(), |(a, b)| format!("Python {a}.{b}"))
        ),
    }
    let pip = |what: &str, args: &[&str]| -> Result<()> {
        let mut command = Command::new(&venv_python);
        command.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(args);
        run(command.current_dir(&root), what)
    };
    pip(
        "installing icon4py 0.4.1, GT4Py 1.2.1 and their build and test dependencies",
        &[&ICON4PY[..], &BACKEND_DEPS[..], &EXTRA_DEPS[..]].concat(),
    )?;
    // --force-reinstall: the wheel of this checkout, not one pip cached under the same version.
    pip("building and installing the gridkey wheel", &["--force-reinstall", "--no-deps", "./crates/gridkey-python"])?;

    let path = prepend_path(&venv.join("bin"));
    let mut tests = Command::new(&venv_python);
    tests
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gt4py_adapter.py"])
        .env("PATH", &path)
        .current_dir(root.join("crates/gridkey-python"));
    clean_env(&mut tests);
    run(&mut tests, "the adapter's tests on GT4Py 1.2.1")?;

    let work = target.join("gt4py-proof");
    let mut command = Command::new(&venv_python);
    command
        .arg(root.join("crates/gridkey-python/proof/icon4py_proof.py"))
        .arg("--grid")
        .arg(root.join(gridkey::SHIPPED_GRID))
        .arg("--work")
        .arg(work.join("icon4py"))
        .arg("--json")
        .arg(work.join("icon4py-proof.json"))
        .arg("--dace")
        .env("PATH", &path)
        .current_dir(&root);
    clean_env(&mut command);
    // The server lives until the proof is done.
    let server = crate::redis_server::RedisServer::start(&crate::redis_server::ensure_installed()?, None)?;
    println!("icon4py: redis-server on {} for the N nodes", server.url());
    command.arg("--redis").arg(server.url());
    let status = command.status().context("cannot run the icon4py proof script")?;
    drop(server);
    Ok(status.success())
}

/// Neither gridkey's variables nor GT4Py's reach the child: each run of the proof sets its own.
fn clean_env(command: &mut Command) {
    for var in gridkey::environment() {
        command.env_remove(var);
    }
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| v.starts_with("GT4PY_")) {
            command.env_remove(var);
        }
    }
}
