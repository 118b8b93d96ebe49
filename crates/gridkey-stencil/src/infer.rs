//! Domain inference: the facts translation reads from the tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use gridkey_offsets::{
    CompileTimeConnectivity, CompileTimeOffsetProvider, CompileTimeTable, Connectivity, Dimension, Entry, IndexTable,
    OffsetProvider, Provider,
};
use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

use crate::{FieldShape, Need, Program, Side, StencilError};

/// What domain inference reads from one neighbour table `(rows, cols)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableFacts {
    /// `shape[0]`: elements of the domain.
    pub rows: usize,
    /// `shape[1]`: neighbour slots per element.
    pub cols: usize,
    /// Smallest entry that is not the skip value (0 when there is none).
    pub min: i64,
    /// Largest entry that is not the skip value (−1 when there is none), so `max + 1` is the
    /// extent of the codomain the table needs.
    pub max: i64,
    /// Whether some entry equals the skip value: only then does the kernel check for it.
    pub has_skip: bool,
    /// The connectivity's skip value.
    pub skip_value: Option<i64>,
}

/// The facts of domain inference for one program: per offset it uses, its [`TableFacts`]
/// (ordered by offset name), and the extents derived from them per dimension.
///
/// Built only by [`infer_domains`] and [`infer_domains_runtime`], which check that the facts
/// are consistent (tables with the same domain have the same rows; no table indexes a
/// dimension beyond the rows of a table whose domain it is).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DomainFacts {
    tables: BTreeMap<String, TableFacts>,
    domain_rows: BTreeMap<String, usize>,
    required_extents: BTreeMap<String, usize>,
}

impl DomainFacts {
    /// The facts of each offset the program uses, by offset name.
    pub fn tables(&self) -> &BTreeMap<String, TableFacts> {
        &self.tables
    }

    /// For each dimension that is the domain of one of the program's tables, the tables' rows:
    /// the exact extent of fields on it.
    pub fn domain_rows(&self) -> &BTreeMap<String, usize> {
        &self.domain_rows
    }

    /// For each dimension that is the codomain of one of the program's tables, the largest
    /// `max + 1` of those tables: the extent a source field on it must at least have.
    pub fn required_extents(&self) -> &BTreeMap<String, usize> {
        &self.required_extents
    }

    /// What each field of `program` needs, in declaration order: dense fields on a domain
    /// exactly its rows, dense fields only read through tables at least the required extent,
    /// sparse fields exactly `rows · cols` of the table they weigh.
    ///
    /// Errors: [`StencilError::Extent`] when two stages weigh with one sparse field through
    /// tables of different sizes, or when the facts lack a dimension of the program;
    /// [`StencilError::MissingOffset`] when they lack one of its offsets (facts inferred for
    /// another program).
    pub(crate) fn field_needs(&self, program: &Program) -> Result<Vec<Need>, StencilError> {
        let mut needs = Vec::with_capacity(program.fields().len());
        for field in program.fields() {
            let need = match &field.shape {
                FieldShape::Dense { dim } => match (self.domain_rows.get(dim), self.required_extents.get(dim)) {
                    (Some(&rows), _) => Need::Exactly(rows),
                    (None, Some(&extent)) => Need::AtLeast(extent),
                    (None, None) => {
                        return Err(StencilError::Extent {
                            program: program.name().to_owned(),
                            dimension: dim.clone(),
                            reason: format!("the facts know no table with dimension {dim} for field {}", field.name),
                        })
                    }
                },
                FieldShape::Sparse { domain, .. } => {
                    let mut need = None;
                    for stage in program.stages().iter().filter(|s| s.weights.as_deref() == Some(&field.name)) {
                        let t = self.tables.get(&stage.offset).ok_or_else(|| StencilError::MissingOffset {
                            program: program.name().to_owned(),
                            offset: stage.offset.clone(),
                        })?;
                        let n = t.rows * t.cols;
                        if need.is_some_and(|m| m != n) {
                            return Err(StencilError::Extent {
                                program: program.name().to_owned(),
                                dimension: domain.clone(),
                                reason: format!("sparse field {} weighs tables of different sizes", field.name),
                            });
                        }
                        need = Some(n);
                    }
                    Need::Exactly(need.expect("a declared sparse field weighs some stage"))
                }
            };
            needs.push(need);
        }
        Ok(needs)
    }
}

/// A negative table entry that is not the skip value.
pub(crate) struct BadEntry {
    row: usize,
    col: usize,
    value: i64,
}

