//! C code generation and the translation step.

use std::fmt::Write as _;

use gridkey_fingerprint::{content_digest, TranslationOptions};
use gridkey_offsets::CompileTimeOffsetProvider;

use crate::{infer_domains, DomainFacts, FieldRole, FieldShape, Need, Program, Reduce, StencilError, FRONTEND_NAME};

/// Version of the kernel ABI (the `gk_table`, `gk_field` and `gk_status` structs and the
/// signature of `gk_run`); a kernel reports it through `gk_abi_version()` and
/// [`crate::Kernel::load`] refuses another.
pub const ABI_VERSION: i32 = 1;

/// The translation option that sets the C optimisation level: `"0"` to `"3"`, default `"2"`.
/// It goes to the compiler as `-O<level>` and into the source as a comment, so it is keyed.
pub const OPT_LEVEL: &str = "opt_level";

/// Status codes of `gk_run`, shared by the emitted C and [`crate::Kernel::run`].
pub(crate) mod status {
    pub const OK: i32 = 0;
    pub const TABLE_ROWS: i32 = 1;
    pub const TABLE_COLS: i32 = 2;
    pub const TABLE_WIDTH: i32 = 3;
    pub const FIELD_EXACT: i32 = 4;
    pub const FIELD_AT_LEAST: i32 = 5;
    pub const INDEX: i32 = 6;
    /// Every code with its name in the C source.
    pub const ALL: [(&str, i32); 7] = [
        ("GK_OK", OK),
        ("GK_TABLE_ROWS", TABLE_ROWS),
        ("GK_TABLE_COLS", TABLE_COLS),
        ("GK_TABLE_WIDTH", TABLE_WIDTH),
        ("GK_FIELD_EXACT", FIELD_EXACT),
        ("GK_FIELD_AT_LEAST", FIELD_AT_LEAST),
        ("GK_INDEX", INDEX),
    ];
}

/// A translation option this frontend declares: its name, the value it has when left out, and
/// every value it accepts (exact spellings: `"02"` is not `"2"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    /// The option's name (`opt_level`).
    pub name: &'static str,
    /// Its value when the caller leaves it out.
    pub default: &'static str,
    /// The values it accepts.
    pub accepted: &'static [&'static str],
}

/// Every translation option of this frontend, sorted by name (ADR 0021).
pub const OPTIONS: &[OptionSpec] = &[OptionSpec { name: OPT_LEVEL, default: "2", accepted: &["0", "1", "2", "3"] }];

/// The translation options this frontend understands, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StencilOptions {
    /// C optimisation level, 0 to 3 (option [`OPT_LEVEL`]).
    pub opt_level: u8,
}

impl StencilOptions {
    /// The C compiler flags these options imply: `-O<level>`.
    pub fn cflags(&self) -> Vec<String> {
        vec![format!("-O{}", self.opt_level)]
    }
}

/// The options as they enter a translation key: every option of [`OPTIONS`] with the value
/// given, or its default where it was left out, so that a default spelled out
/// (`opt_level=2`) and left out are one key (ADR 0021).
///
/// Errors: [`StencilError::UnknownOption`] naming an option not in [`OPTIONS`];
/// [`StencilError::OptionValue`] for a value the option does not accept.
pub fn normalise_options(options: &TranslationOptions) -> Result<TranslationOptions, StencilError> {
    let known = || OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>().join(", ");
    if let Some(unknown) = options.keys().find(|name| !OPTIONS.iter().any(|o| o.name == name.as_str())) {
        return Err(StencilError::UnknownOption { option: unknown.clone(), known: known() });
    }
    let mut normal = TranslationOptions::new();
    for spec in OPTIONS {
        let value = options.get(spec.name).map_or(spec.default, String::as_str);
        if !spec.accepted.contains(&value) {
            return Err(StencilError::OptionValue {
                option: spec.name.to_owned(),
                value: value.to_owned(),
                accepted: spec.accepted.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", "),
            });
        }
        normal.insert(spec.name.to_owned(), value.to_owned());
    }
    Ok(normal)
}

