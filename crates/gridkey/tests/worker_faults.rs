//! Failure isolation, timeout, scheduling and memory of the process pool, against real
//! `gridkey worker --handler test-faults` processes (ADR 0010).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gridkey::faults::{FaultReport, EXIT_MESSAGE};
use gridkey_digest::digest_table;
use gridkey_fingerprint::TranslationOptions;
use gridkey_jobs::{CompilationTask, ProcessPool, Settings, TaskError, TaskFailure, WorkerCommand};
use gridkey_offsets::{CompileTimeConnectivity, CompileTimeOffsetProvider, Dimension, DimensionKind, Entry};
use gridkey_store::{TableSpec, TableStore};

fn fault_worker() -> WorkerCommand {
    WorkerCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_gridkey")),
        args: vec!["worker".into(), "--handler".into(), "test-faults".into()],
    }
}

fn task(
    program: &str,
    options: &[(&str, &str)],
    provider: &Arc<CompileTimeOffsetProvider>,
    cache: &Path,
) -> CompilationTask {
    CompilationTask {
        program: program.to_owned(),
        encoding: Vec::new(),
        options: options.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<TranslationOptions>(),
        provider: provider.clone(),
        settings: gridkey::task_settings(&Settings {
            cache_dir: cache.to_path_buf(),
            ..Settings::from_vars(|name| (name == "PATH").then(|| std::env::var(name).ok()).flatten()).unwrap()
        })
        .expect("the test cache and the default compiler are usable"),
    }
}

fn empty() -> Arc<CompileTimeOffsetProvider> {
    Arc::new(CompileTimeOffsetProvider::new())
}

/// Whether `pid` has exited (gone, or a zombie waiting to be reaped).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits for `path` to hold a pid and kills that process with SIGKILL, from outside the pool.
fn kill_when_written(path: PathBuf) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(pid) = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on the worker process the hang task named.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
                return pid as u32;
            }
            assert!(Instant::now() < deadline, "the hang task never wrote {}", path.display());
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// The single place that checks one result against the failure it should be.
fn check(result: &Result<FaultReport, TaskError>, program: &str, expect: &str) {
    match (expect, result) {
        ("ok", Ok(report)) => assert_eq!(report.program, program, "submission order"),
        (_, Ok(report)) => panic!("{program}: expected {expect}, got {report:?}"),
        (_, Err(e)) => {
            assert_eq!(e.program, program, "the error names the program");
            // Named at the start, and not twice there when the cause names it too.
            let text = e.to_string();
            let named = format!("program {program}");
            assert!(text.starts_with(&named) && !text.starts_with(&format!("{named}: {named}")), "{text}");
            match (expect, &e.cause) {
                ("error", TaskFailure::Handler(why)) => {
                    assert!(why.contains("failed on request"), "{why}")
                }
                ("panic", TaskFailure::Panic(why)) => {
                    assert!(why.contains("panicked on request"), "{why}")
                }
                ("exit", TaskFailure::WorkerDied { status, stderr_tail, pid }) => {
                    assert_eq!(status, "exit status 3");
                    assert!(stderr_tail.contains(EXIT_MESSAGE), "{stderr_tail}");
                    assert!(exited(*pid));
                }
                ("garbage", TaskFailure::Protocol { reason, pid, .. }) => {
                    assert!(reason.contains("bad frame"), "{reason}");
                    assert!(exited(*pid), "a worker that broke the protocol is killed");
                }
                ("sigkill", TaskFailure::WorkerDied { status, .. }) => {
                    assert_eq!(status, "killed by signal 9 (SIGKILL)")
                }
                ("timeout", TaskFailure::Timeout { seconds, pid, .. }) => {
                    assert_eq!(*seconds, 1.0);
                    assert!(exited(*pid), "a worker past the timeout is killed");
                }
                (_, cause) => panic!("{program}: expected {expect}, got {cause:?}"),
            }
        }
    }
}

#[test]
fn each_fault_fails_its_task_alone_and_the_worker_is_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let pidfile = cache.path().join("hang.pid");
    let p = empty();
    let plan = [
        ("ok-0", "ok"),
        ("error-1", "error"),
        ("ok-2", "ok"),
        ("panic-3", "panic"),
        ("ok-4", "ok"),
        ("exit-5", "exit"),
        ("ok-6", "ok"),
        ("garbage-7", "garbage"),
        ("ok-8", "ok"),
        ("hang-9", "sigkill"),
        ("ok-10", "ok"),
        ("chatty-11", "ok"),
        ("ok-12", "ok"),
    ];
    let pidfile_text = pidfile.to_str().unwrap().to_owned();
    let tasks: Vec<_> =
        plan.iter().map(|(name, _)| task(name, &[("pidfile", &pidfile_text)], &p, cache.path())).collect();
    let pool: ProcessPool<FaultReport> = ProcessPool::new(fault_worker(), 2);
    let killer = kill_when_written(pidfile);
    let results = pool.run_all(&tasks);
    let killed = killer.join().unwrap();
    for ((name, expect), result) in plan.iter().zip(&results) {
        check(result, name, expect);
    }
    assert!(matches!(&results[9], Err(e) if matches!(e.cause, TaskFailure::WorkerDied { pid, .. } if pid == killed)));
    // Three workers died (exit, garbage, SIGKILL); every other start is a live, idle worker.
    let idle = pool.idle_pids();
    assert_eq!(pool.workers_started(), 3 + idle.len() as u64, "idle {idle:?}");
    assert!(idle.iter().all(|&pid| !exited(pid)));

    // The pool stays usable: a later batch completes on live workers.
    let later: Vec<_> = (0..4).map(|i| task(&format!("ok-later-{i}"), &[], &p, cache.path())).collect();
    for (t, r) in later.iter().zip(pool.run_all(&later)) {
        check(&r, &t.program, "ok");
    }
}

