//! The reference frontend (docs/design.md "The reference frontend", ADR 0007): a stencil compiler for ICON-style unstructured-mesh
//! programs that exercises the gridkey pipeline the way a real compiler would.
//!
//! 1. **IR** ([`Program`]): stages `out[i] = REDUCE_k (w[i,k] * src[T[i,k]])` over the neighbour
//!    table `T` of an offset, skipping missing neighbours, with `REDUCE` a sum or a mean.
//!    [`icon_programs`] are the eight programs of the main job.
//! 2. **Domain inference** ([`infer_domains`]): reads the compile-time tables (`shape[0]`,
//!    `min`, `max + 1`, skip presence) into [`DomainFacts`], the work GT4Py's domain inference
//!    does.
//! 3. **Code generation** ([`emit_c`], [`translate`]): C source with those facts as constants and
//!    one exported entry point with a fixed ABI that reads the runtime tables in place.
//! 4. **Compile** ([`compile`]): translation key, translation cache, translate on a miss, then the
//!    system C compiler into a shared library in the build cache `<cache>/build-v2/`, keyed by the
//!    compiler's identity ([`compiler_identity`]), not its path.
//! 5. **Execution** ([`Kernel`]): loads the library and runs it on the runtime offset provider;
//!    [`evaluate_reference`] is the plain Rust evaluation it is checked against.
//!
//! # Architecture invariant
//!
//! Translation sees only the compile-time offset provider (the types say so: [`translate`] and
//! [`compile`] take a [`CompileTimeOffsetProvider`]); execution only the runtime one
//! ([`Kernel::run`] takes an [`OffsetProvider`]). The emitted C source depends only on the
//! program, the options and the facts domain inference reads from the tables: no time, no path,
//! no runner, no memory order or integer width of the runtime tables. [`infer_domains_runtime`]
//! computes the same facts straight from the runtime tables, only to prove that.
//! This crate consumes the lower gridkey crates only through their public API.
//!
//! [`CompileTimeOffsetProvider`]: gridkey_offsets::CompileTimeOffsetProvider
//! [`OffsetProvider`]: gridkey_offsets::OffsetProvider

mod compile;
mod compiler;
mod emit;
mod error;
mod exec;
pub mod fingerprint;
mod icon;
mod infer;
mod ir;
mod library;

pub use compile::{
    build_key, compile, library_build_key, CompileConfig, CompileOutcome, LockWarning, BUILD_DIR, BUILD_FORMAT_VERSION,
};
pub use compiler::{compiler_identity, identify_compiler, COMPILER_IDENTITY_VERSION, PROBE_TIMEOUT};
pub use emit::{
    check_options, emit_c, normalise_options, translate, OptionSpec, StencilOptions, ABI_VERSION, OPTIONS, OPT_LEVEL,
};
pub use error::{Need, Side, StencilError};
pub use exec::{dimension_sizes, evaluate_reference, make_inputs, max_relative_error, Fields, Kernel};
pub use icon::icon_programs;
pub use infer::{infer_domains, infer_domains_runtime, DomainFacts, TableFacts};
pub use ir::{FieldDecl, FieldRole, FieldShape, Program, Reduce, Stage, IR_FORMAT_VERSION};
pub use library::{TRAILER_BYTES, TRAILER_MAGIC};

/// The frontend's name, hashed into every translation key (ADR 0003).
pub const FRONTEND_NAME: &str = "gridkey-stencil";

/// The fingerprint of this frontend's translation code: [`fingerprint::fingerprint_of`] the
/// files [`fingerprint::TRANSLATION_SOURCES`], computed by the build script (ADR 0020); 32
/// lowercase hex digits.
pub const FRONTEND_FINGERPRINT: &str = env!("GRIDKEY_STENCIL_FINGERPRINT");

/// This frontend as a translation-key input: [`FRONTEND_NAME`], the crate version and
/// [`FRONTEND_FINGERPRINT`], so that a new release, and any rebuild whose translation code
/// changed under the same version, changes every key (ADR 0020). Frontends call [`key_inputs`],
/// not this.
pub fn frontend() -> gridkey_fingerprint::Frontend {
    gridkey_fingerprint::Frontend {
        name: FRONTEND_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        fingerprint: FRONTEND_FINGERPRINT.to_owned(),
    }
}

/// The key inputs of translating `program` with `options` against the compile-time `provider`
/// by this frontend, the one place the reference frontend builds them: [`frontend`], the
/// program's name and [`Program::encode`], the options [`normalise_options`]d (so a default
/// spelled out and left out are one key, ADR 0021) and the provider's entries. The compile step,
/// `gridkey run`'s parent, `explain --miss` and `cargo xtask modes` all key through here.
///
/// Errors: those of [`normalise_options`].
pub fn key_inputs(
    program: &Program,
    options: &gridkey_fingerprint::TranslationOptions,
    provider: &gridkey_offsets::CompileTimeOffsetProvider,
) -> Result<gridkey_fingerprint::KeyInputs, StencilError> {
    let options = normalise_options(options)?;
    Ok(gridkey_fingerprint::KeyInputs::new(&frontend(), program.name(), &program.encode(), &options, provider))
}
