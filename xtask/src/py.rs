//! The Python package: `cargo xtask py-test` and `cargo xtask py-bench`.
//!
//! Both make a virtual environment (`target/py-venv`, or `target/py-venv-X.Y` for another
//! interpreter), install the test tools and `pip install ./crates/gridkey-python` into it (the
//! command a user types: maturin builds the abi3 wheel through pip), and run with gridkey's
//! environment variables cleared.
//!
//! `py-test [--python PYTHON] [--fresh]` runs the pytest suite of `crates/gridkey-python/tests`.
//! `py-bench [--python PYTHON] [--quick]` runs `crates/gridkey-python/bench/py_bench.py` and,
//! in the same run, the Rust `digest_table` on the same table file, and prints each case
//! against its peer; it writes `target/gridkey-py-bench.json`.
//!
//! [`py_test`] is what the test command calls.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gridkey_digest::digest_table;
use ndarray::Array2;
use ndarray_npy::ReadNpyExt;
use serde_json::{json, Value};

/// What the package's tests and benchmarks need besides the package itself.
const TOOLS: &[&str] = &["maturin>=1.9,<2", "numpy", "pytest", "hypothesis", "xxhash", "netCDF4", "mypy"];

/// Options of both commands.
struct PyArgs {
    python: PathBuf,
    fresh: bool,
    quick: bool,
}

fn parse(args: &[String], allowed: &[&str]) -> Result<PyArgs> {
    let mut out = PyArgs { python: PathBuf::from("python3"), fresh: false, quick: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--python" if allowed.contains(&"--python") => {
                out.python = PathBuf::from(it.next().context("--python needs an interpreter")?);
            }
            "--fresh" if allowed.contains(&"--fresh") => out.fresh = true,
            "--quick" if allowed.contains(&"--quick") => out.quick = true,
            other => bail!("unexpected argument {other:?}: expected {}", allowed.join(", ")),
        }
    }
    Ok(out)
}

/// `cargo xtask py-test [--python PYTHON] [--fresh]`: Ok(true) when every test passed.
pub fn py_test_command(args: &[String]) -> Result<bool> {
    let args = parse(args, &["--python", "--fresh"])?;
    py_test(&args.python, args.fresh)
}

/// Builds and installs the package into the virtual environment of `python` (made anew with
/// `fresh`) and runs its pytest suite. Ok(true) when every test passed.
///
/// Errors: no such interpreter, one older than 3.10, a failed install.
pub fn py_test(python: &Path, fresh: bool) -> Result<bool> {
    let venv = install(python, fresh)?;
    let root = crate::root();
    let status = clean(Command::new(venv.join("bin").join("python")))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "crates/gridkey-python/tests"])
        .current_dir(&root)
        .status()
        .context("cannot run pytest")?;
    Ok(status.success())
}

/// The package's type checks with the interpreter `python` of a virtual environment where the
/// package is installed: `python -m mypy.stubtest gridkey._gridkey` (the stub
/// `python/gridkey/_gridkey.pyi` against the built module, with the allowlist
/// `stubtest-allowlist.txt` when there is one) when `what` is [`TypeCheck::Stubtest`], and
/// `python -m mypy` (`--strict` over the package and its tests, `[tool.mypy]` of its
/// `pyproject.toml`) when it is [`TypeCheck::Strict`]. Both run in `crates/gridkey-python`.
/// Ok(true) when the check is clean.
///
/// Errors: an interpreter that cannot be run.
pub fn type_check(python: &Path, root: &Path, what: TypeCheck) -> Result<bool> {
    let package = root.join("crates/gridkey-python");
    let mut cmd = clean(Command::new(python));
    cmd.current_dir(&package).env("MYPYPATH", package.join("python"));
    match what {
        TypeCheck::Stubtest => {
            cmd.args(["-m", "mypy.stubtest", "gridkey._gridkey"]);
            let allowlist = package.join("stubtest-allowlist.txt");
            if allowlist.is_file() {
                cmd.arg("--allowlist").arg(allowlist);
            }
        }
        TypeCheck::Strict => {
            cmd.args(["-m", "mypy"]);
        }
    }
    Ok(cmd.status().with_context(|| format!("cannot run {}", python.display()))?.success())
}