/// The facts of one table, from any ndarray view of it (any layout, int32 or int64): the one
/// computation behind both [`infer_domains`] and [`infer_domains_runtime`]. Reads every entry
/// once, in row-major order, so the first bad entry is the same whatever the layout.
pub(crate) fn table_facts<T: Copy + Into<i64>>(
    table: ArrayView2<'_, T>,
    skip_value: Option<i64>,
) -> Result<TableFacts, BadEntry> {
    let (rows, cols) = table.dim();
    let (mut min, mut max, mut has_skip) = (i64::MAX, i64::MIN, false);
    for (row, entries) in table.outer_iter().enumerate() {
        for (col, &x) in entries.iter().enumerate() {
            let x: i64 = x.into();
            if Some(x) == skip_value {
                has_skip = true;
            } else if x < 0 {
                return Err(BadEntry { row, col, value: x });
            } else {
                min = min.min(x);
                max = max.max(x);
            }
        }
    }
    if min > max {
        (min, max) = (0, -1);
    }
    Ok(TableFacts { rows, cols, min, max, has_skip, skip_value })
}

/// The dimensions of a gather connectivity, runtime or compile-time.
pub(crate) trait GatherDims {
    fn domain(&self) -> &Dimension;
    fn local(&self) -> &Dimension;
    fn codomain(&self) -> &Dimension;
    fn skip_value(&self) -> Option<i64>;
}

impl GatherDims for Connectivity {
    fn domain(&self) -> &Dimension {
        Connectivity::domain(self)
    }
    fn local(&self) -> &Dimension {
        Connectivity::local(self)
    }
    fn codomain(&self) -> &Dimension {
        Connectivity::codomain(self)
    }
    fn skip_value(&self) -> Option<i64> {
        Connectivity::skip_value(self)
    }
}

impl GatherDims for CompileTimeConnectivity {
    fn domain(&self) -> &Dimension {
        CompileTimeConnectivity::domain(self)
    }
    fn local(&self) -> &Dimension {
        CompileTimeConnectivity::local(self)
    }
    fn codomain(&self) -> &Dimension {
        CompileTimeConnectivity::codomain(self)
    }
    fn skip_value(&self) -> Option<i64> {
        CompileTimeConnectivity::skip_value(self)
    }
}

/// The gathers of `program`'s offsets in `provider`, in [`Program::offsets`] order, after
/// checking that every stage's fields are declared on the connectivity's dimensions.
///
/// Errors: [`StencilError::MissingOffset`], [`StencilError::NotAGather`],
/// [`StencilError::DimensionMismatch`].
pub(crate) fn resolve<'p, G: GatherDims>(
    program: &Program,
    provider: &'p Provider<Arc<G>>,
) -> Result<Vec<&'p G>, StencilError> {
    let name = || program.name().to_owned();
    let lookup = |offset: &str| match provider.get(offset) {
        None => Err(StencilError::MissingOffset { program: name(), offset: offset.to_owned() }),
        Some(Entry::Dimension(d)) => {
            Err(StencilError::NotAGather { program: name(), offset: offset.to_owned(), dimension: d.name().to_owned() })
        }
        Some(Entry::Gather(g)) => Ok(g.as_ref()),
    };
    let gathers = program.offsets().iter().map(|o| lookup(o)).collect::<Result<Vec<_>, _>>()?;
    for stage in program.stages() {
        let g = lookup(&stage.offset)?;
        let mismatch = |field: &str, role, actual: String| StencilError::DimensionMismatch {
            program: name(),
            offset: stage.offset.clone(),
            field: field.to_owned(),
            role,
            actual,
        };
        if program.dense_dim(&stage.output) != g.domain().name() {
            return Err(mismatch(&stage.output, Side::Domain, g.domain().name().to_owned()));
        }
        if program.dense_dim(&stage.source) != g.codomain().name() {
            return Err(mismatch(&stage.source, Side::Codomain, g.codomain().name().to_owned()));
        }
        if let Some(w) = &stage.weights {
            if let FieldShape::Sparse { domain, local } = &program.field(w).expect("checked by Program::new").shape {
                if domain != g.domain().name() || local != g.local().name() {
                    return Err(mismatch(
                        w,
                        Side::DomainAndLocal,
                        format!("({}, {})", g.domain().name(), g.local().name()),
                    ));
                }
            }
        }
    }
    Ok(gathers)
}

