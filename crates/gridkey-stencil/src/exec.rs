//! Execution on the runtime offset provider: the built kernel and the plain Rust reference.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::io::Read;
use std::path::{Path, PathBuf};

use gridkey_fingerprint::content_digest;
use gridkey_offsets::{Entry, IndexTable, OffsetProvider};
use ndarray::ArrayView2;
use xxhash_rust::xxh3::xxh3_64;

use crate::emit::status;
use crate::infer::resolve;
use crate::{infer_domains_runtime, FieldRole, FieldShape, Need, Program, Reduce, StencilError, ABI_VERSION};

/// Field values by field name: f64, dense fields one value per element, sparse fields
/// `rows · cols` values in C order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields(pub BTreeMap<String, Vec<f64>>);

impl Fields {
    /// The values of field `name`.
    pub fn get(&self, name: &str) -> Option<&[f64]> {
        self.0.get(name).map(Vec::as_slice)
    }
}

/// For each dimension that is the domain of a gather in `provider`, the rows of the first such
/// table in provider order (metadata only, no table is read).
pub fn dimension_sizes(provider: &OffsetProvider) -> BTreeMap<String, usize> {
    let mut sizes = BTreeMap::new();
    for (_, entry) in provider.entries() {
        if let Entry::Gather(c) = entry {
            sizes.entry(c.domain().name().to_owned()).or_insert(c.shape()[0]);
        }
    }
    sizes
}