/// Which type check [`type_check`] runs.
#[derive(Clone, Copy, Debug)]
pub enum TypeCheck {
    /// `mypy.stubtest gridkey._gridkey`: the stub against the built module.
    Stubtest,
    /// `mypy --strict` over `python/gridkey` and `tests`.
    Strict,
}

/// A command with every variable of gridkey removed, so that the developer's settings do not
/// change what is tested or measured.
fn clean(mut cmd: Command) -> Command {
    for var in gridkey::environment() {
        cmd.env_remove(var);
    }
    // pip runs maturin, which runs cargo: the same build of the shared crates as the others.
    xtask_common::without_cargo_run_vars(&mut cmd);
    cmd
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The `X.Y` version of `python`.
fn python_version(python: &Path) -> Result<(u32, u32)> {
    let out = Command::new(python)
        .args(["-c", "import sys; print(*sys.version_info[:2])"])
        .output()
        .with_context(|| format!("cannot run {}: pass --python with a CPython 3.10 or later", python.display()))?;
    if !out.status.success() {
        bail!("{} does not run: {}", python.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok((major, minor)),
        _ => bail!("{} printed {text:?} for its version", python.display()),
    }
}

/// The virtual environment of `python` under `target/`, with the tools and the package
/// installed; made anew when `fresh` or missing.
fn install(python: &Path, fresh: bool) -> Result<PathBuf> {
    let (major, minor) = python_version(python)?;
    if (major, minor) < (3, 10) {
        bail!(
            "{} is Python {major}.{minor}; the gridkey package needs 3.10 or later (pass --python)",
            python.display()
        );
    }
    let default = python == Path::new("python3");
    let venv =
        crate::target_dir().join(if default { "py-venv".to_owned() } else { format!("py-venv-{major}.{minor}") });
    if fresh {
        let _ = std::fs::remove_dir_all(&venv);
    }
    let pip = venv.join("bin").join("pip");
    if !pip.exists() {
        eprintln!("py: creating {} with Python {major}.{minor}", venv.display());
        run(Command::new(python).arg("-m").arg("venv").arg(&venv), "create the virtual environment")?;
    }
    run(clean(Command::new(&pip)).args(["install", "-q"]).args(TOOLS), "install the test tools with pip")?;
    eprintln!("py: pip install ./crates/gridkey-python (maturin builds the wheel)");
    run(
        clean(Command::new(&pip))
            .args(["install", "-q", "--force-reinstall", "--no-deps", "./crates/gridkey-python"])
            .current_dir(crate::root()),
        "pip install ./crates/gridkey-python",
    )?;
    Ok(venv)
}

/// Name of the file in a virtual environment that says from which sources its `gridkey` wheel was built.
const WHEEL_STAMP: &str = "gridkey-wheel.stamp";

/// Builds and installs the `gridkey` wheel of this checkout into `venv` (`pip install ./crates/gridkey-python`)
/// unless the wheel installed there was built from the same sources ([`wheel_sources_digest`]), which
/// `venv/gridkey-wheel.stamp` records: the test command and `cargo xtask gt4py` then share one build.
///
/// Errors: a failed `pip install`, a source or stamp file that cannot be read or written.
pub fn install_wheel_once(venv: &Path, root: &Path) -> Result<()> {
    let digest = wheel_sources_digest(root)?;
    let stamp = venv.join(WHEEL_STAMP);
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == digest) {
        eprintln!("py: the gridkey wheel of these sources is installed in {} already", venv.display());
        return Ok(());
    }
    let _ = std::fs::remove_file(&stamp);
    eprintln!("py: pip install ./crates/gridkey-python into {} (maturin builds the wheel)", venv.display());
    run(
        clean(Command::new(venv.join("bin").join("python")))
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
            .arg("./crates/gridkey-python")
            .current_dir(root),
        "pip install ./crates/gridkey-python",
    )?;
    std::fs::write(&stamp, format!("{digest}\n")).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(())
}

/// A digest (xxh3-128, 32 hex digits) of what the wheel is built from: the workspace `Cargo.toml` and `Cargo.lock`,
/// every crate's `Cargo.toml`, `build.rs` and `src/`, and the Python package's `python/`, `pyproject.toml` and
/// `README.md`, each file by its path relative to the root and its bytes, in sorted order.
///
/// Errors: a file or directory that cannot be read.
pub fn wheel_sources_digest(root: &Path) -> Result<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    walk(&path, out)?;
                }
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    for entry in std::fs::read_dir(root.join("crates"))? {
        let krate = entry?.path();
        for name in ["Cargo.toml", "build.rs", "pyproject.toml", "README.md"] {
            if krate.join(name).is_file() {
                files.push(krate.join(name));
            }
        }
        for dir in ["src", "python"] {
            if krate.join(dir).is_dir() {
                walk(&krate.join(dir), &mut files)?;
            }
        }
    }
    files.sort();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for file in &files {
        let relative = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
        let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        hasher.update(&(relative.len() as u64).to_le_bytes());
        hasher.update(relative.as_bytes());
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(format!("{:032x}", hasher.digest128()))
}

