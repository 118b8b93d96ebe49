//! The whole frontend with the system C compiler: compile (key, translation cache, build cache),
//! load, run on runtime tables of every layout, and check against the Rust evaluation.

use crate::common;

use std::fs;
use std::path::Path;

use common::{compile_time, Layout, Patch};
use gridkey_fingerprint::{TranslationCache, TranslationOptions};
use gridkey_offsets::OffsetProvider;
use gridkey_settings::{CompilerSettings, IdentifiedCompiler, ResolvedCompiler, Settings, TaskSettings};
use gridkey_stencil::{
    compile, dimension_sizes, evaluate_reference, icon_programs, key_inputs, make_inputs, max_relative_error,
    normalise_options, CompileConfig, CompileOutcome, Fields, Kernel, Need, Program, StencilError, BUILD_DIR, OPTIONS,
};

const TOLERANCE: f64 = 1e-12;

fn program(name: &str) -> Program {
    icon_programs().into_iter().find(|p| p.name() == name).expect("an icon program")
}

/// The compile configuration of a test: the caller's compiler (`CC` and the variables that
/// reach it), nothing else from the environment.
fn config(cache: &Path) -> CompileConfig {
    let compiler_vars = |name: &str| {
        (name == gridkey_settings::ENV_CC || gridkey_settings::COMPILER_ENV.contains(&name))
            .then(|| std::env::var(name).ok())
            .flatten()
    };
    let settings = Settings::from_vars(compiler_vars).unwrap();
    let cwd = std::env::current_dir().unwrap();
    let compiler = gridkey_stencil::identify_compiler(&settings.compiler, &cwd).unwrap();
    let settings = TaskSettings::new(&settings, cache.canonicalize().unwrap(), compiler).unwrap();
    CompileConfig::from_settings(&settings).unwrap()
}

/// [`config`] with the compiler command `cc` (words split on whitespace), resolved on the
/// caller's `PATH` or, when it is not found there, taken as the path it names (so that a
/// missing compiler reaches the build).
fn with_cc(cache: &Path, cc: &str) -> CompileConfig {
    let config = config(cache);
    let mut compiler = CompilerSettings::from_command(cc, |name| config.compiler.env().get(name).cloned()).unwrap();
    if compiler.resolve(cache).is_err() {
        compiler.resolved = Some(ResolvedCompiler { program: compiler.command[0].clone().into() });
    }
    let identity = gridkey_stencil::compiler_identity(&compiler, cache);
    CompileConfig { compiler: IdentifiedCompiler::new(&compiler, identity).unwrap(), ..config }
}

/// The one place that compiles: `program` against the compile-time view of `provider`.
fn compile_on(
    program: &Program,
    provider: &OffsetProvider,
    config: &CompileConfig,
) -> Result<CompileOutcome, StencilError> {
    let ct = compile_time(provider, &config.cache_dir);
    compile(program, &ct, &TranslationOptions::new(), config)
}

/// Runs `kernel` on `provider` and the reference, returning both.
fn run_both(kernel: &Kernel, provider: &OffsetProvider, inputs: &Fields) -> (Fields, Fields) {
    let got = kernel.run(provider, inputs).unwrap();
    let want = evaluate_reference(kernel.program(), provider, inputs).unwrap();
    (got, want)
}

fn files_in(dir: &Path) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn every_icon_program_compiles_runs_and_matches_the_reference() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(4, 3).provider(Layout::COrder);
    for program in icon_programs() {
        let outcome = compile_on(&program, &provider, &config(cache.path())).unwrap();
        assert!(outcome.translated && outcome.built, "{outcome:?}");
        assert_eq!(outcome.program, program.name());
        assert!(outcome.artifact.starts_with(cache.path().join(BUILD_DIR)));
        let kernel = Kernel::load(&outcome.artifact, &program).unwrap();
        let inputs = make_inputs(&program, &provider, 7).unwrap();
        let (got, want) = run_both(&kernel, &provider, &inputs);
        let outputs: Vec<&String> = got.0.keys().collect();
        let declared: Vec<&String> = program.outputs().iter().map(|f| &f.name).collect();
        assert_eq!(outputs, declared, "{}", program.name());
        for values in got.0.values() {
            assert!(
                !values.is_empty() && values.iter().all(|v| v.is_finite() && *v != 0.0),
                "{}: {values:?}",
                program.name()
            );
        }
        let err = max_relative_error(&got, &want);
        assert!(err <= TOLERANCE, "{}: max relative error {err:e}", program.name());
    }
}

