//! The same runtime offset provider in every layout the mode-equivalence proof covers: C order,
//! Fortran order, int64 elements, and behind a counted host-copy source (the stand-in for a
//! device buffer). Their compile-time views, and so their keys, must be identical (ADR 0006).

use std::sync::Arc;

use gridkey_offsets::ndarray::ArcArray2;
use gridkey_offsets::{Connectivity, Entry, HostCopySource, IndexTable, OffsetProvider, OffsetsError, TableSource};

/// The layouts, by name.
pub const LAYOUTS: [&str; 4] = ["C order", "Fortran order", "int64", "host copy"];

/// `a` copied into C order (`fortran` false) or Fortran order.
fn relayout<T: Clone>(a: &ArcArray2<T>, fortran: bool) -> ArcArray2<T> {
    if fortran {
        // The transpose of a C-order copy of the transpose is the table in Fortran order.
        a.t().as_standard_layout().into_owned().reversed_axes().into_shared()
    } else {
        a.as_standard_layout().into_owned().into_shared()
    }
}

/// `table` in layout `name` (one of [`LAYOUTS`]).
fn laid_out(name: &str, table: &IndexTable) -> Arc<dyn TableSource> {
    let order = |fortran| match table {
        IndexTable::I32(a) => IndexTable::I32(relayout(a, fortran)),
        IndexTable::I64(a) => IndexTable::I64(relayout(a, fortran)),
    };
    match name {
        "Fortran order" => Arc::new(order(true)),
        "int64" => Arc::new(match table {
            IndexTable::I32(a) => IndexTable::I64(a.mapv(i64::from).into_shared()),
            IndexTable::I64(a) => IndexTable::I64(a.clone()),
        }),
        "host copy" => Arc::new(HostCopySource::new(table.clone())),
        _ => Arc::new(order(false)),
    }
}

/// `provider` once per layout, each entry in the same order: every gather's table laid out anew
/// (read from the host, or copied there once), dimension entries as they are.
///
/// Errors: [`OffsetsError`] when a table cannot be copied to the host.
pub fn runtime_layouts(provider: &OffsetProvider) -> Result<Vec<(&'static str, OffsetProvider)>, OffsetsError> {
    let mut out = Vec::new();
    for name in LAYOUTS {
        let mut variant = OffsetProvider::new();
        for (offset, entry) in provider.entries() {
            let entry = match entry {
                Entry::Dimension(d) => Entry::Dimension(d.clone()),
                Entry::Gather(c) => Entry::Gather(Arc::new(Connectivity::new(
                    c.domain().clone(),
                    c.local().clone(),
                    c.codomain().clone(),
                    c.skip_value(),
                    laid_out(name, &c.host_table(offset)?),
                )?)),
            };
            variant.push(offset.clone(), entry)?;
        }
        out.push((name, variant));
    }
    Ok(out)
}
