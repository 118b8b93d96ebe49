//! Worker protocol v5 (ADR 0013, ADR 0032): frames round-trip, anything else is an error, and a task's
//! payload does not grow with table size.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use gridkey_jobs::protocol::{
    read_frame, write_frame, FromWorker, ToWorker, WireError, WireFailure, WireOffset, WireTask,
};
use gridkey_jobs::{CompilationTask, Settings, TaskSettings};
use gridkey_offsets::{
    compile_time_offset_provider, Connectivity, Dimension, DimensionKind, Entry, IndexTable, OffsetProvider,
};
use gridkey_settings::{CompilerSettings, IdentifiedCompiler, ResolvedCompiler};
use gridkey_store::TableStore;
use ndarray::Array2;
use proptest::prelude::*;

/// A runtime provider whose one gather, C2E, has table `t`.
fn c2e_provider(t: Array2<i32>) -> OffsetProvider {
    let mut p = OffsetProvider::new();
    let c = Connectivity::from_host(
        Dimension::horizontal("Cell"),
        Dimension::local("C2EDim"),
        Dimension::horizontal("Edge"),
        None,
        IndexTable::I32(t.into_shared()),
    )
    .unwrap();
    p.push("C2E", Entry::Gather(Arc::new(c))).unwrap();
    p
}

fn task(cache: &Path, rows: usize) -> CompilationTask {
    let mut p = c2e_provider(Array2::from_shape_fn((rows, 3), |(i, j)| ((i + j) % rows) as i32));
    p.push("Koff", Entry::Dimension(Dimension::new("K", DimensionKind::Vertical))).unwrap();
    let ct = compile_time_offset_provider(&p, &TableStore::open(cache).unwrap()).unwrap();
    CompilationTask {
        program: "div".into(),
        encoding: vec![1, 2, 3],
        options: Default::default(),
        provider: Arc::new(ct),
        settings: Arc::new(task_settings(cache, "ccache gcc", "0123456789abcdef0123456789abcdef")),
    }
}

/// Task settings with verify_tables on and the compiler `words` identified as `identity`.
fn task_settings(cache: &Path, words: &str, identity: &str) -> TaskSettings {
    let mut compiler = CompilerSettings::from_command(words, |_| None).unwrap();
    compiler.resolved = Some(ResolvedCompiler { program: "/usr/bin/ccache".into() });
    let compiler = IdentifiedCompiler::new(&compiler, identity.to_owned()).unwrap();
    let settings = Settings { verify_tables: true, ..Settings::default() };
    TaskSettings::new(&settings, cache.canonicalize().unwrap(), compiler).unwrap()
}

#[test]
fn task_settings_need_an_identified_compiler_and_an_absolute_directory() {
    let dir = tempfile::tempdir().unwrap();
    let unresolved = CompilerSettings::from_command("gcc", |_| None).unwrap();
    let err = IdentifiedCompiler::new(&unresolved, "id".into()).unwrap_err();
    assert!(err.to_string().contains("has no resolved program yet"), "{err}");
    let mut resolved = unresolved.clone();
    resolved.resolved = Some(ResolvedCompiler { program: "/usr/bin/gcc".into() });
    let err = IdentifiedCompiler::new(&resolved, String::new()).unwrap_err();
    assert!(err.to_string().contains("has no identity yet"), "{err}");
    let compiler = IdentifiedCompiler::new(&resolved, "id".into()).unwrap();
    let err = TaskSettings::new(&Settings::default(), "relative/cache".into(), compiler).unwrap_err();
    assert!(err.to_string().starts_with("cache directory \"relative/cache\""), "{err}");

    // A frame whose compiler has no identity does not decode into a task.
    let good = task_settings(dir.path(), "gcc", "x");
    let mut bytes = postcard::to_stdvec(&good).unwrap();
    let at = bytes.windows(2).rposition(|w| w == [1, b'x']).unwrap();
    bytes.remove(at + 1);
    bytes[at] = 0;
    assert!(postcard::from_bytes::<TaskSettings>(&bytes).is_err());
}

fn frame_len(task: &CompilationTask) -> usize {
    let mut out = Vec::new();
    write_frame(&mut out, &ToWorker::Task { id: 0, task: Box::new(WireTask::from_task(task).unwrap()) }).unwrap();
    out.len()
}

#[test]
fn a_task_frame_does_not_grow_with_table_size() {
    // Row counts whose varints would differ in length (1 and 4 bytes): shapes are fixed-width.
    let dir = tempfile::tempdir().unwrap();
    let small = frame_len(&task(dir.path(), 100));
    let big = frame_len(&task(dir.path(), 3_000_000));
    assert_eq!(small, big, "no table bytes travel");
    assert!(small < 400, "a task frame is {small} bytes");
}

#[test]
fn a_task_round_trips_and_rehydrates_the_same_provider() {
    let dir = tempfile::tempdir().unwrap();
    let t = task(dir.path(), 100);
    let wire = WireTask::from_task(&t).unwrap();
    let mut buf = Vec::new();
    write_frame(&mut buf, &ToWorker::Task { id: 9, task: Box::new(wire.clone()) }).unwrap();
    let back: ToWorker = read_frame(&mut Cursor::new(buf)).unwrap().unwrap();
    assert_eq!(back, ToWorker::Task { id: 9, task: Box::new(wire.clone()) });
    let again = wire.rehydrate().unwrap();
    assert_eq!(again.program, "div");
    assert_eq!(again.settings, t.settings);
    let (a, b) = (t.provider.gather("C2E").unwrap(), again.provider.gather("C2E").unwrap());
    assert_eq!(a.spec(), b.spec());
    assert_eq!(again.provider.entries().len(), 2);
}