#[test]
fn a_hung_worker_is_killed_at_the_timeout_and_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let p = empty();
    let tasks = vec![
        task("hang-forever", &[("seconds", "600")], &p, cache.path()),
        task("ok-after", &[], &p, cache.path()),
        task("ok-last", &[], &p, cache.path()),
    ];
    let pool: ProcessPool<FaultReport> = ProcessPool::new(fault_worker(), 1).with_timeout(Some(Duration::from_secs(1)));
    let results = pool.run_all(&tasks);
    check(&results[0], "hang-forever", "timeout");
    check(&results[1], "ok-after", "ok");
    check(&results[2], "ok-last", "ok");
    assert_eq!(pool.workers_started(), 2, "one replacement");
}

#[test]
fn tasks_go_to_the_free_worker_and_results_keep_submission_order() {
    let cache = tempfile::tempdir().unwrap();
    let p = empty();
    let mut tasks = vec![task("hang-slow", &[("seconds", "2")], &p, cache.path())];
    tasks.extend((0..6).map(|i| task(&format!("ok-{i}"), &[], &p, cache.path())));
    let pool: ProcessPool<FaultReport> = ProcessPool::new(fault_worker(), 2);
    let results: Vec<FaultReport> = pool.run_all(&tasks).into_iter().map(Result::unwrap).collect();
    let names: Vec<&str> = results.iter().map(|r| r.program.as_str()).collect();
    assert_eq!(names, ["hang-slow", "ok-0", "ok-1", "ok-2", "ok-3", "ok-4", "ok-5"]);
    let slow = results[0].pid;
    assert!(results[1..].iter().all(|r| r.pid != slow && r.pid == results[1].pid), "{results:?}");
    assert_eq!(pool.workers_started(), 2);
}

/// A compile-time provider of `tables` int32 tables of `rows` x 4, stored in `store`, each with
/// different content.
fn provider_of(store: &TableStore, tables: usize, rows: usize) -> Arc<CompileTimeOffsetProvider> {
    let mut provider = CompileTimeOffsetProvider::new();
    for t in 0..tables {
        let table = ndarray::Array2::from_shape_fn((rows, 4), |(i, j)| ((i * 4 + j + t) % rows) as i32);
        let spec =
            TableSpec { digest: digest_table(table.view()), dtype: gridkey_digest::Dtype::I32, shape: [rows, 4] };
        store.put_table(spec.digest, table.view()).unwrap();
        let dim = |name: &str, kind| Dimension::new(name, kind);
        let c = CompileTimeConnectivity::rehydrate(
            &format!("T{t}"),
            store,
            &spec,
            dim("Cell", DimensionKind::Horizontal),
            dim(&format!("T{t}Dim"), DimensionKind::Local),
            dim("Cell", DimensionKind::Horizontal),
            None,
        )
        .unwrap();
        provider.push(format!("T{t}"), Entry::Gather(Arc::new(c))).unwrap();
    }
    Arc::new(provider)
}

/// Reads every element of every table of `provider` in this process, so its pages are resident
/// and mapped here too.
fn touch(provider: &CompileTimeOffsetProvider) -> i64 {
    provider
        .entries()
        .iter()
        .map(|(_, e)| match e {
            Entry::Gather(c) => match c.table() {
                gridkey_store::TableView::I32(t) => t.iter().map(|&x| x as i64).sum::<i64>(),
                gridkey_store::TableView::I64(t) => t.iter().sum(),
            },
            Entry::Dimension(_) => 0,
        })
        .sum()
}