/// Shared body of both inference entry points: `facts` reads one table.
fn infer_with<G: GatherDims>(
    program: &Program,
    provider: &Provider<Arc<G>>,
    mut facts: impl FnMut(&str, &G) -> Result<Result<TableFacts, BadEntry>, StencilError>,
) -> Result<DomainFacts, StencilError> {
    let gathers = resolve(program, provider)?;
    let name = || program.name().to_owned();
    let mut tables = BTreeMap::new();
    for (offset, g) in program.offsets().into_iter().zip(gathers) {
        let f = facts(&offset, g)?.map_err(|bad| StencilError::TableEntry {
            program: name(),
            offset: offset.clone(),
            row: bad.row,
            col: bad.col,
            value: bad.value,
            skip_value: g.skip_value(),
        })?;
        tables.insert(offset, f);
    }
    // Extents per dimension, named by the program's (checked) declarations.
    let mut domain_rows: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut required_extents: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for stage in program.stages() {
        let f = &tables[&stage.offset];
        let domain = program.dense_dim(&stage.output).to_owned();
        match domain_rows.get(&domain) {
            Some((rows, other)) if *rows != f.rows => {
                return Err(StencilError::Extent {
                    program: name(),
                    dimension: domain,
                    reason: format!("table {other} has {rows} rows, table {} has {} rows", stage.offset, f.rows),
                })
            }
            Some(_) => {}
            None => {
                domain_rows.insert(domain, (f.rows, stage.offset.clone()));
            }
        }
        let codomain = program.dense_dim(&stage.source).to_owned();
        let need = usize::try_from(f.max + 1).expect("max >= -1");
        let entry = required_extents.entry(codomain).or_insert((0, stage.offset.clone()));
        if need > entry.0 {
            *entry = (need, stage.offset.clone());
        }
    }
    for (dim, (extent, by)) in &required_extents {
        if let Some((rows, of)) = domain_rows.get(dim) {
            if extent > rows {
                return Err(StencilError::Extent {
                    program: name(),
                    dimension: dim.clone(),
                    reason: format!("table {by} indexes up to {}, but table {of} has only {rows} rows", extent - 1),
                });
            }
        }
    }
    let facts = DomainFacts {
        tables,
        domain_rows: domain_rows.into_iter().map(|(d, (n, _))| (d, n)).collect(),
        required_extents: required_extents.into_iter().map(|(d, (n, _))| (d, n)).collect(),
    };
    facts.field_needs(program)?;
    Ok(facts)
}

/// Domain inference for `program` on the compile-time tables: per offset the program uses,
/// `shape`, `min`, `max` (so `max + 1`) and skip presence, read from the memory-mapped, C-order
/// tables of the store, and the extents derived from them. This is what translation reads.
///
/// Errors: [`StencilError::MissingOffset`] and [`StencilError::NotAGather`] naming the program
/// and offset; [`StencilError::DimensionMismatch`] when a field's dimension is not the
/// connectivity's; [`StencilError::TableEntry`] for a negative entry that is not the skip value;
/// [`StencilError::Extent`] when tables disagree about a dimension.
pub fn infer_domains(program: &Program, provider: &CompileTimeOffsetProvider) -> Result<DomainFacts, StencilError> {
    infer_with(program, provider, |_, c: &CompileTimeConnectivity| {
        Ok(match c.table() {
            CompileTimeTable::I32(t) => table_facts(t, c.skip_value()),
            CompileTimeTable::I64(t) => table_facts(t, c.skip_value()),
        })
    })
}

/// The same facts as [`infer_domains`], straight from the runtime tables in whatever layout
/// and integer width they have (a table that is not on the host is copied there once, see
/// [`Connectivity::host_table`]).
/// Used to prove that the C source does not depend on the compile-time view, and by
/// [`crate::evaluate_reference`] and [`crate::make_inputs`]; translation never calls it.
///
/// Errors: as [`infer_domains`], and [`StencilError::Offsets`] when a table cannot be copied to
/// the host.
pub fn infer_domains_runtime(program: &Program, provider: &OffsetProvider) -> Result<DomainFacts, StencilError> {
    infer_with(program, provider, |offset, c: &Connectivity| {
        let table = c
            .host_table(offset)
            .map_err(|source| StencilError::Offsets { program: program.name().to_owned(), source })?;
        Ok(match &table {
            IndexTable::I32(a) => table_facts(a.view(), c.skip_value()),
            IndexTable::I64(a) => table_facts(a.view(), c.skip_value()),
        })
    })
}
