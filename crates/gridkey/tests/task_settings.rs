//! Workers get only what workers use (ADR 0032): the task settings built once in the parent are
//! what every mode's handler sees, no task frame holds the shared tier's URL or its password,
//! and a compiler wrapper's own variables reach it from the binary's edge without changing a key.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{data, gridkey_command};
use gridkey::faults::{FaultHandler, FaultReport};
use gridkey::{Settings, TaskSettings};
use gridkey_jobs::protocol::ToWorker;
use gridkey_jobs::{BuildJobs, BuildJobsMode, CompilationTask, ProcessPool, Runner, WorkerCommand};
use gridkey_offsets::CompileTimeOffsetProvider;

const PASSWORD: &str = "hunter2-in-the-url";

/// The settings of a run with the caller's compiler, `cache`, and a shared tier whose URL holds
/// [`PASSWORD`].
fn with_remote(cache: &Path) -> (Settings, String) {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:6399/3");
    let base = common::run_settings(cache);
    let remote = Settings::from_vars(|name| (name == gridkey_settings::ENV_REMOTE_URL).then(|| url.clone())).unwrap();
    assert!(remote.remote.is_some(), "the URL parses into a shared tier");
    (Settings { remote: remote.remote, ..base }, url)
}

fn tasks(names: &[&str], settings: &Arc<TaskSettings>) -> Vec<CompilationTask> {
    let provider = Arc::new(CompileTimeOffsetProvider::new());
    names
        .iter()
        .map(|name| CompilationTask {
            program: (*name).to_owned(),
            encoding: Vec::new(),
            options: Default::default(),
            provider: provider.clone(),
            settings: settings.clone(),
        })
        .collect()
}

fn fault_worker() -> WorkerCommand {
    WorkerCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_gridkey")),
        args: vec!["worker".into(), "--handler".into(), "test-faults".into()],
    }
}

