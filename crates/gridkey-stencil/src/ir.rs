//! The neighbour-reduction IR and its stable encoding.

use serde::{Deserialize, Serialize};

use crate::StencilError;

/// Version of the program encoding ([`Program::encode`]); it is the first value of every
/// encoding, so a change of the IR types that changes the encoding must bump it.
pub const IR_FORMAT_VERSION: u32 = 1;

/// How a stage combines the weighted values of an element's neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reduce {
    /// `out[i] = Σ_k w[i,k] · src[T[i,k]]` over the neighbours that are not skipped (0 if none).
    Sum,
    /// The sum divided by the number of neighbours that are not skipped (0 if none).
    Mean,
}

/// Where a field lives. Every field holds f64 values.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldShape {
    /// One value per element of a horizontal dimension (`Cell`, `Edge`, `Vertex`).
    Dense {
        /// The dimension's name.
        dim: String,
    },
    /// One value per (element, neighbour slot) of a connectivity with domain `domain` and
    /// neighbour dimension `local`: length `rows · cols` of its table, value `(i, k)` at
    /// `i · cols + k` (C order). Used as stage weights.
    Sparse {
        /// The domain dimension (`Cell`).
        domain: String,
        /// The neighbour dimension (`C2EDim`).
        local: String,
    },
}

/// A field declaration: name and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FieldDecl {
    /// The field's name, unique in its program.
    pub name: String,
    /// Where it lives.
    pub shape: FieldShape,
}

impl FieldDecl {
    /// A dense field `name` on dimension `dim`.
    pub fn dense(name: impl Into<String>, dim: impl Into<String>) -> Self {
        Self { name: name.into(), shape: FieldShape::Dense { dim: dim.into() } }
    }

    /// A sparse field `name` on `(domain, local)`.
    pub fn sparse(name: impl Into<String>, domain: impl Into<String>, local: impl Into<String>) -> Self {
        Self { name: name.into(), shape: FieldShape::Sparse { domain: domain.into(), local: local.into() } }
    }
}

/// One stage: `output[i] = reduce_k (weights[i,k] · source[T[i,k]])` where `T` is the table of
/// `offset`, entries equal to its skip value are skipped, and missing weights are 1.0.
///
/// `output` lives on the offset's domain, `source` on its codomain, `weights` on its
/// `(domain, local)`; domain inference checks these against the offset provider.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stage {
    /// The dense field written (an output or a temporary).
    pub output: String,
    /// Sum or mean.
    pub reduce: Reduce,
    /// The offset gathered through (`C2E`).
    pub offset: String,
    /// The dense field read at the neighbours.
    pub source: String,
    /// The sparse weight field, or `None` for weights 1.0.
    pub weights: Option<String>,
}

impl Stage {
    /// An unweighted stage.
    pub fn new(
        output: impl Into<String>,
        reduce: Reduce,
        offset: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        Self { output: output.into(), reduce, offset: offset.into(), source: source.into(), weights: None }
    }

    /// This stage with sparse weight field `weights`.
    pub fn weighted(mut self, weights: impl Into<String>) -> Self {
        self.weights = Some(weights.into());
        self
    }
}

/// What a field is to its program, derived from the stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldRole {
    /// Never written: the caller passes it.
    Input,
    /// Written by one stage and read by a later one: allocated by the executor, not returned.
    Temporary,
    /// Written and never read: returned.
    Output,
}

/// A program: a name, field declarations and stages, run in order.
///
/// Invariants (checked by [`Program::new`] and [`Program::decode`]): names are non-empty and
/// made of ASCII letters, digits, `_`, `-` and `.`; field names are unique; every stage names
/// declared fields, writes a dense field, reads a dense field other than its output, and weighs
/// with a sparse field on the output's dimension; no field is written twice or read before a
/// stage writes it; every declared field is used.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ProgramParts")]
pub struct Program {
    name: String,
    fields: Vec<FieldDecl>,
    stages: Vec<Stage>,
}

/// The unchecked form a program is deserialised into before [`Program::new`] checks it.
#[derive(Deserialize)]
struct ProgramParts {
    name: String,
    fields: Vec<FieldDecl>,
    stages: Vec<Stage>,
}

impl TryFrom<ProgramParts> for Program {
    type Error = StencilError;

