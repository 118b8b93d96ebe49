"""Benchmarks of the gridkey Python package, each against its peer measured in the same run.

Run by ``cargo xtask py-bench`` (which also times the Rust digest on the same table file and
prints the ratios); by hand: ``python py_bench.py make-table TABLE.npy`` then
``python py_bench.py measure TABLE.npy GRID.nc SCRATCH_DIR OUT.json [--quick]``.

Cases (README "Performance"):
  digest_c_py   gridkey.table_digest of a 240 MB C-order int32 table vs xxhash.xxh3_128 over the
                same buffer (interleaved); xtask adds the Rust digest_table of the same table,
                interleaved call by call with this script's `digest-server`
  digest_f_py   the same table in Fortran order vs C order (interleaved), and the peak RSS growth
                of one digest of each (VmHWM reset through /proc/self/clear_refs)
  convert_py    compile_time_offset_provider of the ICON R02B04 provider tiled 100x (fresh store
                and connectivities every round) vs one numpy.save + os.fsync of the same bytes
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROWS, COLS = 30_000_000, 2  # 240 MB of int32, R2B9 scale, as `cargo xtask bench`
TILES = 100


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def interleaved(reps, *fns):
    """Median seconds of each function over `reps` rounds, one call of each per round, after one
    warm-up call each, so that all see the same background load."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for f, t in zip(fns, times):
            start = time.perf_counter()
            f()
            t.append(time.perf_counter() - start)
    return [median(t) for t in times]


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def peak_growth_bytes(fn):
    """Peak RSS growth of one call of `fn` in bytes: VmHWM after minus VmRSS before, with the
    peak reset to the current RSS first (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    before = status_kib("VmRSS")
    fn()
    after = status_kib("VmHWM")
    return max(0, after - before) * 1024


def make_table(path):
    rng = np.random.default_rng(0x9E3779B9)
    table = rng.integers(-1, 20_000_000, size=(ROWS, COLS), dtype=np.int32)
    np.save(path, table)


def icon_provider(grid):
    """The ICON grid's eight neighbour tables (the independent witness's reader, netCDF4)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "data" / "tools"))
    import table_digest_witness

    kind, tables = table_digest_witness.grid_tables(grid)
    assert kind == "icon", kind
    return tables