/// `cargo xtask py-bench [--python PYTHON] [--quick]`.
pub fn py_bench(args: &[String]) -> Result<bool> {
    let args = parse(args, &["--python", "--quick"])?;
    let venv = install(&args.python, false)?;
    let python = venv.join("bin").join("python");
    let root = crate::root();
    let script = root.join("crates/gridkey-python/bench/py_bench.py");
    let target = crate::target_dir();
    let scratch = target.join("py-bench-scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let table_path = scratch.join("table.npy");
    let out_path = scratch.join("python.json");
    let started = Instant::now();
    eprintln!("py-bench: writing the 240 MB table");
    run(clean(Command::new(&python)).arg(&script).arg("make-table").arg(&table_path), "write the table")?;
    let table = Array2::<i32>::read_npy(std::fs::File::open(&table_path)?).context("read the table back")?;
    let reps = if args.quick { 5 } else { 9 };
    eprintln!("py-bench: Rust digest_table and gridkey.table_digest, interleaved call by call");
    let (rust, python_interleaved, python_digest) = interleaved_digests(&python, &script, &table_path, &table, reps)?;
    let rust_digest = digest_table(table.view()).to_hex();
    let bytes = table.len() * 4;
    drop(table);
    eprintln!("py-bench: the Python cases");
    let grid = root.join(gridkey::SHIPPED_GRID);
    let mut measure = clean(Command::new(&python));
    measure.arg(&script).arg("measure").arg(&table_path).arg(&grid).arg(scratch.join("stores")).arg(&out_path);
    if args.quick {
        measure.arg("--quick");
    }
    run(&mut measure, "run the Python benchmark")?;
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&out_path)?)?;
    let rust_seconds = median(rust.clone());
    let gk = median(python_interleaved.clone());
    let cases = doc["cases"].as_array_mut().context("cases")?;
    let c = cases.iter_mut().find(|c| c["name"] == "digest_c_py").context("digest_c_py")?;
    c["interleaved_with_rust_seconds"] = json!(gk);
    c["interleaved_with_rust_all_seconds"] = json!(python_interleaved);
    c["interleaved_with_rust_gb_per_s"] = json!(bytes as f64 / gk / 1e9);
    c["rust_digest_table_seconds"] = json!(rust_seconds);
    c["rust_digest_table_gb_per_s"] = json!(bytes as f64 / rust_seconds / 1e9);
    c["rust_digest_table_all_seconds"] = json!(rust);
    c["rust_same_digest"] = json!(c["digest"] == rust_digest.as_str() && python_digest == rust_digest);
    c["ratio_vs_rust"] = json!(rust_seconds / gk);
    c["ratio_vs_rust_means"] = json!("throughput of gridkey.table_digest / Rust digest_table of the same table, each in its own process, interleaved call by call (medians)");
    c["goal_vs_rust"] = json!(">= 0.9");
    doc["command"] = json!(if args.quick { "cargo xtask py-bench --quick" } else { "cargo xtask py-bench" });
    doc["total_seconds"] = json!(started.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&scratch);
    let out = target.join("gridkey-py-bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&doc)? + "\n")?;
    print_cases(&doc);
    println!("\nwrote {} in {:.1} s", out.display(), started.elapsed().as_secs_f64());
    Ok(true)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Seconds of `reps` calls of `digest_table` on `table` here and of `gridkey.table_digest` on
/// the same table in the script's `digest-server`, one after the other, so that both see the
/// same background load; and the digest the server printed.
fn interleaved_digests(
    python: &Path,
    script: &Path,
    table_path: &Path,
    table: &Array2<i32>,
    reps: usize,
) -> Result<(Vec<f64>, Vec<f64>, String)> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = clean(Command::new(python))
        .arg(script)
        .arg("digest-server")
        .arg(table_path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("start the digest server")?;
    let mut to = child.stdin.take().context("stdin")?;
    let mut from = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    from.read_line(&mut line)?;
    let digest = line.trim().strip_prefix("ready ").context("the digest server did not start")?.to_owned();
    black_box(digest_table(table.view()));
    let (mut rust, mut py) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        black_box(digest_table(black_box(table.view())));
        rust.push(t.elapsed().as_secs_f64());
        writeln!(to, "go")?;
        line.clear();
        from.read_line(&mut line)?;
        py.push(line.trim().parse().with_context(|| format!("digest server said {line:?}"))?);
    }
    drop(to);
    child.wait()?;
    Ok((rust, py, digest))
}