/// splitmix64: a small, fixed PRNG, so inputs are the same on every machine and release.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0.5, 1.5)`.
    fn value(&mut self) -> f64 {
        0.5 + (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Deterministic input fields for `program` on the runtime tables of `provider`: every input
/// field, sized as the program needs (a field on a dimension the program only reads through a
/// table gets the dimension's size from [`dimension_sizes`] when that covers the largest index),
/// with values in `[0.5, 1.5)` from splitmix64 seeded by `seed` and the field's name (so a
/// field's values do not depend on the other fields).
///
/// Errors: those of [`infer_domains_runtime`].
pub fn make_inputs(program: &Program, provider: &OffsetProvider, seed: u64) -> Result<Fields, StencilError> {
    let facts = infer_domains_runtime(program, provider)?;
    let needs = facts.field_needs(program)?;
    let sizes = dimension_sizes(provider);
    let mut fields = Fields::default();
    for (field, need) in program.fields().iter().zip(needs) {
        if program.role(&field.name) != Some(FieldRole::Input) {
            continue;
        }
        let len = match (need, &field.shape) {
            (Need::AtLeast(n), FieldShape::Dense { dim }) => sizes.get(dim).copied().unwrap_or(n).max(n),
            (need, _) => need.min_len(),
        };
        let mut rng = SplitMix64(seed ^ xxh3_64(field.name.as_bytes()));
        fields.0.insert(field.name.clone(), (0..len).map(|_| rng.value()).collect());
    }
    Ok(fields)
}

/// The ABI structs of [`crate::emit_c`], mirrored.
#[repr(C)]
struct GkTable {
    data: *const c_void,
    rows: i64,
    cols: i64,
    stride0: i64,
    stride1: i64,
    width: i32,
}

#[repr(C)]
struct GkField {
    data: *mut f64,
    len: i64,
}

#[repr(C)]
#[derive(Default)]
struct GkStatus {
    kind: i32,
    slot: i32,
    expected: i64,
    expected_max: i64,
    found: i64,
    row: i64,
    col: i64,
}

type RunFn = unsafe extern "C" fn(*const GkTable, *const GkField, *mut GkStatus) -> i32;
type AbiFn = unsafe extern "C" fn() -> i32;
type DigestFn = unsafe extern "C" fn() -> *const c_char;

/// A loaded kernel: the shared library of one program, ready to run on runtime tables.
pub struct Kernel {
    program: Program,
    artifact: PathBuf,
    run: RunFn,
    // Keeps the code behind `run` mapped; dropped before the lock.
    _library: PrivateCopy,
    // A shared lock on the library file while it is loaded: `gridkey cache gc` spares it (ADR 0009).
    _lock: std::fs::File,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("program", &self.program.name()).field("artifact", &self.artifact).finish()
    }
}

impl Kernel {
    /// Loads the shared library `artifact` of the build cache (from [`crate::compile`]) for
    /// `program`: takes a shared lock on the file (ADR 0009), checks its checksum trailer
    /// against its bytes and its name (ADR 0023) and that it is a complete ELF file, loads a
    /// private copy of the checked bytes, and checks that it has kernel ABI [`ABI_VERSION`] and
    /// was generated from this very program (the library reports the digest of
    /// [`Program::encode`]).
    ///
    /// Loading runs the library's initialisers: load only libraries this crate built.
    ///
    /// Errors: [`StencilError::Load`] naming the program and file.
    pub fn load(artifact: &Path, program: &Program) -> Result<Kernel, StencilError> {
        let err = |reason: String| StencilError::Load {
            program: program.name().to_owned(),
            artifact: artifact.to_path_buf(),
            reason,
        };
        let key = artifact.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        // The shared lock keeps `gridkey cache gc` away while the kernel is loaded, as for a
        // mapped table (ADR 0009); no symlink is followed, and the path still names the file
        // held once the lock is ours.
        let lock = gridkey_fs::lock::open_shared(artifact).map_err(|e| err(e.to_string()))?;
        // Marks the library as used now, for the collector's live-run rule (ADR 0026).
        gridkey_fs::touch(&lock);
        let mut bytes = Vec::new();
        (&lock).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
        // The bytes must be the ones written when it was built (ADR 0023), and a complete ELF
        // file: dlopen maps segments without checking that the file holds them.
        let elf = crate::library::checked_elf(key, &bytes).map_err(err)?;
        check_complete_elf(elf).map_err(err)?;
        // The loader maps a private copy of the checked bytes, so that what runs is what was
        // checked, whatever happens to the cache file afterwards.
        let library = load_private_copy(artifact, elf).map_err(err)?;
        // SAFETY: the symbols are declared in the emitted C with exactly these signatures.
        let (abi, digest, run) = unsafe {
            let abi = *library.library.get::<AbiFn>("gk_abi_version").map_err(|e| err(loader_error(&e)))?;
            let digest = *library.library.get::<DigestFn>("gk_program_digest").map_err(|e| err(loader_error(&e)))?;
            let run = *library.library.get::<RunFn>("gk_run").map_err(|e| err(loader_error(&e)))?;
            (abi, digest, run)
        };
        // SAFETY: both functions take no argument and return a constant.
        let found_abi = unsafe { abi() };
        if found_abi != ABI_VERSION {
            return Err(err(format!("kernel ABI {found_abi}, this frontend runs ABI {ABI_VERSION}")));
        }
        // SAFETY: `gk_program_digest` returns a pointer to a NUL-terminated string literal.
        let found = unsafe { CStr::from_ptr(digest()) }.to_string_lossy().into_owned();
        let want = content_digest(&program.encode());
        if found != want {
            return Err(err(format!("it was built from program encoding {found}, not {want} (another program)")));
        }
        Ok(Kernel { program: program.clone(), artifact: artifact.to_path_buf(), run, _library: library, _lock: lock })
    }

    /// Checks `bytes`, the contents of the build-cache library `artifact` (`<build key>.so`),
    /// as [`Kernel::load`] does before every load, without loading it: its checksum trailer
    /// matches its bytes and its name (ADR 0023), and it is a complete ELF file. What
    /// `gridkey cache push` uploads passes this check on the very bytes it uploads.
    ///
    /// Errors: [`StencilError::BadLibrary`] naming the file and what is wrong.
    pub fn check_library(artifact: &Path, bytes: &[u8]) -> Result<(), StencilError> {
        let err = |reason: String| StencilError::BadLibrary { artifact: artifact.to_path_buf(), reason };
        let key = artifact.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let elf = crate::library::checked_elf(key, bytes).map_err(err)?;
        check_complete_elf(elf).map_err(err)
    }

    /// The program this kernel computes.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The library file it was loaded from.
    pub fn artifact(&self) -> &Path {
        &self.artifact
    }

    /// Unloads the kernel and removes its library from the build cache, if the library's path
    /// still names the file it was loaded from: what a caller does with a kernel whose results
    /// failed verification, so that it is never served again (ADR 0023). Returns whether the
    /// file was removed (`false`: already gone or replaced by another build).
    ///
    /// Errors: the I/O error of removing the file other than `NotFound`.
    pub fn discard(self) -> std::io::Result<bool> {
        let Kernel { artifact, _library, _lock, .. } = self;
        drop(_library);
        if !gridkey_fs::names_file(&artifact, &_lock) {
            return Ok(false);
        }
        match std::fs::remove_file(&artifact) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Runs the kernel on the runtime tables of `provider` with `inputs`, returning the output
    /// fields. Host tables are passed in place, whatever their strides and integer width; any
    /// other [`gridkey_offsets::TableSource`] is copied to the host once
    /// ([`gridkey_offsets::Connectivity::host_table`]). Temporaries and outputs are allocated
    /// here, sized from the runtime tables; the kernel checks every size against what it was
    /// compiled for before it reads anything.
    ///
    /// Errors: [`StencilError::MissingOffset`], [`StencilError::NotAGather`],
    /// [`StencilError::DimensionMismatch`] (checked here); [`StencilError::Offsets`] when a table
    /// cannot be copied to the host; [`StencilError::MissingField`] for an
    /// input not given; from the kernel: [`StencilError::TableExtent`] when a runtime table's rows
    /// or cols differ from the compiled ones, [`StencilError::FieldLength`],
    /// [`StencilError::IndexOutOfRange`], [`StencilError::KernelStatus`].
    pub fn run(&self, provider: &OffsetProvider, inputs: &Fields) -> Result<Fields, StencilError> {
        let program = &self.program;
        let name = || program.name().to_owned();
        let gathers = resolve(program, provider)?;
        let offsets = program.offsets();
        let host = gathers
            .iter()
            .zip(&offsets)
            .map(|(c, offset)| c.host_table(offset))
            .collect::<Result<Vec<IndexTable>, _>>()
            .map_err(|source| StencilError::Offsets { program: name(), source })?;
        let tables: Vec<GkTable> = host
            .iter()
            .map(|t| {
                let (data, dim, strides, width) = match t {
                    IndexTable::I32(a) => (a.as_ptr().cast::<c_void>(), a.dim(), a.strides(), 4),
                    IndexTable::I64(a) => (a.as_ptr().cast::<c_void>(), a.dim(), a.strides(), 8),
                };
                GkTable {
                    data,
                    rows: dim.0 as i64,
                    cols: dim.1 as i64,
                    stride0: strides[0] as i64,
                    stride1: strides[1] as i64,
                    width,
                }
            })
            .collect();
        // Temporaries and outputs: dense on the domain of the stage that writes them.
        let mut owned: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for stage in program.stages() {
            let rows =
                host[offsets.iter().position(|o| *o == stage.offset).expect("an offset of the program")].shape()[0];
            owned.insert(stage.output.as_str(), vec![0.0; rows]);
        }
        let mut fields = Vec::with_capacity(program.fields().len());
        for field in program.fields() {
            let (data, len) = match owned.get_mut(field.name.as_str()) {
                Some(values) => (values.as_mut_ptr(), values.len()),
                None => {
                    let values = inputs
                        .0
                        .get(&field.name)
                        .ok_or_else(|| StencilError::MissingField { program: name(), field: field.name.clone() })?;
                    // The kernel writes only stage outputs, never an input: the cast to *mut
                    // is only to share one struct between both.
                    (values.as_ptr().cast_mut(), values.len())
                }
            };
            fields.push(GkField { data, len: len as i64 });
        }
        let mut st = GkStatus::default();
        // SAFETY: `tables` point at live tables (`host` holds them) whose rows, cols, strides
        // and width are stated truthfully; `fields` at live buffers of the stated lengths,
        // outputs and temporaries exclusively borrowed. The kernel checks rows, cols, width and
        // lengths against its constants before it reads or writes, and every index before use.
        let rc = unsafe { (self.run)(tables.as_ptr(), fields.as_ptr(), &mut st) };
        drop(fields);
        if rc != status::OK {
            return Err(self.status_error(rc, &st, &offsets));
        }
        let mut out = Fields::default();
        for (field, values) in owned {
            if program.role(field) == Some(FieldRole::Output) {
                out.0.insert(field.to_owned(), values);
            }
        }
        Ok(out)
    }

    fn status_error(&self, rc: i32, st: &GkStatus, offsets: &[String]) -> StencilError {
        let program = self.program.name().to_owned();
        let slot = usize::try_from(st.slot).ok();
        let offset = slot.and_then(|s| offsets.get(s)).cloned();
        let field = slot.and_then(|s| self.program.fields().get(s)).map(|f| f.name.clone());
        let unknown = StencilError::KernelStatus { program: program.clone(), code: rc, slot: st.slot };
        match (rc, offset, field) {
            (status::TABLE_ROWS | status::TABLE_COLS, Some(offset), _) => StencilError::TableExtent {
                program,
                offset,
                axis: if rc == status::TABLE_ROWS { "rows" } else { "cols" },
                compiled: st.expected as u64,
                runtime: st.found as u64,
            },
            (status::FIELD_EXACT | status::FIELD_AT_LEAST, _, Some(field)) => {
                let n = st.expected as usize;
                let need = if rc == status::FIELD_EXACT { Need::Exactly(n) } else { Need::AtLeast(n) };
                StencilError::FieldLength { program, field, need, found: st.found as usize }
            }
            (status::INDEX, Some(offset), _) => StencilError::IndexOutOfRange {
                program,
                offset,
                row: st.row as u64,
                col: st.col as u64,
                index: st.found,
                min: st.expected,
                max: st.expected_max,
            },
            _ => unknown,
        }
    }
}

/// Evaluates `program` in plain Rust on the runtime tables of `provider`, independently of the
/// C path: tables read through ndarray indexing in whatever layout and width they have, the
/// stages in order, neighbours summed in slot order `k = 0, 1, ...` as the kernel does. Returns
/// the output fields.
///
/// Errors: those of [`infer_domains_runtime`]; [`StencilError::MissingField`];
/// [`StencilError::FieldLength`] when an input does not have the length the tables imply.
pub fn evaluate_reference(
    program: &Program,
    provider: &OffsetProvider,
    inputs: &Fields,
) -> Result<Fields, StencilError> {
    let facts = infer_domains_runtime(program, provider)?;
    let needs = facts.field_needs(program)?;
    let gathers = resolve(program, provider)?;
    let offsets = program.offsets();
    let name = || program.name().to_owned();
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (field, need) in program.fields().iter().zip(needs) {
        if program.role(&field.name) != Some(FieldRole::Input) {
            continue;
        }
        let v = inputs
            .0
            .get(&field.name)
            .ok_or_else(|| StencilError::MissingField { program: name(), field: field.name.clone() })?;
        if !need.accepts(v.len()) {
            return Err(StencilError::FieldLength { program: name(), field: field.name.clone(), need, found: v.len() });
        }
        values.insert(field.name.clone(), v.clone());
    }
    for stage in program.stages() {
        let c = gathers[offsets.iter().position(|o| *o == stage.offset).expect("an offset of the program")];
        let table = c.host_table(&stage.offset).map_err(|source| StencilError::Offsets { program: name(), source })?;
        let src = &values[&stage.source];
        let weights = stage.weights.as_ref().map(|w| values[w].as_slice());
        let out = match &table {
            IndexTable::I32(a) => reduce(a.view(), c.skip_value(), src, weights, stage.reduce),
            IndexTable::I64(a) => reduce(a.view(), c.skip_value(), src, weights, stage.reduce),
        };
        let out = out.map_err(|(row, col, index)| StencilError::IndexOutOfRange {
            program: name(),
            offset: stage.offset.clone(),
            row: row as u64,
            col: col as u64,
            index,
            min: 0,
            max: src.len() as i64 - 1,
        })?;
        values.insert(stage.output.clone(), out);
    }
    Ok(Fields(values.into_iter().filter(|(f, _)| program.role(f) == Some(FieldRole::Output)).collect()))
}

/// One stage in Rust; an index outside `src` is returned as `(row, col, index)` (inference
/// has already ruled it out, this keeps the reference free of panics).
fn reduce<T: Copy + Into<i64>>(
    table: ArrayView2<'_, T>,
    skip_value: Option<i64>,
    src: &[f64],
    weights: Option<&[f64]>,
    how: Reduce,
) -> Result<Vec<f64>, (usize, usize, i64)> {
    let (rows, cols) = table.dim();
    (0..rows)
        .map(|i| {
            let (mut acc, mut n) = (0.0, 0u32);
            for k in 0..cols {
                let j: i64 = table[[i, k]].into();
                if Some(j) == skip_value {
                    continue;
                }
                let x = *usize::try_from(j).ok().and_then(|j| src.get(j)).ok_or((i, k, j))?;
                acc += weights.map_or(x, |w| w[i * cols + k] * x);
                n += 1;
            }
            Ok(match how {
                Reduce::Sum => acc,
                Reduce::Mean if n > 0 => acc / f64::from(n),
                Reduce::Mean => 0.0,
            })
        })
        .collect()
}

/// The largest relative difference between `got` and `want` over the fields of `want`:
/// `|a − b| / max(|b|, f64::MIN_POSITIVE)`. A field missing from `got`, a length difference or a
/// NaN gives infinity; no field gives 0.
pub fn max_relative_error(got: &Fields, want: &Fields) -> f64 {
    let mut worst = 0.0f64;
    for (name, b) in &want.0 {
        let Some(a) = got.0.get(name) else {
            return f64::INFINITY;
        };
        if a.len() != b.len() {
            return f64::INFINITY;
        }
        for (&x, &y) in a.iter().zip(b) {
            let e = (x - y).abs() / y.abs().max(f64::MIN_POSITIVE);
            if e.is_nan() {
                return f64::INFINITY;
            }
            worst = worst.max(e);
        }
    }
    worst
}

/// A library loaded from a private copy of its checked bytes. The fields drop in order: the
/// library is unloaded before its anonymous memory file, if it has one, is closed.
struct PrivateCopy {
    library: libloading::Library,
    // Open while the library is loaded, so that its name `/proc/self/fd/N` is not reused.
    _memory: Option<std::os::fd::OwnedFd>,
}

/// Loads `elf` (the checked bytes of the library at `artifact`) from a private copy: an
/// anonymous memory file (`memfd_create(2)`), sealed against any change once written and loaded
/// through `/proc/self/fd/N`, so that a load creates and removes no file of the cache's file
/// system (ADR 0048). Where that cannot be done (no `memfd_create`, memory files not
/// executable, no `/proc`), a temp file beside the library ([`load_temp_copy`]).
fn load_private_copy(artifact: &Path, elf: &[u8]) -> Result<PrivateCopy, String> {
    match load_memory_copy(elf) {
        Some(copy) => Ok(copy),
        None => load_temp_copy(artifact, elf),
    }
}

/// `elf` loaded from a new anonymous memory file, sealed (no write, no size change, no new seal)
/// before it is loaded, or `None` where the system cannot make, seal or load one.
fn load_memory_copy(elf: &[u8]) -> Option<PrivateCopy> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::os::fd::AsRawFd as _;
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // MFD_EXEC (Linux 6.3) keeps the file executable where `vm.memfd_noexec` would not; older
    // kernels refuse the flag.
    let memory = rustix::fs::memfd_create(c"gridkey-kernel", flags | MemfdFlags::EXEC)
        .or_else(|_| rustix::fs::memfd_create(c"gridkey-kernel", flags))
        .ok()?;
    let mut file = std::fs::File::from(memory);
    std::io::Write::write_all(&mut file, elf).ok()?;
    let seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL;
    rustix::fs::fcntl_add_seals(&file, seals).ok()?;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    // The loader hands back a library already loaded under the same name without opening the
    // file: a name still held by a library that outlived its memory file (an unload that left
    // it mapped) is not used.
    // SAFETY: RTLD_NOLOAD never loads a library, so no initialiser runs.
    let taken =
        unsafe { libloading::os::unix::Library::open(Some(&path), libc::RTLD_NOLOAD | libc::RTLD_LAZY) }.is_ok();
    if taken {
        return None;
    }
    // SAFETY: as in `load_temp_copy`: the checked bytes of a library `compile` built.
    let library = unsafe { libloading::Library::new(&path) }.ok()?;
    Some(PrivateCopy { library, _memory: Some(file.into()) })
}

/// `elf` loaded from a temp file with a unique name beside the library at `artifact`, readable
/// by this user only, unlinked once loaded (so the name the loader records is never reused
/// while the library is loaded); where no temp file can be written there (a read-only cache),
/// the library file itself is loaded (ADR 0023, ADR 0036).
fn load_temp_copy(artifact: &Path, elf: &[u8]) -> Result<PrivateCopy, String> {
    let dir = artifact.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let copy = tempfile::Builder::new()
        .prefix(&format!("{}load-", gridkey_fs::TEMP_PREFIX))
        .suffix(".so")
        .rand_bytes(16)
        .tempfile_in(dir)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, elf)?;
            std::io::Write::flush(&mut f)?;
            Ok(f)
        });
    let path = match &copy {
        Ok(copy) => copy.path().to_path_buf(),
        // dlopen searches the library path for a bare file name; a path with a slash it opens.
        Err(_) if artifact.parent().is_some_and(|p| !p.as_os_str().is_empty()) => artifact.to_path_buf(),
        Err(_) => Path::new(".").join(artifact),
    };
    // SAFETY: the library was generated by `emit_c`, built by `compile` and its bytes checked
    // against the checksum written when it was built; its only initialisers are the C runtime's.
    let library = unsafe { libloading::Library::new(&path) }.map_err(|e| loader_error(&e));
    drop(copy);
    Ok(PrivateCopy { library: library?, _memory: None })
}