#[test]
fn inputs_are_deterministic_sized_from_the_tables_and_in_range() {
    let provider = Patch::new(3, 2).provider(Layout::COrder);
    let sizes = dimension_sizes(&provider);
    assert_eq!(sizes.len(), 3);
    let (cells, edges, vertices) = (sizes["Cell"], sizes["Edge"], sizes["Vertex"]);
    assert_eq!((cells, edges, vertices), (12, 23, 12));
    let div = program("div");
    let a = make_inputs(&div, &provider, 1).unwrap();
    assert_eq!(a, make_inputs(&div, &provider, 1).unwrap());
    assert_ne!(a, make_inputs(&div, &provider, 2).unwrap());
    assert_eq!(a.get("vn").unwrap().len(), edges);
    assert_eq!(a.get("geofac_div").unwrap().len(), cells * 3);
    assert!(a.0.values().flatten().all(|v| (0.5..1.5).contains(v)));
    // A field's values depend on its name and the seed, not on the program.
    let rot = make_inputs(&program("rot"), &provider, 1).unwrap();
    assert_eq!(rot.get("vn"), a.get("vn"));
}

#[test]
fn a_mean_over_no_neighbour_is_zero_in_both_paths() {
    let cache = tempfile::tempdir().unwrap();
    let patch = Patch::new(1, 1);
    // Cell 0 loses all its neighbours.
    let provider = patch.provider_with(Layout::COrder, |offset, t| {
        let mut t = t.clone();
        if offset == "C2E2C" {
            t.row_mut(0).fill(-1);
        }
        t
    });
    let avg = program("c2e2c_avg");
    let kernel = Kernel::load(&compile_on(&avg, &provider, &config(cache.path())).unwrap().artifact, &avg).unwrap();
    let inputs = make_inputs(&avg, &provider, 3).unwrap();
    let (got, want) = run_both(&kernel, &provider, &inputs);
    assert_eq!(got.get("psi_avg").unwrap()[0], 0.0);
    assert_eq!(want.get("psi_avg").unwrap()[0], 0.0);
    assert!(max_relative_error(&got, &want) <= TOLERANCE);
}

#[test]
fn a_broken_library_in_the_build_cache_is_built_again() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 2).provider(Layout::COrder);
    let div = program("div");
    let first = compile_on(&div, &provider, &config(cache.path())).unwrap();
    let good = std::fs::read(&first.artifact).unwrap();
    type Plant<'a> = Box<dyn Fn(&std::path::Path) + 'a>;
    let planted: [(&str, Plant); 3] = [
        ("truncated", Box::new(|p| std::fs::write(p, &good[..good.len() / 3]).unwrap())),
        ("garbage", Box::new(|p| std::fs::write(p, b"not a shared library").unwrap())),
        ("symlink", Box::new(|p| std::os::unix::fs::symlink("/etc/hostname", p).unwrap())),
    ];
    for (what, plant) in planted {
        std::fs::remove_file(&first.artifact).unwrap();
        plant(&first.artifact);
        let again = compile_on(&div, &provider, &config(cache.path())).unwrap();
        assert!(again.built && !again.translated, "{what}: {again:?}");
        assert!(std::fs::symlink_metadata(&again.artifact).unwrap().is_file(), "{what}");
        Kernel::load(&again.artifact, &div).unwrap_or_else(|e| panic!("{what}: {e}"));
        let left: Vec<_> =
            std::fs::read_dir(cache.path().join("build-v2")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 1, "{what}: only the library, no temp source or library: {left:?}");
    }
}

