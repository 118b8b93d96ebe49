//! The worker protocol's frame decoder on arbitrary bytes, both directions: a stream of frames
//! read as `ToWorker` (what a worker decodes on stdin) and as `FromWorker` (what the parent
//! decodes). A decoded task goes on as in a worker, with the cache directory replaced by a
//! private one: its program is decoded and the task rehydrated (tables opened by digest). Any
//! input is an error or a message, never a panic and never an allocation beyond the frame limit.
#![no_main]

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use gridkey_jobs::protocol::{read_frame, FromWorker, ToWorker};
use libfuzzer_sys::fuzz_target;

fn cache() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor::new(data);
    for _ in 0..8 {
        match read_frame::<ToWorker, _>(&mut input) {
            Ok(Some(ToWorker::Task { task, .. })) => {
                let mut task = *task;
                let _ = gridkey_stencil::Program::decode(&task.encoding);
                task.settings.cache_dir = cache().path().to_path_buf();
                if let Ok(t) = task.rehydrate() {
                    assert!(Arc::strong_count(&t.provider) >= 1);
                }
            }
            Ok(Some(ToWorker::Shutdown)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let mut input = Cursor::new(data);
    for _ in 0..8 {
        match read_frame::<FromWorker, _>(&mut input) {
            Ok(Some(FromWorker::Done { result: Ok(bytes), .. })) => {
                let _ = postcard::from_bytes::<gridkey_stencil::CompileOutcome>(&bytes);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});
