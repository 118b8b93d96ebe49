//! The reader wrapper against damaged netCDF-4 files: copies of the shipped HDF5-based UGRID
//! meshes with bytes overwritten, bits flipped and the end cut off. Every copy gives a grid or a
//! typed error naming the file; none panics (a panic of the reader behind `catch_unwind` is
//! [`GridError::ReaderPanicked`], which fails the property too), none allocates past the bound
//! the wrapper sets, none crashes the test process.

use std::path::{Path, PathBuf};

use gridkey_grid::{read_grid, GridError};
use proptest::prelude::*;

const GRIDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/grids/");

fn write_bytes(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The single place that reads a damaged copy and checks the outcome.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = write_bytes(dir.path(), "damaged.nc", bytes);
    match read_grid(&path) {
        Ok(grid) => {
            for info in grid.tables() {
                prop_assert!(info.min >= -1, "{}: min {}", info.offset, info.min);
            }
        }
        Err(GridError::ReaderPanicked { message, .. }) => {
            prop_assert!(false, "the netCDF reader panicked: {}", message);
        }
        Err(err) => {
            let msg = err.to_string();
            prop_assert!(msg.contains(&path.display().to_string()), "{}", msg);
            prop_assert!(!msg.ends_with('.'), "{}", msg);
        }
    }
    Ok(())
}

/// One damage to a file of `len` bytes.
#[derive(Clone, Debug)]
enum Edit {
    /// Overwrite a byte.
    Set(prop::sample::Index, u8),
    /// Flip one bit.
    Flip(prop::sample::Index, u8),
    /// Overwrite a byte of the first 2 KiB (superblock, root group, object headers).
    SetEarly(prop::sample::Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::SetEarly(i, b)),
    ]
}

fn damage(mut bytes: Vec<u8>, edits: &[Edit], cut: Option<prop::sample::Index>) -> Vec<u8> {
    let early = 2048.min(bytes.len());
    for e in edits {
        match e {
            Edit::Set(i, b) => {
                let i = i.index(bytes.len());
                bytes[i] = *b;
            }
            Edit::Flip(i, bit) => {
                let i = i.index(bytes.len());
                bytes[i] ^= 1 << bit;
            }
            Edit::SetEarly(i, b) => bytes[i.index(early)] = *b,
        }
    }
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len() + 1));
    }
    bytes
}

proptest! {
    // PROPTEST_CASES=20000 for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    /// The int64 quad-hexagon mesh (25 KB, contiguous storage, edge-node in the file).
    #[test]
    fn damaged_quad_hexagon_never_panics(
        edits in prop::collection::vec(edit(), 1..12),
        cut in prop::option::weighted(0.2, any::<prop::sample::Index>()),
    ) {
        let clean = std::fs::read(format!("{GRIDS}quad-hexagon.grid.nc")).unwrap();
        check(&damage(clean, &edits, cut))?;
    }

    /// The cube-sphere mesh (180 KB, int32 face-node with fill and start index).
    #[test]
    fn damaged_cube_sphere_never_panics(
        edits in prop::collection::vec(edit(), 1..12),
        cut in prop::option::weighted(0.2, any::<prop::sample::Index>()),
    ) {
        let clean = std::fs::read(format!("{GRIDS}outCSne30.ug")).unwrap();
        check(&damage(clean, &edits, cut))?;
    }
}

#[test]
fn every_cut_of_the_first_kilobytes_is_an_error() {
    // The superblock and root group of quad-hexagon: each prefix must be refused, not half read.
    let clean = std::fs::read(format!("{GRIDS}quad-hexagon.grid.nc")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in (0..4096).step_by(7) {
        let path = write_bytes(dir.path(), "cut.nc", &clean[..cut]);
        match read_grid(&path) {
            Ok(_) => panic!("a file cut at byte {cut} was read"),
            Err(GridError::ReaderPanicked { message, .. }) => panic!("cut at {cut}: the reader panicked: {message}"),
            Err(err) => assert!(err.to_string().contains("cut.nc"), "{err}"),
        }
    }
}