#[test]
fn a_second_compile_hits_the_translation_cache_and_the_build_cache() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 2).provider(Layout::COrder);
    let nabla2 = program("nabla2");
    let first = compile_on(&nabla2, &provider, &config(cache.path())).unwrap();
    assert!(first.translated && first.built);
    assert!(first.miss_reason.as_deref().unwrap().contains("no translation entry"), "{:?}", first.miss_reason);
    let second = compile_on(&nabla2, &provider, &config(cache.path())).unwrap();
    assert!(!second.translated && !second.built, "{second:?}");
    assert_eq!((second.key, &second.artifact, &second.miss_reason), (first.key, &first.artifact, &None));
    // The debug switch translates the hit again and finds it identical.
    let verify = CompileConfig { verify_hits: true, ..config(cache.path()) };
    let third = compile_on(&nabla2, &provider, &verify).unwrap();
    assert!(!third.translated && !third.built);
    // Another runtime layout of the same tables is the same key: still a hit.
    let fortran = Patch::new(2, 2).provider(Layout::HostCopy);
    let fourth = compile_on(&nabla2, &fortran, &config(cache.path())).unwrap();
    assert!(!fourth.translated && !fourth.built);
    assert_eq!(fourth.key, first.key);
    // Another optimisation level is another key, another library.
    let ct = compile_time(&provider, cache.path());
    let o0: TranslationOptions = [("opt_level".to_owned(), "0".to_owned())].into();
    let fifth = compile(&nabla2, &ct, &o0, &config(cache.path())).unwrap();
    assert!(fifth.translated && fifth.built);
    assert_ne!((fifth.key, &fifth.artifact), (first.key, &first.artifact));
    // The outcome crosses the worker protocol.
    let json = serde_json::to_string(&first).unwrap();
    assert!(json.contains(&first.key.to_hex()));
    assert_eq!(serde_json::from_str::<CompileOutcome>(&json).unwrap(), first);
}

#[test]
fn a_corrupt_translation_entry_is_a_miss_and_a_tampered_one_fails_verification() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 1).provider(Layout::COrder);
    let div = program("div");
    let first = compile_on(&div, &provider, &config(cache.path())).unwrap();
    let tc = TranslationCache::open(cache.path()).unwrap();
    let entry = tc.entry_path(&first.key);
    let mut perms = fs::metadata(&entry).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&entry, perms).unwrap();
    fs::write(&entry, b"garbage").unwrap();
    let again = compile_on(&div, &provider, &config(cache.path())).unwrap();
    assert!(again.translated && !again.built, "{again:?}");
    assert!(again.miss_reason.as_deref().unwrap().contains("unusable translation entry"));

    // An entry with the right key but other source: served as is, caught by verify_hits.
    let ct = compile_time(&provider, cache.path());
    let inputs = key_inputs(&div, &TranslationOptions::new(), &ct).unwrap();
    tc.put(&inputs, b"/* not what translation produces */").unwrap();
    let verify = CompileConfig { verify_hits: true, ..config(cache.path()) };
    match compile_on(&div, &provider, &verify) {
        Err(StencilError::VerifyMismatch { program, key, first_difference }) => {
            assert_eq!((program.as_str(), key, first_difference), ("div", first.key, 3));
        }
        other => panic!("expected VerifyMismatch, got {other:?}"),
    }
}