/// Parses translation options ([`normalise_options`], then each value).
///
/// Errors: those of [`normalise_options`].
pub fn check_options(options: &TranslationOptions) -> Result<StencilOptions, StencilError> {
    let normal = normalise_options(options)?;
    let opt_level = normal[OPT_LEVEL].parse().expect("every accepted opt_level is a digit");
    Ok(StencilOptions { opt_level })
}

/// Translates `program` against the compile-time offset provider: [`infer_domains`], then
/// [`emit_c`]. The only way from a program to C source that reads tables, and it accepts only
/// the compile-time view (docs/design.md "Contracts").
///
/// Errors: those of [`check_options`] and [`infer_domains`].
pub fn translate(
    program: &Program,
    provider: &CompileTimeOffsetProvider,
    options: &TranslationOptions,
) -> Result<String, StencilError> {
    check_options(options)?;
    let facts = infer_domains(program, provider)?;
    Ok(emit_c(program, &facts, options))
}

/// The C source of `program` for `facts` and `options`: deterministic (no time, no path), a
/// function of its three arguments only.
///
/// The source holds the facts as constants (per table rows, cols, the index range `min..=max`
/// and, only where the table has skip entries, the skip value; per field the length it needs)
/// and exports, with [`ABI_VERSION`] 1:
///
/// ```c
/// typedef struct gk_table { const void *data; int64_t rows, cols, stride0, stride1; int32_t width; } gk_table;
/// typedef struct gk_field { double *data; int64_t len; } gk_field;
/// typedef struct gk_status { int32_t kind, slot; int64_t expected, expected_max, found, row, col; } gk_status;
/// int gk_run(const gk_table *tables, const gk_field *fields, gk_status *status);
/// int gk_abi_version(void);
/// const char *gk_program_digest(void); /* xxh3_128 hex of Program::encode */
/// ```
///
/// `tables` are the runtime tables in [`Program::offsets`] order, read in place through their
/// element strides and index width (4 or 8 bytes); `fields` are the program's fields in
/// [`Program::fields`] order. `gk_run` first checks every table's rows, cols and width and every
/// field's length against the constants, then runs the stages, checking every index against
/// the compiled range; it returns 0, or a nonzero status kind with `status` filled in.
///
/// # Panics
///
/// If `options` do not pass [`check_options`] or `facts` were not inferred for `program`;
/// [`translate`] never lets either happen.
pub fn emit_c(program: &Program, facts: &DomainFacts, options: &TranslationOptions) -> String {
    let opts = check_options(options).expect("emit_c needs options that passed check_options");
    let offsets = program.offsets();
    let tables: Vec<_> = offsets
        .iter()
        .map(|o| facts.tables().get(o).expect("emit_c needs the facts inferred for this program"))
        .collect();
    let needs = facts.field_needs(program).expect("emit_c needs the facts inferred for this program");
    let slot = |offset: &str| offsets.iter().position(|o| o == offset).expect("an offset of the program");
    let field_slot = |field: &str| program.fields().iter().position(|f| f.name == field).expect("a declared field");

    let mut c = String::new();
    let w = &mut c;
    // Writing to a String cannot fail; the results are ignored below with `let _`.
    let _ = writeln!(
        w,
        "/* Generated by {FRONTEND_NAME} {} for program {}; do not edit. */",
        env!("CARGO_PKG_VERSION"),
        program.name()
    );
    let _ = writeln!(w, "/* options: {OPT_LEVEL}={} */", opts.opt_level);
    let _ = writeln!(w, "/* kernel ABI {ABI_VERSION} */");
    c.push_str(PRELUDE);
    let w = &mut c;
    let _ = writeln!(w, "enum {{");
    for (name, code) in status::ALL {
        let _ = writeln!(w, "  {name} = {code},");
    }
    let _ = writeln!(w, "}};\n");
    c.push_str(FAIL);
    let w = &mut c;
    let _ = writeln!(w, "int gk_abi_version(void) {{ return {ABI_VERSION}; }}");
    let _ =
        writeln!(w, "const char *gk_program_digest(void) {{ return \"{}\"; }}\n", content_digest(&program.encode()));

    for (t, (offset, f)) in offsets.iter().zip(&tables).enumerate() {
        let skip = match (f.has_skip, f.skip_value) {
            (true, Some(v)) => format!("skip entries ({v})"),
            (_, Some(v)) => format!("no skip entries (skip value {v})"),
            (_, None) => "no skip value".to_owned(),
        };
        let _ = writeln!(
            w,
            "/* table {t}: offset {offset}, {} x {}, entries {}..={}, {skip} */",
            f.rows, f.cols, f.min, f.max
        );
        let _ = writeln!(w, "#define GK_T{t}_ROWS INT64_C({})", f.rows);
        let _ = writeln!(w, "#define GK_T{t}_COLS INT64_C({})", f.cols);
        let _ = writeln!(w, "#define GK_T{t}_MIN INT64_C({})", f.min);
        let _ = writeln!(w, "#define GK_T{t}_MAX INT64_C({})", f.max);
        if let (true, Some(v)) = (f.has_skip, f.skip_value) {
            let _ = writeln!(w, "#define GK_T{t}_SKIP INT64_C({v})");
        }
    }
    for (i, (field, need)) in program.fields().iter().zip(&needs).enumerate() {
        let role = match program.role(&field.name).expect("a declared field") {
            FieldRole::Input => "input",
            FieldRole::Temporary => "temporary",
            FieldRole::Output => "output",
        };
        let shape = match &field.shape {
            FieldShape::Dense { dim } => format!("dense on {dim}"),
            FieldShape::Sparse { domain, local } => format!("sparse on ({domain}, {local})"),
        };
        let _ = writeln!(w, "/* field {i}: {}, {shape}, {role}, {need} values */", field.name);
        let _ = writeln!(w, "#define GK_F{i}_LEN INT64_C({})", need.min_len());
    }
    c.push('\n');

    for (s, stage) in program.stages().iter().enumerate() {
        let t = slot(&stage.offset);
        let f = tables[t];
        for (suffix, ctype) in [("i32", "int32_t"), ("i64", "int64_t")] {
            let w = &mut c;
            let reduce = match stage.reduce {
                Reduce::Sum => "sum",
                Reduce::Mean => "mean",
            };
            let weights = stage.weights.as_deref().map_or_else(String::new, |wf| format!("{wf} * "));
            let _ = writeln!(
                w,
                "/* stage {s}: {}[i] = {reduce} over k of {weights}{}[{}[i, k]], {ctype} table */",
                stage.output, stage.source, stage.offset
            );
            let _ = writeln!(
                w,
                "static int gk_stage{s}_{suffix}(const gk_table *t, const gk_field *fields, gk_status *st) {{"
            );
            let _ = writeln!(w, "  const {ctype} *tab = (const {ctype} *)t->data;");
            let _ = writeln!(w, "  const int64_t s0 = t->stride0, s1 = t->stride1;");
            let _ = writeln!(w, "  const double *src = fields[{}].data;", field_slot(&stage.source));
            if let Some(wf) = &stage.weights {
                let _ = writeln!(w, "  const double *w = fields[{}].data;", field_slot(wf));
            }
            let _ = writeln!(w, "  double *out = fields[{}].data;", field_slot(&stage.output));
            let _ = writeln!(w, "  for (int64_t i = 0; i < GK_T{t}_ROWS; ++i) {{");
            let _ = writeln!(w, "    double acc = 0.0;");
            if stage.reduce == Reduce::Mean {
                let _ = writeln!(w, "    int64_t n = 0;");
            }
            let _ = writeln!(w, "    for (int64_t k = 0; k < GK_T{t}_COLS; ++k) {{");
            let _ = writeln!(w, "      const int64_t j = (int64_t)tab[i * s0 + k * s1];");
            if f.has_skip && f.skip_value.is_some() {
                let _ = writeln!(w, "      if (j == GK_T{t}_SKIP) continue;");
            }
            let _ = writeln!(w, "      if (j < GK_T{t}_MIN || j > GK_T{t}_MAX)");
            let _ = writeln!(w, "        return gk_fail(st, GK_INDEX, {t}, GK_T{t}_MIN, GK_T{t}_MAX, j, i, k);");
            if stage.weights.is_some() {
                let _ = writeln!(w, "      acc += w[i * GK_T{t}_COLS + k] * src[j];");
            } else {
                let _ = writeln!(w, "      acc += src[j];");
            }
            if stage.reduce == Reduce::Mean {
                let _ = writeln!(w, "      n += 1;");
            }
            let _ = writeln!(w, "    }}");
            match stage.reduce {
                Reduce::Sum => {
                    let _ = writeln!(w, "    out[i] = acc;");
                }
                Reduce::Mean => {
                    let _ = writeln!(w, "    out[i] = n > 0 ? acc / (double)n : 0.0;");
                }
            }
            let _ = writeln!(w, "  }}");
            let _ = writeln!(w, "  return GK_OK;");
            let _ = writeln!(w, "}}\n");
        }
    }

    let w = &mut c;
    let _ = writeln!(w, "int gk_run(const gk_table *tables, const gk_field *fields, gk_status *st) {{");
    let _ = writeln!(w, "  int rc;");
    let _ = writeln!(w, "  gk_fail(st, GK_OK, 0, 0, 0, 0, 0, 0);");
    for t in 0..tables.len() {
        let _ = writeln!(w, "  if (tables[{t}].rows != GK_T{t}_ROWS)");
        let _ = writeln!(
            w,
            "    return gk_fail(st, GK_TABLE_ROWS, {t}, GK_T{t}_ROWS, GK_T{t}_ROWS, tables[{t}].rows, 0, 0);"
        );
        let _ = writeln!(w, "  if (tables[{t}].cols != GK_T{t}_COLS)");
        let _ = writeln!(
            w,
            "    return gk_fail(st, GK_TABLE_COLS, {t}, GK_T{t}_COLS, GK_T{t}_COLS, tables[{t}].cols, 0, 0);"
        );
        let _ = writeln!(w, "  if (tables[{t}].width != 4 && tables[{t}].width != 8)");
        let _ = writeln!(w, "    return gk_fail(st, GK_TABLE_WIDTH, {t}, 4, 8, tables[{t}].width, 0, 0);");
    }
    for (i, need) in needs.iter().enumerate() {
        let (cmp, kind) = match need {
            Need::Exactly(_) => ("!=", "GK_FIELD_EXACT"),
            Need::AtLeast(_) => ("<", "GK_FIELD_AT_LEAST"),
        };
        let _ = writeln!(w, "  if (fields[{i}].len {cmp} GK_F{i}_LEN)");
        let _ = writeln!(w, "    return gk_fail(st, {kind}, {i}, GK_F{i}_LEN, GK_F{i}_LEN, fields[{i}].len, 0, 0);");
    }
    for (s, stage) in program.stages().iter().enumerate() {
        let t = slot(&stage.offset);
        let _ = writeln!(w, "  rc = tables[{t}].width == 4 ? gk_stage{s}_i32(&tables[{t}], fields, st)");
        let _ = writeln!(w, "                             : gk_stage{s}_i64(&tables[{t}], fields, st);");
        let _ = writeln!(w, "  if (rc != GK_OK) return rc;");
    }
    let _ = writeln!(w, "  return GK_OK;");
    let _ = writeln!(w, "}}");
    c
}