#[test]
fn a_missing_table_fails_rehydration_naming_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let t = task(dir.path(), 100);
    let spec = *t.provider.gather("C2E").unwrap().spec();
    let path = TableStore::open(dir.path()).unwrap().path_of(&spec.digest);
    std::fs::remove_file(&path).unwrap();
    let err = WireTask::from_task(&t).unwrap().rehydrate().unwrap_err();
    assert!(
        matches!(&err, WireError::Offsets(gridkey_offsets::OffsetsError::Store { offset, .. }) if offset == "C2E"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("offset C2E") && text.contains(&path.display().to_string()), "{text}");
}

#[test]
fn a_frame_of_another_protocol_fails_rehydration_with_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let wire = WireTask::from_task(&task(dir.path(), 100)).unwrap();
    let mut bad_dtype = wire.clone();
    let mut bad_kind = wire;
    match (&mut bad_dtype.offsets[0], &mut bad_kind.offsets[0]) {
        (WireOffset::Gather { dtype, .. }, WireOffset::Gather { local, .. }) => {
            *dtype = "<f8".into();
            local.kind = 7;
        }
        other => panic!("C2E travels as a gather: {other:?}"),
    }
    let err = bad_dtype.rehydrate().unwrap_err();
    assert!(matches!(&err, WireError::Dtype { offset, dtype } if offset == "C2E" && dtype == "<f8"), "{err:?}");
    let err = bad_kind.rehydrate().unwrap_err();
    assert!(matches!(&err, WireError::DimensionKind { name, kind: 7 } if name == "C2EDim"), "{err:?}");
    assert!(err.to_string().ends_with("run the parent and its workers from the same gridkey"), "{err}");
}

#[test]
fn clean_end_garbage_and_cut_frames() {
    let none: Option<FromWorker> = read_frame(&mut Cursor::new(Vec::new())).unwrap();
    assert!(none.is_none(), "end of stream before a frame is a clean end");
    let err = read_frame::<FromWorker, _>(&mut Cursor::new(b"hello world\n\0".to_vec())).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let mut buf = Vec::new();
    write_frame(&mut buf, &FromWorker::Done { id: 1, result: Err(WireFailure::Panic("boom".into())) }).unwrap();
    buf.pop();
    let err = read_frame::<FromWorker, _>(&mut Cursor::new(buf)).unwrap_err();
    assert!(err.to_string().contains("ended inside a frame"), "{err}");
}

proptest! {
    /// Fuzz target for the worker frame decoder, both directions: arbitrary bytes never panic.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut input = Cursor::new(bytes.clone());
        for _ in 0..4 {
            match read_frame::<ToWorker, _>(&mut input) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let mut input = Cursor::new(bytes);
        for _ in 0..4 {
            match read_frame::<FromWorker, _>(&mut input) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// A valid result frame with bytes overwritten decodes to something or is refused, never a
    /// panic; one with its terminator intact stays one frame.
    #[test]
    fn a_damaged_frame_never_panics(id in any::<u64>(), text in ".{0,40}", at in any::<usize>(), patch in proptest::collection::vec(any::<u8>(), 1..8)) {
        let mut buf = Vec::new();
        write_frame(&mut buf, &FromWorker::Done { id, result: Err(WireFailure::Handler(text)) }).unwrap();
        let at = at % buf.len();
        let end = (at + patch.len()).min(buf.len());
        buf[at..end].copy_from_slice(&patch[..end - at]);
        let mut input = Cursor::new(buf);
        for _ in 0..8 {
            match read_frame::<FromWorker, _>(&mut input) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    #[test]
    fn results_round_trip(id in any::<u64>(), ok in proptest::collection::vec(any::<u8>(), 0..100), text in ".*") {
        for result in [
            Ok(ok.clone()),
            Err(WireFailure::Handler(text.clone())),
            Err(WireFailure::Rehydrate(text.clone())),
            Err(WireFailure::Damaged(text.clone())),
        ] {
            let msg = FromWorker::Done { id, result };
            let mut buf = Vec::new();
            write_frame(&mut buf, &msg).unwrap();
            prop_assert_eq!(buf.iter().filter(|&&b| b == 0).count(), 1, "one terminator, no zero inside");
            let back: FromWorker = read_frame(&mut Cursor::new(buf)).unwrap().unwrap();
            prop_assert_eq!(back, msg);
        }
    }
}

/// A compile-time table kept unstored (ADR 0053) never travels as a reference to a file that is
/// not there: the task is refused in the parent, naming the offset; once stored, it travels.
#[test]
fn a_table_kept_unstored_is_refused_in_the_parent_naming_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let stored = task(dir.path(), 100);
    // Another table than the task's: not stored in its cache yet.
    let p = c2e_provider(Array2::from_shape_fn((100, 3), |(i, j)| ((i + 2 * j) % 99) as i32));
    let store = TableStore::open(dir.path()).unwrap().checked_by_readers(true);
    let memo = gridkey_offsets::ConversionMemo::new();
    let kept = memo.provider_unstored(&p, &store).unwrap();
    assert_eq!(kept.kept_tables(), 1);
    let task = CompilationTask { provider: Arc::new(kept), ..stored };
    let err = WireTask::from_task(&task).unwrap_err();
    assert!(matches!(&err, WireError::TableNotStored { offset } if offset == "C2E"), "{err:?}");
    assert!(err.to_string().contains("store it first"), "{err}");
    let now = memo.store_kept(&task.provider, &store).unwrap();
    let task = CompilationTask { provider: Arc::new(now), ..task };
    // What a worker does with the frame: it opens the stored table from the task's cache.
    let again = WireTask::from_task(&task).unwrap().rehydrate().unwrap();
    assert_eq!(again.provider.gather("C2E").unwrap().spec(), task.provider.gather("C2E").unwrap().spec());
}