#[test]
fn execution_reads_every_runtime_layout_in_place_with_the_same_result() {
    let cache = tempfile::tempdir().unwrap();
    let patch = Patch::new(3, 3);
    let base = patch.provider(Layout::COrder);
    for program in icon_programs() {
        let outcome = compile_on(&program, &base, &config(cache.path())).unwrap();
        let kernel = Kernel::load(&outcome.artifact, &program).unwrap();
        let inputs = make_inputs(&program, &base, 11).unwrap();
        let (want, reference) = run_both(&kernel, &base, &inputs);
        assert!(max_relative_error(&want, &reference) <= TOLERANCE);
        for layout in Layout::ALL {
            let provider = patch.provider(layout);
            let (got, reference) = run_both(&kernel, &provider, &inputs);
            assert_eq!(got, want, "{} on {layout:?} tables", program.name());
            assert!(max_relative_error(&got, &reference) <= TOLERANCE, "{} reference on {layout:?}", program.name());
        }
    }
}

/// The one place that expects a compiler failure: compiles `div` with compiler `cc` and checks
/// the error and that `build-v2` holds no file.
fn check_compiler_failure(cc: &str, want_status: Option<i32>, stderr_has: &str) {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let config = with_cc(cache.path(), cc);
    match compile_on(&program("div"), &provider, &config) {
        Err(e @ StencilError::Compiler { .. }) => {
            let message = e.to_string();
            let StencilError::Compiler { cc: got_cc, program, status, stderr_tail } = e else { unreachable!() };
            assert_eq!((got_cc.as_str(), program.as_str(), status), (cc.trim(), "div", want_status));
            assert!(stderr_tail.contains(stderr_has), "{stderr_tail:?}");
            assert!(message.contains("install a C compiler or set CC"), "{message}");
            assert!(!message.ends_with('.'));
        }
        other => panic!("expected Compiler error for {cc:?}, got {other:?}"),
    }
    assert_eq!(files_in(&cache.path().join(BUILD_DIR)), Vec::<String>::new());
}

#[test]
fn a_failing_or_missing_compiler_is_a_compiler_error_and_leaves_nothing_behind() {
    check_compiler_failure("false", Some(1), "");
    check_compiler_failure("/nonexistent/bin/cc", None, "cannot run /nonexistent/bin/cc");
    // A blank command cannot even be identified, so no task is made with it.
    let mut blank = CompilerSettings::default();
    blank.command.clear();
    blank.resolved = Some(ResolvedCompiler { program: "/usr/bin/cc".into() });
    assert!(IdentifiedCompiler::new(&blank, "id".into()).is_err());
    // A compiler that rejects the flags: real stderr comes back.
    check_compiler_failure("cc -fno-such-flag-gridkey", Some(1), "no-such-flag-gridkey");
}

#[test]
fn a_compiler_killed_by_a_signal_names_the_signal_and_leaves_nothing_behind() {
    let cache = tempfile::tempdir().unwrap();
    let script = cache.path().join("cc-killed");
    std::fs::write(&script, "#!/bin/sh\necho half a message >&2\nkill -9 $$\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let config = with_cc(cache.path(), script.to_str().unwrap());
    match compile_on(&program("div"), &provider, &config) {
        Err(e @ StencilError::CompilerKilled { .. }) => {
            let message = e.to_string();
            let StencilError::CompilerKilled { program, signal, stderr_tail, .. } = e else { unreachable!() };
            assert_eq!((program.as_str(), signal), ("div", libc::SIGKILL));
            assert_eq!(stderr_tail, "half a message");
            assert!(message.contains("killed by signal 9"), "{message}");
            assert!(!message.contains("could not be run"), "{message}");
        }
        other => panic!("expected CompilerKilled, got {other:?}"),
    }
    assert_eq!(files_in(&cache.path().join(BUILD_DIR)), Vec::<String>::new());
}

#[test]
fn a_compiler_command_with_arguments_is_split_on_whitespace() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let cc = config(cache.path()).compiler.command_line();
    let with_flag = with_cc(cache.path(), &format!("{cc}  -Wall"));
    let outcome = compile_on(&program("div"), &provider, &with_flag).unwrap();
    assert!(outcome.built);
    Kernel::load(&outcome.artifact, &program("div")).unwrap();
}