#[test]
fn no_task_frame_holds_the_shared_tiers_url_or_its_password() {
    let cache = tempfile::tempdir().unwrap();
    let (settings, url) = with_remote(cache.path());
    let task_settings = gridkey::task_settings(&settings).unwrap();
    // A worker that records every byte the pool writes to it, then serves as the fault worker.
    let record = cache.path().join("frames.bin");
    let script = cache.path().join("recording-worker");
    let body = format!(
        "#!/bin/sh\ntee -a '{}' | '{}' worker --handler test-faults\n",
        record.display(),
        env!("CARGO_BIN_EXE_gridkey")
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pool: ProcessPool<FaultReport> = ProcessPool::new(WorkerCommand { program: script, args: Vec::new() }, 2);
    let results = pool.run_all(&tasks(&["ok-a", "ok-b", "ok-c"], &task_settings));
    drop(pool);
    for result in &results {
        assert_eq!(&result.as_ref().unwrap().settings, task_settings.as_ref(), "the worker's task settings");
    }

    let bytes = std::fs::read(&record).unwrap();
    let frames: Vec<ToWorker> = bytes
        .split_inclusive(|&b| b == 0)
        .map(|frame| gridkey_jobs::protocol::decode_frame(&mut frame.to_vec()).unwrap())
        .collect();
    let programs: Vec<&str> = frames
        .iter()
        .filter_map(|f| match f {
            ToWorker::Task { task, .. } => Some(task.program.as_str()),
            ToWorker::Shutdown => None,
        })
        .collect();
    assert_eq!(programs.len(), 3, "every task frame was recorded: {programs:?}");
    let found = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(found("ok-a") && found(task_settings.cache_dir().to_str().unwrap()), "the recording holds the frames");
    for secret in [url.as_str(), PASSWORD, "127.0.0.1:6399"] {
        assert!(!found(secret), "a task frame holds {secret:?}");
        assert!(frames.iter().all(|f| !format!("{f:?}").contains(secret)), "a decoded frame holds {secret:?}");
    }
}

#[test]
fn every_mode_hands_the_handler_the_same_task_settings() {
    let cache = tempfile::tempdir().unwrap();
    let (settings, _) = with_remote(cache.path());
    let settings = Settings { verify_tables: true, verify_cache_hits: true, ..settings };
    let task_settings = gridkey::task_settings(&settings).unwrap();
    assert!(task_settings.cache_dir().is_absolute());
    assert!(task_settings.verify_tables() && task_settings.verify_cache_hits());
    assert_eq!(task_settings.compiler().identity().len(), 32, "the parent identified the compiler");
    let batch = tasks(&["ok-1", "ok-2", "ok-3"], &task_settings);
    for mode in BuildJobsMode::ALL {
        let runner = Runner::new(BuildJobs::new(mode, 2), Arc::new(FaultHandler), fault_worker());
        for result in runner.run_all(&batch) {
            let report = result.unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert_eq!(&report.settings, task_settings.as_ref(), "{mode}");
        }
    }
}

/// A compiler wrapper `dir/mywrap` that, for each build (an invocation with `-shared`), writes
/// its whole environment to a file of `dir/env/`, then runs the compiler it is given.
fn recording_wrapper(dir: &Path) -> PathBuf {
    let logs = dir.join("env");
    std::fs::create_dir_all(&logs).unwrap();
    let script = dir.join("mywrap");
    let body = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -shared \"*) env > \"$(mktemp '{}/build-XXXXXX')\";; esac\nexec \"$@\"\n",
        logs.display()
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    logs
}

/// `gridkey run --json` on the MPAS grid in `mode`, with `CC="<dir>/mywrap cc"` and `env`.
fn run_wrapped(cache: &Path, dir: &Path, mode: &str, env: &[(&str, &str)]) -> gridkey::RunReport {
    let grid = data("grids/oQU480.231010.nc");
    let cc = format!("{} cc", dir.join("mywrap").display());
    let path = std::env::var("PATH").unwrap_or_default();
    let mut vars = vec![("CC", cc.as_str()), ("PATH", path.as_str())];
    vars.extend_from_slice(env);
    let args = ["run", "--mode", mode, "--jobs", "2", "--json", "--grid", grid.to_str().unwrap(), "--cache-dir"];
    let out = gridkey_command(&args, &vars).arg(cache).output().unwrap();
    assert!(
        out.status.success(),
        "{mode}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_wrappers_own_variables_reach_it_in_every_mode_and_change_no_key() {
    let work = tempfile::tempdir().unwrap();
    let logs = recording_wrapper(work.path());
    let wrapper_vars = [
        ("SCCACHE_REDIS", "redis://127.0.0.1:6398"),
        ("SCCACHE_DIR", "/srv/sccache"),
        ("CCACHE_BASEDIR", "/srv/build"),
        ("DISTCC_HOSTS", "localhost/2"),
    ];
    let mut env = wrapper_vars.to_vec();
    env.push(("GRIDKEY_UNRELATED_SECRET", "not-for-the-compiler"));
    let mut builds = 0;
    for mode in ["serial", "thread", "process"] {
        let cache = work.path().join(format!("cache-{mode}"));
        let report = run_wrapped(&cache, work.path(), mode, &env);
        assert!(report.all_verified(), "{mode}");
        assert_eq!(report.builds(), report.programs.len(), "{mode}: a fresh cache builds every program");
        builds += report.builds();
    }
    let recorded: Vec<String> =
        std::fs::read_dir(&logs).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    assert_eq!(recorded.len(), builds, "one environment recorded per build");
    for env in &recorded {
        for (name, value) in wrapper_vars {
            assert!(env.lines().any(|l| l == format!("{name}={value}")), "{name} did not reach the wrapper:\n{env}");
        }
        assert!(!env.contains("GRIDKEY_UNRELATED_SECRET"), "an unlisted variable reached the wrapper:\n{env}");
    }

    // Other wrapper settings (another server, another directory) change neither the compiler's
    // identity nor any key: the same cache serves every program without a translation or a build.
    let cache = work.path().join("cache-serial");
    let other = [("SCCACHE_REDIS", "redis://10.0.0.9:6379"), ("SCCACHE_DIR", "/elsewhere"), ("CCACHE_BASEDIR", "/x")];
    let again = run_wrapped(&cache, work.path(), "process", &other);
    assert!(again.all_verified());
    assert_eq!((again.translations(), again.builds()), (0, 0), "wrapper variables entered a key");
}