/// The loader's error with the system's own words (`dlerror(3)`), which `libloading` keeps in
/// the error's source rather than in its message.
fn loader_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}

/// Checks that `bytes` is an ELF file whose every segment and section lies inside it.
fn check_complete_elf(bytes: &[u8]) -> Result<(), String> {
    use object::{Object, ObjectSection, ObjectSegment};
    let file = object::File::parse(bytes).map_err(|e| format!("not a shared library ({e})"))?;
    for segment in file.segments() {
        segment.data().map_err(|e| format!("truncated shared library ({e})"))?;
    }
    for section in file.sections() {
        section.data().map_err(|e| format!("truncated shared library ({e})"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared library built by the system's C compiler from one function `gk_answer`
    /// returning `answer`, and its bytes.
    fn library(dir: &Path, answer: i32) -> (PathBuf, Vec<u8>) {
        let source = dir.join(format!("answer{answer}.c"));
        let artifact = dir.join(format!("answer{answer}.so"));
        std::fs::write(&source, format!("int gk_answer(void) {{ return {answer}; }}\n")).unwrap();
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&artifact)
            .arg(&source)
            .status()
            .unwrap();
        assert!(status.success(), "cc failed: {status}");
        let bytes = std::fs::read(&artifact).unwrap();
        (artifact, bytes)
    }

    fn answer(copy: &PrivateCopy) -> i32 {
        // SAFETY: `gk_answer` is declared in `library` with this signature.
        unsafe { (*copy.library.get::<unsafe extern "C" fn() -> i32>(b"gk_answer").unwrap())() }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_load_maps_a_sealed_memory_file_and_writes_nothing_beside_the_library() {
        let dir = tempfile::tempdir().unwrap();
        let (artifact, bytes) = library(dir.path(), 42);
        let before = names(dir.path());
        let copy = load_private_copy(&artifact, &bytes).unwrap();
        assert_eq!(answer(&copy), 42);
        assert_eq!(names(dir.path()), before, "a load from memory writes no file beside the library");
        let memory = copy._memory.as_ref().expect("this Linux makes executable memory files");
        let seals = rustix::fs::fcntl_get_seals(memory).unwrap();
        use rustix::fs::SealFlags;
        assert!(seals.contains(SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL), "{seals:?}");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.contains("memfd:gridkey-kernel"), "the code is mapped from the memory file");
        // Sealed: the loaded bytes cannot be changed through the descriptor.
        let mut file = std::fs::File::from(memory.try_clone().unwrap());
        assert!(std::io::Write::write_all(&mut file, b"\0").is_err(), "a sealed memory file took a write");
        assert_eq!(answer(&copy), 42);
    }

    #[test]
    fn libraries_loaded_one_after_another_from_memory_never_take_each_others_name() {
        let dir = tempfile::tempdir().unwrap();
        let libraries: Vec<_> = (1..=3).map(|n| library(dir.path(), n)).collect();
        // Two at once, then the first dropped, so that its descriptor number (and with it the
        // name the loader records) is free for the next load.
        let one = load_private_copy(&libraries[0].0, &libraries[0].1).unwrap();
        let two = load_private_copy(&libraries[1].0, &libraries[1].1).unwrap();
        assert_eq!((answer(&one), answer(&two)), (1, 2));
        drop(one);
        let three = load_private_copy(&libraries[2].0, &libraries[2].1).unwrap();
        assert_eq!((answer(&two), answer(&three)), (2, 3));
        for _ in 0..8 {
            let again = load_private_copy(&libraries[0].0, &libraries[0].1).unwrap();
            assert_eq!(answer(&again), 1);
        }
    }

    #[test]
    fn the_temp_file_fallback_loads_the_bytes_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let (artifact, bytes) = library(dir.path(), 7);
        let before = names(dir.path());
        let copy = load_temp_copy(&artifact, &bytes).unwrap();
        assert_eq!(answer(&copy), 7);
        assert!(copy._memory.is_none());
        assert_eq!(names(dir.path()), before, "the temp copy is unlinked once loaded");
        // Where no temp file can be written beside it, the library file itself is loaded.
        let gone = dir.path().join("no-such-directory").join("answer7.so");
        let err = load_temp_copy(&gone, &bytes).err().expect("a library that does not exist loads");
        assert!(err.contains("no-such-directory"), "{err}");
    }
}