#[test]
fn runtime_tables_that_differ_from_the_compiled_ones_are_typed_errors() {
    let cache = tempfile::tempdir().unwrap();
    let small = Patch::new(2, 1);
    let div = program("div");
    let outcome = compile_on(&div, &small.provider(Layout::COrder), &config(cache.path())).unwrap();
    let kernel = Kernel::load(&outcome.artifact, &div).unwrap();

    // More rows than compiled.
    let big = Patch::new(3, 1).provider(Layout::Fortran);
    let inputs = make_inputs(&div, &big, 5).unwrap();
    match kernel.run(&big, &inputs) {
        Err(StencilError::TableExtent { program, offset, axis, compiled, runtime }) => {
            assert_eq!((program.as_str(), offset.as_str(), axis, compiled, runtime), ("div", "C2E", "rows", 4, 6));
        }
        other => panic!("expected TableExtent, got {other:?}"),
    }

    // Other columns than compiled.
    let wide = small.provider_with(Layout::Int64, |_, t| ndarray::concatenate![ndarray::Axis(1), t.clone(), t.clone()]);
    let inputs_small = make_inputs(&div, &small.provider(Layout::COrder), 5).unwrap();
    match kernel.run(&wide, &inputs_small) {
        Err(StencilError::TableExtent { axis: "cols", compiled: 3, runtime: 6, .. }) => {}
        other => panic!("expected TableExtent on cols, got {other:?}"),
    }

    // Same shape, an index beyond what was compiled (the table changed after compilation).
    let changed = small.provider_with(Layout::Strided, |offset, t| {
        let mut t = t.clone();
        if offset == "C2E" {
            t[[1, 2]] = 9;
        }
        t
    });
    let mut longer = inputs_small.clone();
    longer.0.insert("vn".to_owned(), vec![1.0; 10]);
    match kernel.run(&changed, &longer) {
        Err(StencilError::IndexOutOfRange { program, offset, row, col, index, min, max }) => {
            assert_eq!((program.as_str(), offset.as_str(), row, col, index, min, max), ("div", "C2E", 1, 2, 9, 0, 8));
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }

    // Field lengths.
    let provider = small.provider(Layout::COrder);
    let mut short = inputs_small.clone();
    short.0.get_mut("vn").unwrap().truncate(8);
    let want =
        StencilError::FieldLength { program: "div".into(), field: "vn".into(), need: Need::AtLeast(9), found: 8 };
    match (kernel.run(&provider, &short), evaluate_reference(&div, &provider, &short)) {
        (Err(a @ StencilError::FieldLength { .. }), Err(b @ StencilError::FieldLength { .. })) => {
            assert_eq!(a.to_string(), want.to_string());
            assert_eq!(b.to_string(), want.to_string());
        }
        other => panic!("expected FieldLength from both paths, got {other:?}"),
    }
    let mut bad_weights = inputs_small.clone();
    bad_weights.0.get_mut("geofac_div").unwrap().push(1.0);
    match kernel.run(&provider, &bad_weights) {
        Err(StencilError::FieldLength { field, need: Need::Exactly(12), found: 13, .. }) => {
            assert_eq!(field, "geofac_div")
        }
        other => panic!("expected FieldLength on weights, got {other:?}"),
    }
    let mut missing = inputs_small.clone();
    missing.0.remove("geofac_div");
    match kernel.run(&provider, &missing) {
        Err(StencilError::MissingField { program, field }) => {
            assert_eq!((program.as_str(), field.as_str()), ("div", "geofac_div"))
        }
        other => panic!("expected MissingField, got {other:?}"),
    }
}

#[test]
fn a_kernel_loads_only_for_the_program_it_was_built_from() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let outcome = compile_on(&program("div"), &provider, &config(cache.path())).unwrap();
    match Kernel::load(&outcome.artifact, &program("rot")) {
        Err(StencilError::Load { program, artifact, reason }) => {
            assert_eq!((program.as_str(), artifact), ("rot", outcome.artifact.clone()));
            assert!(reason.contains("another program"), "{reason}");
        }
        other => panic!("expected Load error, got {other:?}"),
    }
    match Kernel::load(&cache.path().join("missing.so"), &program("div")) {
        Err(StencilError::Load { .. }) => {}
        other => panic!("expected Load error, got {other:?}"),
    }
}

