//! Writes the seed corpora of every fuzz target into `fuzz/corpus/<target>/` from real files:
//! the grid tests' small ICON and MPAS fixtures and the headers of the shipped grids
//! (`grid_header`); the tables a conversion of the shipped MPAS grid stores (`npy_open`); the
//! translation entries and key-input records of the eight programs on it (`translation_entry`,
//! `key_record`); and the frames a parent and a worker exchange for them (`worker_frame`).
//! Run from `fuzz/`: `cargo run --release --example seed_corpora`.

#[allow(dead_code)]
#[path = "../../crates/gridkey-grid/tests/common/mod.rs"]
mod fixtures;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gridkey_fingerprint::{TranslationCache, TranslationOptions};
use gridkey_jobs::protocol::{FromWorker, ToWorker, WireFailure, WireTask};
use gridkey_jobs::CompilationTask;
use gridkey_offsets::{compile_time_offset_provider, Entry};
use gridkey_store::TableStore;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = PathBuf::from("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let grids = Path::new("../data/grids");
    let tmp = tempfile::tempdir().unwrap();

    // grid_header: two small complete files and the first 4 KiB of each real one.
    for (name, fixture) in [("icon_fixture.nc", fixtures::icon()), ("mpas_fixture.nc", fixtures::mpas())] {
        let path = fixture.write_in(tmp.path(), name);
        write("grid_header", name, &std::fs::read(path).unwrap());
    }
    for name in ["icon_grid_0013_R02B04_R.nc", "oQU480.231010.nc"] {
        let bytes = std::fs::read(grids.join(name)).unwrap();
        write("grid_header", &format!("{name}.head"), &bytes[..4096.min(bytes.len())]);
    }

    // npy_open: every table of the MPAS grid as stored, behind the 4 bytes saying what is expected.
    let grid = gridkey_grid::read_grid(&grids.join("oQU480.231010.nc")).unwrap();
    let cache = tmp.path().join("cache");
    let store = TableStore::open(&cache).unwrap();
    let ct = Arc::new(compile_time_offset_provider(grid.provider(), &store).unwrap());
    for (offset, entry) in ct.entries() {
        if let Entry::Gather(c) = entry {
            let spec = c.spec();
            let mut seed = vec![if spec.dtype == gridkey_digest::Dtype::I32 { 0 } else { 1 }];
            seed.extend_from_slice(&(spec.shape[0] as u16).to_le_bytes());
            seed.push(spec.shape[1] as u8);
            seed.extend_from_slice(&std::fs::read(store.path_of(&spec.digest)).unwrap());
            write("npy_open", &format!("{offset}.npy"), &seed);
        }
    }

    // translation_entry and key_record: the eight programs translated and stored.
    let options = TranslationOptions::new();
    let tc = TranslationCache::open(&cache).unwrap();
    let programs = gridkey_stencil::icon_programs();
    for p in &programs {
        let inputs = gridkey_stencil::key_inputs(p, &options, &ct).unwrap();
        let source = gridkey_stencil::translate(p, &ct, &inputs.options).unwrap();
        let key = tc.put(&inputs, source.as_bytes()).unwrap();
        let mut seed = key.to_hex().as_bytes().chunks(2).map(|h| u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap()).collect::<Vec<u8>>();
        seed.extend_from_slice(&std::fs::read(tc.entry_path(&key)).unwrap());
        write("translation_entry", &format!("{}.bin", p.name()), &seed);
        write("key_record", &format!("{}.json", p.name()), &std::fs::read(tc.record_path(&key)).unwrap());
    }

    // worker_frame: the frames of one batch, both directions.
    let base = gridkey_settings::Settings::default();
    let compiler = gridkey_stencil::identify_compiler(&base.compiler, &cache).unwrap();
    let settings = Arc::new(gridkey_settings::TaskSettings::new(&base, cache.canonicalize().unwrap(), compiler).unwrap());
    let mut to_worker = Vec::new();
    for (id, p) in programs.iter().enumerate() {
        let task = CompilationTask {
            program: p.name().to_owned(),
            encoding: p.encode(),
            options: options.clone(),
            provider: ct.clone(),
            settings: settings.clone(),
        };
        let frame = postcard::to_stdvec_cobs(&ToWorker::Task { id: id as u64, task: Box::new(WireTask::from_task(&task).unwrap()) }).unwrap();
        write("worker_frame", &format!("task_{}", p.name()), &frame);
        to_worker.extend_from_slice(&frame);
    }
    to_worker.extend_from_slice(&postcard::to_stdvec_cobs(&ToWorker::Shutdown).unwrap());
    write("worker_frame", "batch", &to_worker);
    let hello = postcard::to_stdvec_cobs(&FromWorker::Hello { protocol: gridkey_jobs::protocol::PROTOCOL_VERSION, pid: 4242 }).unwrap();
    let failed = FromWorker::Done { id: 1, result: Err(WireFailure::Handler("the compiler failed".into())) };
    let outcome = gridkey_stencil::CompileOutcome {
        program: "div".into(),
        key: gridkey_stencil::key_inputs(&programs[0], &options, &ct).unwrap().key(),
        translated: true,
        translate_seconds: 0.01,
        built: true,
        build_seconds: 0.2,
        key_seconds: 0.001,
        lookup_seconds: 0.001,
        lock_seconds: 0.0001,
        library_check_seconds: 0.002,
        artifact: cache.join("build-v2/0123.so"),
        miss_reason: Some("local: no translation entry".into()),
    };
    let done = FromWorker::Done { id: 0, result: Ok(postcard::to_stdvec(&outcome).unwrap()) };
    let mut from_worker = hello.clone();
    from_worker.extend_from_slice(&postcard::to_stdvec_cobs(&done).unwrap());
    from_worker.extend_from_slice(&postcard::to_stdvec_cobs(&failed).unwrap());
    write("worker_frame", "from_worker", &from_worker);
    println!("seed corpora written under fuzz/corpus/");
}