fn print_cases(doc: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!("| case | result | peer | ratio | goal |");
    println!("|---|---|---|---|---|");
    for c in doc["cases"].as_array().into_iter().flatten() {
        match c["name"].as_str() {
            Some("digest_c_py") => {
                println!(
                    "| digest_c_py vs Rust | {:.1} GB/s | Rust digest_table {:.1} GB/s | {:.2} | >= 0.9 |",
                    f(&c["interleaved_with_rust_gb_per_s"]),
                    f(&c["rust_digest_table_gb_per_s"]),
                    f(&c["ratio_vs_rust"])
                );
                println!(
                    "| digest_c_py vs xxhash | {:.1} GB/s | xxhash.xxh3_128 {:.1} GB/s | {:.2} | >= 1.0 |",
                    f(&c["gb_per_s"]),
                    f(&c["xxhash_xxh3_128_gb_per_s"]),
                    f(&c["ratio_vs_xxhash"])
                );
            }
            Some("digest_f_py") => {
                println!(
                    "| digest_f_py | {:.1} GB/s | C order {:.1} GB/s | {:.2} | >= 0.5 |",
                    f(&c["gb_per_s"]),
                    f(&c["c_order_gb_per_s"]),
                    f(&c["ratio"])
                );
                println!(
                    "| peak RSS growth | {} B (Fortran), {} B (C) | 240 MB table | {:.5} | < 0.01 |",
                    c["peak_rss_growth_bytes_fortran"],
                    c["peak_rss_growth_bytes_c"],
                    f(&c["peak_rss_growth_fraction"])
                );
            }
            Some("convert_py") => println!(
                "| convert_py | {:.3} s for {:.0} MB | np.save + os.fsync {:.3} s | {:.2} | <= 1.5 |",
                f(&c["seconds"]),
                f(&c["bytes"]) / 1e6,
                f(&c["limit_seconds"]),
                f(&c["ratio"])
            ),
            _ => {}
        }
    }
}