#[test]
fn max_relative_error_compares_outputs() {
    let f = |pairs: &[(&str, &[f64])]| Fields(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.to_vec())).collect());
    assert_eq!(max_relative_error(&f(&[("a", &[1.0, 2.0])]), &f(&[("a", &[1.0, 2.0])])), 0.0);
    assert_eq!(max_relative_error(&f(&[("a", &[1.0, 3.0])]), &f(&[("a", &[1.0, 2.0])])), 0.5);
    assert_eq!(max_relative_error(&f(&[]), &f(&[("a", &[1.0])])), f64::INFINITY);
    assert_eq!(max_relative_error(&f(&[("a", &[1.0])]), &f(&[("a", &[1.0, 1.0])])), f64::INFINITY);
    assert_eq!(max_relative_error(&f(&[("a", &[f64::NAN])]), &f(&[("a", &[1.0])])), f64::INFINITY);
    assert_eq!(max_relative_error(&f(&[("a", &[0.0])]), &f(&[("a", &[0.0])])), 0.0);
}

#[test]
fn kernels_and_outcomes_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Kernel>();
    send_sync::<CompileOutcome>();
    send_sync::<StencilError>();
    send_sync::<Program>();
}

#[test]
fn a_loaded_kernel_holds_its_library_against_the_collector() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let outcome = compile_on(&program("div"), &provider, &config(cache.path())).unwrap();
    let kernel = Kernel::load(&outcome.artifact, &program("div")).unwrap();
    assert!(
        !gridkey_fs::remove_if_unlocked(&outcome.artifact).unwrap(),
        "a loaded kernel holds a shared lock on its library (ADR 0009)"
    );
    assert!(outcome.artifact.is_file());
    drop(kernel);
    // A compiler another test of this binary forks meanwhile holds the descriptor until it execs.
    assert!(gridkey_fs::remove_once_unlocked(&outcome.artifact, std::time::Duration::from_secs(10)).unwrap());
    assert!(!outcome.artifact.exists());
}

#[test]
fn a_library_altered_on_disk_at_the_same_size_that_still_loads_is_rebuilt_not_loaded() {
    use object::{Object, ObjectSection};
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 2).provider(Layout::COrder);
    let div = program("div");
    let outcome = compile_on(&div, &provider, &config(cache.path())).unwrap();
    assert!(outcome.built);
    // Flip a letter of the compiler's `.comment` note: same size, still a valid library that the
    // dynamic loader maps and runs exactly as before.
    let mut bytes = fs::read(&outcome.artifact).unwrap();
    let (at, len) = object::File::parse(&*bytes)
        .unwrap()
        .section_by_name(".comment")
        .and_then(|s| s.file_range())
        .expect("the compiler writes a .comment section");
    let at = (at..at + len).map(|i| i as usize).find(|&i| bytes[i].is_ascii_alphabetic()).unwrap();
    bytes[at] ^= 0x20;
    let mut perms = fs::metadata(&outcome.artifact).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&outcome.artifact, perms).unwrap();
    fs::write(&outcome.artifact, &bytes).unwrap();
    match Kernel::load(&outcome.artifact, &div) {
        Err(StencilError::Load { reason, .. }) => assert!(reason.contains("checksum mismatch"), "{reason}"),
        other => panic!("an altered library is not loaded: {other:?}"),
    }
    let again = compile_on(&div, &provider, &config(cache.path())).unwrap();
    assert!(again.built, "the altered library is a build-cache miss: {again:?}");
    assert_eq!(again.artifact, outcome.artifact);
    assert_ne!(fs::read(&again.artifact).unwrap(), bytes, "rebuilt, not the altered bytes");
    let kernel = Kernel::load(&again.artifact, &div).unwrap();
    let inputs = make_inputs(&div, &provider, 3).unwrap();
    let (got, want) = run_both(&kernel, &provider, &inputs);
    assert!(max_relative_error(&got, &want) <= TOLERANCE);
}