#[test]
fn a_worker_holding_mapped_tables_shares_them_and_its_private_memory_does_not_grow() {
    let cache = tempfile::tempdir().unwrap();
    let store = TableStore::open(cache.path()).unwrap();
    let small = provider_of(&store, 2, 1_000);
    let big = provider_of(&store, 2, 4_000_000); // 2 tables of 64 MB
    let big_bytes = 2 * 4_000_000 * 4 * 4u64;
    let expect_sum = touch(&big);
    let pool: ProcessPool<FaultReport> = ProcessPool::new(fault_worker(), 1);
    let tasks = [task("memory-small", &[], &small, cache.path()), task("memory-big", &[], &big, cache.path())];
    let results: Vec<FaultReport> = pool.run_all(&tasks).into_iter().map(Result::unwrap).collect();
    let (s, b) = (&results[0].memory, &results[1].memory);
    assert_eq!(results[1].elements_read, 2 * 4_000_000 * 4);
    assert_eq!(results[1].element_sum, expect_sum, "the worker read the same tables");
    // The tables were resident in the worker while it reported ...
    assert!(b["Rss"] >= s["Rss"] + big_bytes * 9 / 10, "small {s:?}\nbig {b:?}");
    // ... shared with this process through the page cache ...
    assert!(b["Shared_Clean"] >= big_bytes * 9 / 10, "big {b:?}");
    // ... and the private part did not grow with them.
    let private = |m: &BTreeMap<String, u64>| m["Private_Clean"] + m["Private_Dirty"];
    assert!(private(b) < private(s) + (8 << 20), "small {s:?}\nbig {b:?}");
    drop(big);
}

/// A worker whose executable is still open for writing when the pool starts it (a file just
/// written, held by a process another thread forked before it execs: `ETXTBSY`) starts once it
/// is closed, instead of failing its task.
#[test]
fn a_worker_executable_busy_for_a_moment_still_starts() {
    let cache = tempfile::tempdir().unwrap();
    let p = empty();
    let tasks: Vec<_> = ["ok-0", "ok-1"].iter().map(|name| task(name, &[], &p, cache.path())).collect();
    let script = cache.path().join("busy-worker");
    let body = format!("#!/bin/sh\nexec '{}' worker --handler test-faults \"$@\"\n", env!("CARGO_BIN_EXE_gridkey"));
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let writer = std::fs::OpenOptions::new().write(true).open(&script).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(writer);
    });
    let pool: ProcessPool<FaultReport> = ProcessPool::new(WorkerCommand { program: script, args: Vec::new() }, 1);
    let results = pool.run_all(&tasks);
    closer.join().unwrap();
    for (name, result) in ["ok-0", "ok-1"].iter().zip(&results) {
        check(result, name, "ok");
    }
}

/// A worker script in `dir` that, on its first start, starts a child that sleeps, writes both
/// pids to `dir/silent.pids` and waits without ever sending a handshake; on any later start it
/// is the real fault worker.
fn silent_once_worker(dir: &Path) -> WorkerCommand {
    let script = dir.join("silent-once");
    let pids = dir.join("silent.pids");
    let body = format!(
        "#!/bin/sh\nif [ ! -e '{pids}' ]; then\n  sleep 600 &\n  echo \"$$ $!\" > '{pids}'\n  echo 'silent worker: no handshake' >&2\n  wait\nfi\nexec '{gridkey}' worker --handler test-faults \"$@\"\n",
        pids = pids.display(),
        gridkey = env!("CARGO_BIN_EXE_gridkey"),
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    WorkerCommand { program: script, args: Vec::new() }
}

#[test]
fn a_worker_that_never_sends_its_handshake_is_killed_with_its_group_and_fails_only_its_task() {
    let cache = tempfile::tempdir().unwrap();
    let p = empty();
    let tasks: Vec<_> = ["ok-0", "ok-1", "ok-2"].iter().map(|name| task(name, &[], &p, cache.path())).collect();
    let command = silent_once_worker(cache.path());
    let program = command.program.display().to_string();
    let pool: ProcessPool<FaultReport> = ProcessPool::new(command, 1).with_handshake_deadline(Duration::from_secs(2));
    let started = Instant::now();
    let results = pool.run_all(&tasks);
    let took = started.elapsed();
    let pids: Vec<u32> = std::fs::read_to_string(cache.path().join("silent.pids"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    match &results[0] {
        Err(TaskError {
            program: name,
            cause: TaskFailure::Handshake { pid, program: worker, seconds, stderr_tail },
        }) => {
            assert_eq!(name, "ok-0");
            assert_eq!((*pid, worker.as_str(), *seconds), (pids[0], program.as_str(), 2.0));
            assert!(stderr_tail.contains("silent worker: no handshake"), "{stderr_tail}");
            let text = results[0].as_ref().unwrap_err().to_string();
            assert!(text.contains(&format!("build worker (pid {pid})")) && text.contains("within 2 s"), "{text}");
        }
        other => panic!("the silent worker's task must fail with the handshake deadline, got {other:?}"),
    }
    for (name, result) in ["ok-1", "ok-2"].iter().zip(&results[1..]) {
        check(result, name, "ok");
    }
    assert!(pids.iter().all(|&pid| exited(pid)), "the silent worker and its child are killed: {pids:?}");
    assert_eq!(pool.workers_started(), 2, "one replacement ran the other tasks");
    assert!(took < Duration::from_secs(30), "the pool waited {took:?}");
}