/// The ABI part of every kernel: includes and structs.
const PRELUDE: &str = r#"
#include <stdint.h>

typedef struct gk_table {
  const void *data;     /* element (0, 0) of the runtime table, read in place */
  int64_t rows, cols;   /* shape */
  int64_t stride0;      /* elements between rows (any sign) */
  int64_t stride1;      /* elements between columns (any sign) */
  int32_t width;        /* bytes per index: 4 (int32) or 8 (int64) */
} gk_table;

typedef struct gk_field {
  double *data;         /* written only when the field is a stage's output */
  int64_t len;          /* values */
} gk_field;

typedef struct gk_status {
  int32_t kind, slot;            /* what failed, and which table or field */
  int64_t expected, expected_max; /* the compiled constant(s) */
  int64_t found, row, col;       /* the runtime value, and where */
} gk_status;

"#;

/// The failure helper: fills `status` and returns its kind.
const FAIL: &str = r#"static int gk_fail(gk_status *st, int32_t kind, int32_t slot, int64_t expected, int64_t expected_max,
                   int64_t found, int64_t row, int64_t col) {
  st->kind = kind;
  st->slot = slot;
  st->expected = expected;
  st->expected_max = expected_max;
  st->found = found;
  st->row = row;
  st->col = col;
  return kind;
}

"#;