#[test]
fn a_kernel_that_was_discarded_is_gone_from_the_build_cache() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let div = program("div");
    let outcome = compile_on(&div, &provider, &config(cache.path())).unwrap();
    let kernel = Kernel::load(&outcome.artifact, &div).unwrap();
    assert!(kernel.discard().unwrap());
    assert!(!outcome.artifact.exists());
    assert!(compile_on(&div, &provider, &config(cache.path())).unwrap().built, "never served again");
}

/// Writes `value` over the first element of the stored int32 table file at `path` holding
/// `elements` elements, in place (same inode, so every mapping of it sees the change), as a
/// writer sharing the table would.
fn overwrite_first_element(path: &Path, elements: usize, value: i32) {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    let start = fs::metadata(path).unwrap().len() - (elements * 4) as u64;
    let mut f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(start)).unwrap();
    f.write_all(&value.to_le_bytes()).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_table_changed_in_the_window_fails_the_task_and_is_never_cached() {
    let cache = tempfile::tempdir().unwrap();
    let patch = Patch::new(3, 2);
    let provider = patch.provider(Layout::COrder);
    let ct = compile_time(&provider, cache.path());
    let div = program("div");
    // Between conversion and translation, C2E changes in place: a larger index than any real
    // one, which changes what domain inference reads (the codomain's extent).
    let c2e = ct.gather("C2E").unwrap();
    overwrite_first_element(c2e.table_path(), c2e.shape()[0] * c2e.shape()[1], 1000);
    let key = key_inputs(&div, &TranslationOptions::new(), &ct).unwrap().key();
    match compile(&div, &ct, &TranslationOptions::new(), &config(cache.path())) {
        Err(StencilError::TableChanged { program, offset, .. }) => {
            assert_eq!((program.as_str(), offset.as_str()), ("div", "C2E"))
        }
        other => panic!("a translation from a changed table fails its task: {other:?}"),
    }
    let entries = TranslationCache::open(cache.path()).unwrap();
    assert_eq!(entries.get(&key), Err(gridkey_fingerprint::Miss::Absent), "nothing is cached under the original key");
    assert!(files_in(&cache.path().join(BUILD_DIR)).iter().all(|f| !f.ends_with(".so")), "nothing is built");
}

#[test]
fn a_default_spelled_out_and_left_out_are_one_key_and_one_translation() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 1).provider(Layout::COrder);
    let ct = compile_time(&provider, cache.path());
    let div = program("div");
    let left_out = compile(&div, &ct, &TranslationOptions::new(), &config(cache.path())).unwrap();
    assert!(left_out.translated && left_out.built, "{left_out:?}");
    for spec in OPTIONS {
        let spelled: TranslationOptions = [(spec.name.to_owned(), spec.default.to_owned())].into();
        let again = compile(&div, &ct, &spelled, &config(cache.path())).unwrap();
        assert_eq!(again.key, left_out.key, "{}={} spelled out", spec.name, spec.default);
        assert!(!again.translated && !again.built, "{again:?}");
    }
    // The record holds what was keyed: every declared option with its value.
    let record = TranslationCache::open(cache.path()).unwrap().record(&left_out.key).unwrap();
    let every: TranslationOptions = OPTIONS.iter().map(|o| (o.name.to_owned(), o.default.to_owned())).collect();
    assert_eq!(record.options, every);
    assert_eq!(key_inputs(&div, &TranslationOptions::new(), &ct).unwrap(), record);
    // Another value is another key.
    let o3: TranslationOptions = [("opt_level".to_owned(), "3".to_owned())].into();
    assert_ne!(key_inputs(&div, &o3, &ct).unwrap().key(), left_out.key);
}