def measure(table_path, grid, scratch, quick):
    import xxhash

    import gridkey

    reps = 5 if quick else 9
    scratch = Path(scratch)
    table = np.load(table_path)
    assert table.flags.c_contiguous and table.dtype == np.int32 and table.shape == (ROWS, COLS)
    nbytes = table.nbytes
    cases = []

    digest = gridkey.table_digest(table)
    witness = xxhash.xxh3_128()  # the digest format over the same bytes, by the xxhash package
    witness.update(b"table\0<i4\0" + np.array([2, ROWS, COLS], "<u8").tobytes())
    witness.update(memoryview(table).cast("B"))
    assert witness.hexdigest() == digest, "gridkey.table_digest disagrees with xxhash over the format"
    buffer = memoryview(table).cast("B")
    gk, xx = interleaved(reps, lambda: gridkey.table_digest(table), lambda: xxhash.xxh3_128(buffer).digest())
    cases.append({
        "name": "digest_c_py", "what": "gridkey.table_digest of a C-order int32 table (240 MB)",
        "shape": [ROWS, COLS], "bytes": nbytes, "digest": digest,
        "seconds": gk, "gb_per_s": nbytes / gk / 1e9,
        "xxhash_xxh3_128_seconds": xx, "xxhash_xxh3_128_gb_per_s": nbytes / xx / 1e9,
        "ratio_vs_xxhash": xx / gk, "ratio_vs_xxhash_means": "throughput of gridkey.table_digest / xxhash.xxh3_128 over the same buffer",
        "goal_vs_xxhash": ">= 1.0",
        "xxhash_version": xxhash.VERSION,
    })

    fortran = np.asfortranarray(table)
    assert gridkey.table_digest(fortran) == digest
    growth_f = peak_growth_bytes(lambda: gridkey.table_digest(fortran))
    growth_c = peak_growth_bytes(lambda: gridkey.table_digest(table))
    c_seconds, f_seconds = interleaved(reps, lambda: gridkey.table_digest(table), lambda: gridkey.table_digest(fortran))
    cases.append({
        "name": "digest_f_py", "what": "gridkey.table_digest of the same table in Fortran order",
        "bytes": nbytes, "seconds": f_seconds, "gb_per_s": nbytes / f_seconds / 1e9,
        "c_order_seconds": c_seconds, "c_order_gb_per_s": nbytes / c_seconds / 1e9,
        "ratio": c_seconds / f_seconds, "ratio_means": "throughput in Fortran order / in C order, interleaved",
        "goal": ">= 0.5",
        "peak_rss_growth_bytes_fortran": growth_f, "peak_rss_growth_bytes_c": growth_c,
        "peak_rss_growth_fraction": None if growth_f is None else max(growth_f, growth_c) / nbytes,
        "peak_rss_goal": "< 1% of the table",
        "peak_rss_method": "VmHWM after one digest minus VmRSS before, peak reset through /proc/self/clear_refs",
    })
    del fortran, table, buffer

    tables = icon_provider(grid)
    tiled = {name: (np.ascontiguousarray(np.tile(t, (TILES, 1))), dom, cod) for name, (t, dom, cod) in tables.items()}
    total = sum(t.nbytes for t, _, _ in tiled.values())
    flat = np.concatenate([t.ravel() for t, _, _ in tiled.values()])
    settings = gridkey.Settings.from_vars({})
    rounds = iter(range(10**6))

    def provider():
        out = {}
        for name, (t, dom, cod) in tiled.items():
            out[name] = gridkey.Connectivity(
                t, gridkey.Dimension(dom), gridkey.Dimension(f"{name}Dim", "local"), gridkey.Dimension(cod), -1
            )
        return out

    def fresh(kind):
        d = scratch / f"{kind}-{next(rounds)}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    convert_times, save_times = [], []
    for i in range(reps + 1):
        p = provider()
        store = gridkey.TableStore(fresh("convert"), settings=settings)
        start = time.perf_counter()
        view = gridkey.compile_time_offset_provider(p, store)
        t_convert = time.perf_counter() - start
        assert len(view) == len(tiled)
        del view, store, p
        target = fresh("save") / "all.npy"
        start = time.perf_counter()
        with open(target, "wb") as f:
            np.save(f, flat)
            f.flush()
            os.fsync(f.fileno())
        t_save = time.perf_counter() - start
        if i > 0:  # the first round warms up
            convert_times.append(t_convert)
            save_times.append(t_save)
        shutil.rmtree(scratch, ignore_errors=True)
    convert, save = median(convert_times), median(save_times)
    cases.append({
        "name": "convert_py", "what": f"compile_time_offset_provider of the ICON R02B04 provider, every table tiled {TILES}x (fresh store and connectivities each round)",
        "tables": len(tiled), "bytes": total, "seconds": convert,
        "limit": "one numpy.save of the same bytes to a file plus os.fsync, interleaved",
        "limit_seconds": save, "ratio": convert / save, "ratio_means": "conversion time / save+fsync time",
        "goal": "<= 1.5", "all_seconds": convert_times, "all_limit_seconds": save_times,
    })
    return {"numpy": np.__version__, "python": sys.version.split()[0], "gridkey": gridkey.__name__, "cases": cases}


def digest_server(table_path):
    """Times one gridkey.table_digest of the table per line `go` read from stdin, printing the
    seconds: xtask interleaves these with its own Rust digest_table of the same table."""
    import gridkey

    table = np.load(table_path)
    gridkey.table_digest(table)
    print("ready", gridkey.table_digest(table), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        start = time.perf_counter()
        gridkey.table_digest(table)
        print(time.perf_counter() - start, flush=True)


def main(argv):
    if len(argv) == 2 and argv[0] == "make-table":
        make_table(argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "digest-server":
        digest_server(argv[1])
        return 0
    if len(argv) in (5, 6) and argv[0] == "measure":
        quick = argv[5:] == ["--quick"]
        doc = measure(argv[1], argv[2], argv[3], quick)
        Path(argv[4]).write_text(json.dumps(doc, indent=1) + "\n")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