    fn try_from(parts: ProgramParts) -> Result<Self, StencilError> {
        Program::new(parts.name, parts.fields, parts.stages)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Program {
    /// A program called `name` with `fields` and `stages`.
    ///
    /// Errors: [`StencilError::InvalidProgram`] naming the rule broken (see [`Program`]).
    pub fn new(name: impl Into<String>, fields: Vec<FieldDecl>, stages: Vec<Stage>) -> Result<Self, StencilError> {
        let program = Self { name: name.into(), fields, stages };
        program.check().map_err(|reason| StencilError::InvalidProgram { program: program.name.clone(), reason })?;
        Ok(program)
    }

    fn check(&self) -> Result<(), String> {
        let bad_name = |what: &str, name: &str| {
            if valid_name(name) {
                Ok(())
            } else {
                Err(format!("{what} name {name:?} must be non-empty ASCII letters, digits, '_', '-' or '.'"))
            }
        };
        bad_name("program", &self.name)?;
        if self.stages.is_empty() {
            return Err("it has no stage".into());
        }
        for (i, field) in self.fields.iter().enumerate() {
            bad_name("field", &field.name)?;
            match &field.shape {
                FieldShape::Dense { dim } => bad_name("dimension", dim)?,
                FieldShape::Sparse { domain, local } => {
                    bad_name("dimension", domain)?;
                    bad_name("dimension", local)?;
                }
            }
            if self.fields[..i].iter().any(|f| f.name == field.name) {
                return Err(format!("field {} is declared twice", field.name));
            }
        }
        for (s, stage) in self.stages.iter().enumerate() {
            bad_name("offset", &stage.offset)?;
            let decl = |name: &str| {
                self.field(name).ok_or_else(|| format!("stage {s} uses field {name}, which is not declared"))
            };
            let out = decl(&stage.output)?;
            let src = decl(&stage.source)?;
            let FieldShape::Dense { dim: out_dim } = &out.shape else {
                return Err(format!("stage {s} writes {}, which is not a dense field", out.name));
            };
            if !matches!(src.shape, FieldShape::Dense { .. }) {
                return Err(format!("stage {s} reads {}, which is not a dense field", src.name));
            }
            if stage.source == stage.output {
                return Err(format!("stage {s} reads its own output {}", stage.output));
            }
            if let Some(w) = &stage.weights {
                match &decl(w)?.shape {
                    FieldShape::Sparse { domain, .. } if domain == out_dim => {}
                    FieldShape::Sparse { domain, .. } => {
                        return Err(format!(
                            "stage {s} weighs with {w} on {domain}, but its output {} is on {out_dim}",
                            out.name
                        ))
                    }
                    FieldShape::Dense { .. } => {
                        return Err(format!("stage {s} weighs with {w}, which is not a sparse field"))
                    }
                }
            }
            if self.stages[..s].iter().any(|t| t.output == stage.output) {
                return Err(format!("field {} is written by more than one stage", stage.output));
            }
            let read_here = |t: &Stage| t.source == stage.output || t.weights.as_deref() == Some(&stage.output);
            if self.stages[..s].iter().any(read_here) {
                return Err(format!("field {} is read before stage {s} writes it", stage.output));
            }
        }
        for field in &self.fields {
            let used = self
                .stages
                .iter()
                .any(|t| t.output == field.name || t.source == field.name || t.weights.as_deref() == Some(&field.name));
            if !used {
                return Err(format!("field {} is declared but no stage uses it", field.name));
            }
        }
        Ok(())
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every field, in declaration order (the order of the kernel's field slots).
    pub fn fields(&self) -> &[FieldDecl] {
        &self.fields
    }

    /// The stages, in execution order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The declaration of field `name`.
    pub fn field(&self, name: &str) -> Option<&FieldDecl> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The dimension of dense field `name`, which a stage reads or writes (checked by
    /// [`Program::new`]).
    pub(crate) fn dense_dim(&self, name: &str) -> &str {
        match self.field(name).map(|f| &f.shape) {
            Some(FieldShape::Dense { dim }) => dim,
            _ => {
                unreachable!("Program::new checks that stages read and write declared dense fields")
            }
        }
    }

    /// What field `name` is to this program, if it is declared.
    pub fn role(&self, name: &str) -> Option<FieldRole> {
        self.field(name)?;
        let written = self.stages.iter().any(|s| s.output == name);
        let read = self.stages.iter().any(|s| s.source == name || s.weights.as_deref() == Some(name));
        Some(match (written, read) {
            (false, _) => FieldRole::Input,
            (true, true) => FieldRole::Temporary,
            (true, false) => FieldRole::Output,
        })
    }

    fn with_role(&self, role: FieldRole) -> Vec<&FieldDecl> {
        self.fields.iter().filter(|f| self.role(&f.name) == Some(role)).collect()
    }

    /// The input fields (never written), in declaration order.
    pub fn inputs(&self) -> Vec<&FieldDecl> {
        self.with_role(FieldRole::Input)
    }

    /// The output fields (written, never read), in declaration order.
    pub fn outputs(&self) -> Vec<&FieldDecl> {
        self.with_role(FieldRole::Output)
    }

    /// The temporaries (written by one stage, read by a later one), in declaration order.
    pub fn temporaries(&self) -> Vec<&FieldDecl> {
        self.with_role(FieldRole::Temporary)
    }

    /// The offsets the stages gather through, in first-use order (the order of the kernel's
    /// table slots).
    pub fn offsets(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for stage in &self.stages {
            if !out.contains(&stage.offset) {
                out.push(stage.offset.clone());
            }
        }
        out
    }

    /// The program's stable encoding, the one hashed into its translation key (ADR 0003):
    /// postcard of `(IR_FORMAT_VERSION, program)`. Equal programs have equal encodings, any
    /// change of name, field, stage or order changes it, and it does not depend on the machine.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(&(IR_FORMAT_VERSION, self)).expect("a program serialises to postcard")
    }

    /// The program of a stable encoding from [`Program::encode`], checked like [`Program::new`].
    ///
    /// Errors: [`StencilError::Decode`] for bytes that are not an encoding of this
    /// [`IR_FORMAT_VERSION`] (or carry trailing bytes); [`StencilError::InvalidProgram`] for a
    /// well-formed encoding of an invalid program.
    pub fn decode(bytes: &[u8]) -> Result<Self, StencilError> {
        let (version, rest) = postcard::take_from_bytes::<u32>(bytes)
            .map_err(|e| StencilError::Decode { reason: format!("no format version: {e}") })?;
        if version != IR_FORMAT_VERSION {
            return Err(StencilError::Decode {
                reason: format!("program format version {version}, this frontend reads {IR_FORMAT_VERSION}"),
            });
        }
        let (parts, rest) = postcard::take_from_bytes::<ProgramParts>(rest)
            .map_err(|e| StencilError::Decode { reason: e.to_string() })?;
        if !rest.is_empty() {
            return Err(StencilError::Decode { reason: format!("{} trailing bytes after the program", rest.len()) });
        }
        Program::try_from(parts)
    }
}