#[test]
fn options_are_normalised_against_the_declared_ones() {
    let opts = |pairs: &[(&str, &str)]| -> TranslationOptions {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    assert_eq!(normalise_options(&opts(&[])).unwrap(), opts(&[("opt_level", "2")]));
    assert_eq!(normalise_options(&opts(&[("opt_level", "0")])).unwrap(), opts(&[("opt_level", "0")]));
    for spec in OPTIONS {
        assert!(spec.accepted.contains(&spec.default), "{}: the default is accepted", spec.name);
    }
    match normalise_options(&opts(&[("fast_math", "1")])) {
        Err(StencilError::UnknownOption { option, known }) => {
            assert_eq!((option.as_str(), known.as_str()), ("fast_math", "opt_level"))
        }
        other => panic!("expected UnknownOption, got {other:?}"),
    }
    // Exact spellings only: "02" would otherwise be a second key for -O2.
    for bad in ["02", " 2", "4", ""] {
        match normalise_options(&opts(&[("opt_level", bad)])) {
            Err(StencilError::OptionValue { option, value, accepted }) => {
                assert_eq!((option.as_str(), value.as_str()), ("opt_level", bad));
                assert_eq!(accepted, "\"0\", \"1\", \"2\", \"3\"");
            }
            other => panic!("{bad:?}: expected OptionValue, got {other:?}"),
        }
    }
}

#[test]
fn a_hit_puts_back_a_deleted_key_input_record() {
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(2, 1).provider(Layout::COrder);
    let div = program("div");
    let first = compile_on(&div, &provider, &config(cache.path())).unwrap();
    let tc = TranslationCache::open(cache.path()).unwrap();
    let record = tc.record(&first.key).unwrap();
    for damage in [None, Some(&b"{ not json"[..])] {
        fs::remove_file(tc.record_path(&first.key)).unwrap();
        if let Some(bytes) = damage {
            fs::write(tc.record_path(&first.key), bytes).unwrap();
        }
        assert!(tc.record(&first.key).is_none());
        let hit = compile_on(&div, &provider, &config(cache.path())).unwrap();
        assert!(!hit.translated, "{hit:?}");
        assert_eq!(tc.record(&first.key).as_ref(), Some(&record), "the hit wrote the record again ({damage:?})");
    }
}

#[test]
fn a_library_is_written_like_every_cache_file_and_a_full_disk_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    let provider = Patch::new(1, 1).provider(Layout::COrder);
    let div = program("div");
    // A full disk while the library is written (the fault hook on `.so` paths only): a typed
    // error naming the library, nothing left in the build cache, the translation entry kept.
    let fault = gridkey_fs::Fault::parse("enospc:1000:.so").unwrap();
    let full = CompileConfig { fault: Some(fault), ..config(cache.path()) };
    let err = compile_on(&div, &provider, &full).unwrap_err();
    let StencilError::Io { ref program, action, ref path, ref source } = err else { panic!("{err:?}") };
    assert_eq!((program.as_str(), action, source.raw_os_error()), ("div", "write", Some(libc::ENOSPC)), "{err}");
    assert!(path.starts_with(cache.path().join(BUILD_DIR)) && path.extension().is_some_and(|e| e == "so"), "{err}");
    assert!(err.to_string().contains("has space"), "{err}");
    assert_eq!(files_in(&cache.path().join(BUILD_DIR)), Vec::<String>::new(), "no temp file, no library");

    // Without the hook: a translation-cache hit, the library built, read-only, alone in build-v2.
    let outcome = compile_on(&div, &provider, &config(cache.path())).unwrap();
    assert!(!outcome.translated && outcome.built, "{outcome:?}");
    let mode = fs::metadata(&outcome.artifact).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "the library is read-only: {mode:o}");
    assert_eq!(files_in(&cache.path().join(BUILD_DIR)).len(), 1);
    Kernel::load(&outcome.artifact, &div).unwrap();
}
