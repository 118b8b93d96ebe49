//! `cargo xtask test`: the README's one test command. It sets up what the tests need and runs
//! every test with those services required, so none of them skips:
//!
//! 1. a virtual environment `target/test-venv` with the PyPI packages the tests' witnesses use
//!    ([`PYPI_PACKAGES`]) and, when the crate is in the tree, the `gridkey` Python package built
//!    from `crates/gridkey-python` (once per source state, `py::install_wheel_once`); made with a
//!    CPython 3.12 or later where one is found, with GT4Py 1.2.3 and its gtfn_cpu build
//!    dependencies, so that the GT4Py adapter's tests run (required: `GRIDKEY_TEST_REQUIRE=gt4py`),
//!    else with `python3`, saying that they skip;
//! 2. a Redis server (`redis-server`, Debian's package, installed with `apt-get` when missing,
//!    `redis_server.rs`) on a private loopback port, with its data in a temp directory, stopped at
//!    the end whatever happened;
//! 3. `cargo test --workspace` with `GRIDKEY_TEST_PYTHON` (the venv's interpreter),
//!    `GRIDKEY_TEST_REDIS_URL` and `GRIDKEY_TEST_REQUIRE` (the services that must be present: a
//!    test that finds one missing fails instead of saying it skipped);
//! 4. the Python package's pytest suite, when the package is in the tree, with the environment's
//!    `bin` (cmake, ninja) first on `PATH`;
//! 5. its type checks (`py::type_check`): `python -m mypy.stubtest gridkey._gridkey`, the stub
//!    `_gridkey.pyi` against the built module, and `mypy --strict` over the package and its tests.
//!
//! Each step's wall time is printed at the end. Under a plain `cargo test --workspace` the same
//! tests say that they skipped, and name this command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// PyPI packages of the test environment: numpy (stored tables read back), xxhash (the key and
/// digest witnesses), pytest and hypothesis (the Python package's tests), maturin (its build),
/// netCDF4 (the witness of netCDF-4 grid reading), mypy (the stub check and `mypy --strict` of the package).
pub const PYPI_PACKAGES: &[&str] = &["numpy", "xxhash", "pytest", "hypothesis", "maturin", "netCDF4", "mypy"];

/// A step and how long it took.
struct Timings(Vec<(String, Duration)>);

impl Timings {
    fn step<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        eprintln!("xtask test: {name}");
        let t = Instant::now();
        let out = f();
        self.0.push((name.to_owned(), t.elapsed()));
        out
    }

    fn print(&self) {
        println!("\nxtask test: timings");
        for (name, d) in &self.0 {
            println!("  {:>8.1} s  {name}", d.as_secs_f64());
        }
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// The test virtual environment's interpreter, creating the environment when needed, and whether it runs GT4Py.
///
/// The environment is made with a CPython 3.12 or later where one is found (`crate::gt4py::find_python`:
/// `python3.13`, `python3.12`, `python3` on `PATH`, then `~/.pyenv/versions`), so that GT4Py 1.2.3 and its gtfn_cpu
/// build dependencies are installed and the adapter's tests run; an older environment is then made anew. Without
/// one, `python3` as before, and the command says that the GT4Py tests skip.
fn venv(root: &Path, target: &Path) -> Result<(PathBuf, bool)> {
    let dir = target.join("test-venv");
    let python = dir.join("bin").join("python");
    let wanted = crate::gt4py::find_python(None).ok();
    let existing = crate::gt4py::python_version(&python);
    if let (Some(found), Some((_, version))) = (existing, &wanted) {
        if found < crate::gt4py::MIN_PYTHON {
            eprintln!(
                "xtask test: {} runs Python {}.{}; making it anew with Python {}.{} for GT4Py",
                dir.display(),
                found.0,
                found.1,
                version.0,
                version.1
            );
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove {}", dir.display()))?;
        }
    }
    if !python.is_file() {
        let interpreter = match &wanted {
            Some((interpreter, _)) => interpreter.clone(),
            None => {
                eprintln!(
                    "xtask test: no CPython 3.12 or later (python3.12, python3.13 on PATH, ~/.pyenv/versions/3.12+): \
                     the test environment uses python3 and the GT4Py adapter's tests skip"
                );
                PathBuf::from("python3")
            }
        };
        run(Command::new(interpreter).args(["-m", "venv"]).arg(&dir))?;
    }
    run(Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(PYPI_PACKAGES))?;
    let gt4py = crate::gt4py::python_version(&python).is_some_and(|v| v >= crate::gt4py::MIN_PYTHON);
    if gt4py {
        crate::gt4py::install_gt4py(&python, root)?;
    }
    if root.join("crates/gridkey-python").join("pyproject.toml").is_file() {
        crate::py::install_wheel_once(&dir, root)?;
    }
    Ok((python, gt4py))
}

/// `cargo xtask test`: see the module documentation. Returns whether every step passed.
///
/// Errors: a service that cannot be set up (no `python3 -m venv`, no `redis-server` and no
/// `apt-get` to install it).
pub fn test(root: &Path, target: &Path) -> Result<bool> {
    let mut timings = Timings(Vec::new());
    let (python, gt4py) = timings.step("virtual environment with the test packages", || venv(root, target))?;
    let redis = timings.step("Redis on a private port", || {
        let binary = crate::redis_server::ensure_installed()?;
        Ok((crate::redis_server::RedisServer::start(&binary, None)?, binary))
    })?;
    let (redis, redis_binary) = redis;
    let mut require = vec!["numpy", "redis", "netcdf4"];
    let package = root.join("crates/gridkey-python").join("pyproject.toml").is_file();
    if package {
        require.push("gridkey-python");
    }
    let rust = timings.step("cargo test --workspace", || {
        Ok(xtask_common::cargo()
            .args(["test", "--workspace", "--no-fail-fast"])
            .current_dir(root)
            .env("GRIDKEY_TEST_PYTHON", &python)
            .env(crate::redis_server::TEST_URL_VAR, redis.url())
            .env(crate::redis_server::TEST_SERVER_VAR, &redis_binary)
            .env("GRIDKEY_TEST_REQUIRE", require.join(","))
            .status()?
            .success())
    })?;
    let py = if package {
        timings.step("pytest crates/gridkey-python/tests", || {
            let bin = python.parent().context("the interpreter has a directory")?;
            let mut pytest = Command::new(&python);
            pytest
                // The slowest tests' times, so that a log says where the time went.
                .args(["-m", "pytest", "-q", "--durations=12", "crates/gridkey-python/tests"])
                .current_dir(root)
                .env(crate::redis_server::TEST_URL_VAR, redis.url())
                // cmake and ninja of the environment, for the GT4Py tests' C++ build
                .env("PATH", crate::gt4py::prepend_path(bin));
            if gt4py {
                pytest.env("GRIDKEY_TEST_REQUIRE", "gt4py");
            }
            Ok(pytest.status()?.success())
        })?
    } else {
        true
    };
    drop(redis);
    let typed = if package {
        let stubtest = timings.step("mypy.stubtest gridkey._gridkey", || {
            crate::py::type_check(&python, root, crate::py::TypeCheck::Stubtest)
        })?;
        let strict = timings.step("mypy --strict python/gridkey tests", || {
            crate::py::type_check(&python, root, crate::py::TypeCheck::Strict)
        })?;
        stubtest && strict
    } else {
        true
    };
    timings.print();
    println!("xtask test: Rust tests {}, Python tests {}, type checks {}", verdict(rust), verdict(py), verdict(typed));
    Ok(rust && py && typed)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "passed"
    } else {
        "FAILED"
    }
}
