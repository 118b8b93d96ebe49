"""The proof on GT4Py itself: persistent translation-cache misses across build-jobs modes, without and with
``gridkey.gt4py``. Run by ``cargo xtask gt4py [--reduced]`` in a virtual environment holding ``gt4py==1.2.3``, its
``gtfn_cpu`` build dependencies and the ``gridkey`` wheel.

1. Seed: the programs' C++ (``--programs``: all eight, ``--reduced``: ``REDUCED_PROGRAMS``) built once (serial, without the adapter) into a GT4Py cache whose translation cache
   is then removed, so that every fill translates but finds its builds.
2. Matrix: for each table variant (C or Fortran order, ``allocator=np`` or GT4Py's default allocator), each adapter
   setting and each ordered pair of build-jobs modes (A, B): a fresh copy of the seed is filled in mode A, a copy of
   that is run in mode B, and the translation-cache entries B adds are counted (re-translations). Every run checks
   its results against NumPy on the runtime tables.
3. The C++ GT4Py generates (each program's translated source and signature) is byte-identical with and without the
   adapter, and no run with the adapter builds anything the seed did not hold.
4. One persistent key's cost at R02B04 and with every table tiled 100 times, without and with the adapter; the warm
   start of the programs in each mode (full matrix only: on the caches of the diagonal cells A = B of C-order
   ``np`` tables, ``--warm-repeats`` runs per mode and setting, with and without alternating), without and with.

5. The warm start with the adapter in every mode against serial (process / serial <= 1.2, thread / serial <= 1.2;
   serial with the adapter no slower than without; ADR 0038): medians of ``--warm-repeats`` (``--reduced``: 5).
6. N ranks cold on one empty cache (separate processes started together, serial mode, with the adapter; N = 4 and 8):
   translations and C++ builds counted in every rank and added up equal the programs, the compile wall time of the N
   ranks (the first ``compile()`` to the last ``wait_for_compilation()``) is at most 1.3x one rank cold (the wall time
   of the processes, interpreter starts included, is printed beside it), and every rank's results equal NumPy
   (ADR 0039). ``--reduced``: N = 4 on the programs ``--ranks-programs`` (default ``div``), full: all eight.

``--reduced`` (CI, sized for a 2-core machine): three programs, C-order ``np`` tables, the pairs serial -> process, process -> serial
and the control serial -> thread, and N = 4 ranks only. Exit status 0 when every cell with the adapter has 0 re-translations, every result
verifies, the C++ is identical, GT4Py's own misses show without the adapter and the N ranks translate and build each
program once; the warm-start ratios and the N ranks' wall time are timings on a shared machine, printed against their
limits and written to the JSON, never the exit status.

``--warm-only``: only the warm start of step 4, on caches it fills from the seed (one per mode and setting, C-order
``np`` tables), ``--warm-repeats`` runs each; results in ``gt4py-warm-start.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import pickle
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, TypeVar

HERE = pathlib.Path(__file__).resolve().parent
#: The table variant of the warm-start benchmark.
BENCH_VARIANT = ("C", "np")
MODES = ("serial", "thread", "process")
#: What one warm start of `alternating` returns.
T = TypeVar("T")
GT4PY_CACHE = ".gt4py_cache"
TRANSLATIONS = pathlib.Path(GT4PY_CACHE) / "translation_cache" / "gtfn"


def cell_env(cache: pathlib.Path, mode: str, jobs: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GT4PY_", "GRIDKEY_"))}
    env.update(
        GT4PY_BUILD_CACHE_LIFETIME="persistent",
        GT4PY_BUILD_CACHE_DIR=str(cache),
        GT4PY_BUILD_JOBS=str(jobs),
        GT4PY_BUILD_JOBS_MODE=mode,
        GRIDKEY_CACHE_DIR=str(cache / "gridkey"),
        # cmake and ninja of the virtual environment
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


def run_cell(cache: pathlib.Path, mode: str, args, extra: list[str]) -> dict:
    if "--programs" not in extra:
        extra = [*extra, "--programs", *args.programs]
    command = [sys.executable, str(HERE / "gt4py_cell.py"), "--grid", str(args.grid), *extra]
    started = time.perf_counter()
    done = subprocess.run(command, env=cell_env(cache, mode, args.jobs), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-4000:])
        sys.stdout.write(done.stderr[-8000:])
        raise SystemExit(f"gt4py proof: the cell {mode} {' '.join(extra)} in {cache} failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_seconds"] = wall
    return result


def build_folders(cache: pathlib.Path) -> set[str]:
    root = cache / GT4PY_CACHE
    return {p.name for p in root.iterdir() if p.is_dir() and p.name != "translation_cache"} if root.is_dir() else set()


def copy_cache(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)
    return target


def seed_key(args) -> str:
    import gt4py

    h = hashlib.sha256()
    h.update(gt4py.__version__.encode())
    h.update((HERE / "icon_programs.py").read_bytes())
    h.update(args.grid.read_bytes())
    h.update(" ".join(args.programs).encode())
    return h.hexdigest()


def make_seed(args) -> tuple[pathlib.Path, float | None]:
    """The seed cache: the builds of ``args.programs``, no translation entries. Reused while its key matches."""
    seed = args.work / "seed"
    key = seed_key(args)
    stamp = seed / "seed-key"
    if stamp.is_file() and stamp.read_text() == key:
        return seed, None
    build = copy_cache_empty(args.work / "seed-build")
    started = time.perf_counter()
    result = run_cell(build, "serial", args, ["--order", "C", "--allocator", "np", "--adapter", "0"])
    seconds = time.perf_counter() - started
    if not result["verified"]:
        raise SystemExit(f"gt4py proof: the seed build did not verify: {result['max_rel_error']}")
    shutil.rmtree(build / TRANSLATIONS.parent)
    if seed.exists():
        shutil.rmtree(seed)
    build.rename(seed)
    stamp.write_text(key)
    return seed, seconds


def copy_cache_empty(path: pathlib.Path) -> pathlib.Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def translated_sources(cache: pathlib.Path) -> dict[str, str]:
    """Program name -> its translated C++ and signature, from the translation-cache entries."""
    out = {}
    for entry in sorted((cache / TRANSLATIONS).glob("*.pkl")):
        with open(entry, "rb") as f:
            source = pickle.load(f)
        out[source.entry_point.name] = f"{source.entry_point!r}\n{source.source_code}"
    return out


def variants(reduced: bool) -> list[tuple[str, str]]:
    if reduced:
        return [BENCH_VARIANT]
    return [(order, allocator) for allocator in ("np", "default") for order in ("C", "F")]


def pairs(reduced: bool) -> list[tuple[str, str]]:
    if reduced:
        return [("serial", "process"), ("process", "serial"), ("serial", "thread")]
    return [(a, b) for a in MODES for b in MODES]


def label(order: str, allocator: str) -> str:
    return f"{'C' if order == 'C' else 'Fortran'} order, allocator={allocator}"


def kept_cache(args, mode: str, adapter: bool) -> pathlib.Path:
    """The cache warm for ``mode`` with or without the adapter, kept for the warm-start benchmark."""
    return args.work / f"warm-{mode}-{'with' if adapter else 'without'}"


def alternating(repeats: int, run_one: Callable[[str, bool], T]) -> dict[tuple[str, bool], list[T]]:
    """The warm-start schedule of both GT4Py proofs: ``repeats`` rounds, each running ``run_one(mode, adapter)`` for
    every mode of `MODES` without and with the adapter, which of the two goes first swapping every round, so that a
    drift of the machine during the benchmark falls on both settings alike. Returns each (mode, adapter)'s results in
    the order they ran."""
    results: dict[tuple[str, bool], list[T]] = {}
    for rep in range(repeats):
        for mode in MODES:
            for adapter in (False, True) if rep % 2 == 0 else (True, False):
                results.setdefault((mode, adapter), []).append(run_one(mode, adapter))
    return results


def warm_starts(args, repeats: int, seed: pathlib.Path) -> tuple[dict[tuple[str, bool], list[float]], bool]:
    """``repeats`` warm starts per mode and setting on the kept caches (a missing one is filled from the seed in its
    mode), with and without the adapter alternating (which goes first swaps every round); the compile seconds of
    each, and whether every run was verified and translated nothing. With the adapter, a warm start in process mode
    must start no pool (ADR 0038)."""
    ok = True
    order, allocator = BENCH_VARIANT
    if repeats:
        for mode in MODES:
            for adapter in (False, True):
                if not kept_cache(args, mode, adapter).is_dir():
                    kept = copy_cache(seed, kept_cache(args, mode, adapter))
                    extra = ["--order", order, "--allocator", allocator, "--adapter", str(int(adapter))]
                    ok &= run_cell(kept, mode, args, extra)["verified"]

    def one(mode: str, adapter: bool) -> float:
        nonlocal ok
        extra = ["--order", order, "--allocator", allocator, "--adapter", str(int(adapter))]
        result = run_cell(kept_cache(args, mode, adapter), mode, args, extra)
        ok &= result["verified"] and result["new_translations"] == 0
        if adapter and result["pool_started"]:
            print(f"  a warm start in {mode} mode with the adapter started GT4Py's pool")
            ok = False
        return float(result["compile_seconds"])

    warm_start = alternating(repeats, one)
    return warm_start, ok


def print_warm_starts(warm_start: dict[tuple[str, bool], list[float]], programs: list[str]) -> None:
    order, allocator = BENCH_VARIANT
    for mode in MODES:
        if (mode, False) in warm_start and (mode, True) in warm_start:
            w0, w1 = (statistics.median(warm_start[(mode, a)]) for a in (False, True))
            print(
                f"warm start of {len(programs)} programs ({label(order, allocator)}, median of {len(warm_start[(mode, True)])},"
                f" alternating), {mode:<7}: without {w0:.2f} s, with {w1:.2f} s ({w1 / w0:.2f}x without, limit 1.0x)"
            )


#: Limits of the warm start with the adapter (ADR 0038): a mode against serial with the adapter, and serial with the
#: adapter against serial without.
WARM_LIMITS = {"process / serial": 1.2, "thread / serial": 1.2, "serial with / serial without": 1.0}


def warm_start_ratios(warm_start: dict[tuple[str, bool], list[float]]) -> tuple[dict[str, float], bool]:
    """The ratios of median warm starts that `WARM_LIMITS` bounds, and whether each is within its limit."""
    med = {k: statistics.median(v) for k, v in warm_start.items() if v}
    if not all((m, a) in med for m in MODES for a in (False, True)):
        return {}, False
    ratios = {
        "process / serial": med[("process", True)] / med[("serial", True)],
        "thread / serial": med[("thread", True)] / med[("serial", True)],
        "serial with / serial without": med[("serial", True)] / med[("serial", False)],
        "process without / serial without": med[("process", False)] / med[("serial", False)],
    }
    ok = True
    for name, limit in WARM_LIMITS.items():
        within = ratios[name] <= limit
        ok &= within
        print(f"warm start with the adapter, {name}: {ratios[name]:.2f} (limit {limit}){'' if within else '  EXCEEDED'}")
    return ratios, ok


#: Warm starts per mode and setting of ``--reduced``: the two settings' serial medians are a few milliseconds apart
#: (the adapter's import among them) on a machine whose runs of one setting vary by tens of milliseconds, and a
#: median of 3 is moved by one slow run.
REDUCED_WARM_REPEATS = 5

#: The programs of ``--reduced`` (CI, 2 cores): three of the eight, one per kind of neighbour table use (a sum over a
#: cell's edges ``C2E``; over a vertex's edges ``V2E``, whose pentagon rows hold skip values; over a cell's neighbours
#: through its edges ``C2E2C``), so the seed builds three extensions instead of eight.
REDUCED_PROGRAMS = ["div", "rot", "c2e2c_avg"]


def list_programs() -> list[str]:
    sys.path.insert(0, str(HERE))
    import icon_programs

    return list(icon_programs.PROGRAMS)


def ranks(args, n: int, programs: list[str]) -> dict:
    """``n`` ranks (separate interpreters, serial mode, with the adapter) started together on one empty cache: the
    wall time until the last one ended, and the translations and C++ builds each made, added up."""
    cache = copy_cache_empty(args.work / f"ranks-{n}")
    extra = ["--order", "C", "--allocator", "np", "--adapter", "1", "--count-work", "--programs", *programs]
    command = [sys.executable, str(HERE / "gt4py_cell.py"), "--grid", str(args.grid), *extra]
    env = cell_env(cache, "serial", 1)
    started = time.perf_counter()
    children = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [c.communicate() for c in children]
    wall = time.perf_counter() - started
    results = []
    for child, (out, err) in zip(children, outs):
        if child.returncode != 0:
            sys.stdout.write(out[-4000:])
            sys.stdout.write(err[-8000:])
            raise SystemExit(f"gt4py proof: a rank of {n} in {cache} failed ({child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "ranks": n,
        "wall_seconds": wall,
        # From the first rank's compile() to the last rank's wait_for_compilation(): what the ranks spend on
        # translations and builds, without starting N interpreters and importing GT4Py N times on a few cores.
        "compile_wall_seconds": max(r["compile_window"][1] for r in results) - min(r["compile_window"][0] for r in results),
        "translations": sum(r["work"]["translations"] for r in results),
        "builds": sum(r["work"]["builds"] for r in results),
        "translation_entries": len(list((cache / TRANSLATIONS).glob("*.pkl"))),
        "build_folders": len(build_folders(cache)),
        "verified": all(r["verified"] for r in results),
        "rank_compile_seconds": [r["compile_seconds"] for r in results],
    }


#: The compile wall time of N ranks cold on one cache against one rank cold (ADR 0039).
RANKS_LIMIT = 1.3


def check_ranks(one: dict, many: dict[int, dict], programs: list[str]) -> tuple[bool, bool]:
    """Whether the counts hold (one translation and one build per program in all, every rank verified) and, apart,
    whether the wall times are within ``RANKS_LIMIT``: a timing, reported, never the exit status."""
    ok = one["verified"] and one["translations"] == len(programs) and one["builds"] == len(programs)
    within = True
    for r in many.values():
        ok &= r["verified"] and r["translations"] == len(programs) and r["builds"] == len(programs)
        within &= r["compile_wall_seconds"] <= RANKS_LIMIT * one["compile_wall_seconds"]
    return ok, within


def print_ranks(one: dict, many: dict[int, dict], programs: list[str]) -> None:
    p = len(programs)
    print(
        f"one rank cold ({p} program{'s' if p > 1 else ''}: {', '.join(programs)}): compile {one['compile_wall_seconds']:.1f} s"
        f" (process {one['wall_seconds']:.1f} s),"
        f" {one['translations']} translations, {one['builds']} C++ builds, {'verified' if one['verified'] else 'NOT VERIFIED'}"
    )
    for n, r in many.items():
        print(
            f"{n} ranks cold on one cache: compile {r['compile_wall_seconds']:.1f} s"
            f" ({r['compile_wall_seconds'] / one['compile_wall_seconds']:.2f}x one rank, limit {RANKS_LIMIT}x; processes"
            f" {r['wall_seconds']:.1f} s, {r['wall_seconds'] / one['wall_seconds']:.2f}x), {r['translations']} translations and {r['builds']} C++ builds in all (of {p}),"
            f" {'verified' if r['verified'] else 'NOT VERIFIED'} in every rank"
        )


def warm_only(args, seed: pathlib.Path, started: float) -> int:
    """``--warm-only``: fills one cache per mode and setting from the seed in that mode, then the warm starts."""
    ok = True
    order, allocator = BENCH_VARIANT
    for mode in MODES:
        for adapter in (False, True):
            kept = copy_cache(seed, kept_cache(args, mode, adapter))
            extra = ["--order", order, "--allocator", allocator, "--adapter", str(int(adapter))]
            fill = run_cell(kept, mode, args, extra)
            ok &= fill["verified"]
            print(f"  filled {kept.name} in {fill['compile_seconds']:.1f} s", flush=True)
    warm_start, warm_ok = warm_starts(args, args.warm_repeats, seed)
    ok &= warm_ok
    print_warm_starts(warm_start, args.programs)
    results = {
        "warm_start_seconds": {f"{m} {'with' if a else 'without'}": s for (m, a), s in warm_start.items()},
        "seconds": time.perf_counter() - started,
    }
    (args.work / "gt4py-warm-start.json").write_text(json.dumps(results, indent=1))
    print(f"\ngt4py warm start: {'ok' if ok else 'FAILED'}; {time.perf_counter() - started:.0f} s")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True, help="scratch directory (caches of every cell)")
    parser.add_argument("--reduced", action="store_true")
    parser.add_argument("--jobs", type=int, default=2, help="GT4PY_BUILD_JOBS of thread and process mode")
    parser.add_argument("--tile", type=int, default=100)
    parser.add_argument(
        "--warm-repeats",
        type=int,
        default=11,
        help="warm starts per mode and setting (full matrix; single starts swing by a factor of 2, so 11 for the median)",
    )
    parser.add_argument(
        "--ranks-programs",
        nargs="+",
        default=["div"],
        help="the programs of the N-ranks part under --reduced (full: all eight)",
    )
    parser.add_argument(
        "--programs",
        nargs="+",
        default=None,
        help=f"the programs of the matrix, the seed and the warm starts (default: {' '.join(REDUCED_PROGRAMS)} under"
        " --reduced, else all eight)",
    )
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="only the warm-start benchmark, on caches filled here from the seed (one per mode and setting)",
    )
    args = parser.parse_args()
    args.grid = args.grid.resolve()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.programs is None:
        args.programs = REDUCED_PROGRAMS if args.reduced else list_programs()
    unknown = sorted(set(args.programs) - set(list_programs()))
    if unknown:
        parser.error(f"unknown programs {unknown}: the programs are {' '.join(list_programs())}")
    import gt4py

    print(f"gt4py proof: GT4Py {gt4py.__version__}, Python {sys.version.split()[0]}, grid {args.grid.name}")
    started = time.perf_counter()
    seed, seed_seconds = make_seed(args)
    seed_builds = build_folders(seed)
    print(
        f"seed: {len(seed_builds)} build folders in {seed}"
        + (f", built in {seed_seconds:.1f} s" if seed_seconds is not None else " (reused: same GT4Py, programs, grid)")
    )

    if args.warm_only:
        return warm_only(args, seed, started)
    if args.reduced:
        # The reduced matrix keeps no diagonal cell: the warm-start caches are filled afresh from the seed.
        for mode in MODES:
            for adapter in (False, True):
                shutil.rmtree(kept_cache(args, mode, adapter), ignore_errors=True)
    cells = []
    ok = True
    sources: dict[tuple[str, str, bool], dict[str, str]] = {}
    wanted = pairs(args.reduced)
    fills_needed = sorted({a for a, _ in wanted}, key=MODES.index)
    for order, allocator in variants(args.reduced):
        for adapter in (False, True):
            common = ["--order", order, "--allocator", allocator, "--adapter", str(int(adapter))]
            for a in fills_needed:
                fill_dir = copy_cache(seed, args.work / "fill")
                fill = run_cell(fill_dir, a, args, common)
                ok &= fill["verified"]
                if a == "serial":
                    sources[(order, allocator, adapter)] = translated_sources(fill_dir)
                for b in [b for a2, b in wanted if a2 == a]:
                    warm_dir = copy_cache(fill_dir, args.work / "warm")
                    warm = run_cell(warm_dir, b, args, common)
                    new_builds = sorted(build_folders(warm_dir) - seed_builds)
                    if a == b and (order, allocator) == BENCH_VARIANT:
                        # A cache warm for mode a: kept for the warm-start benchmark.
                        kept = kept_cache(args, a, adapter)
                        if kept.exists():
                            shutil.rmtree(kept)
                        warm_dir.rename(kept)
                    cell = {
                        "order": order,
                        "allocator": allocator,
                        "adapter": adapter,
                        "fill_mode": a,
                        "run_mode": b,
                        "fill_translations": fill["new_translations"],
                        "retranslations": warm["new_translations"],
                        "new_builds": len(new_builds),
                        "fill_compile_seconds": fill["compile_seconds"],
                        "run_compile_seconds": warm["compile_seconds"],
                        "verified": fill["verified"] and warm["verified"],
                    }
                    cells.append(cell)
                    ok &= cell["verified"]
                    print(
                        f"  {label(order, allocator):<30} {'with' if adapter else 'without':<8} {a:>7} -> {b:<7}"
                        f" re-translated {warm['new_translations']}/{len(args.programs)}  (fill {fill['new_translations']}/{len(args.programs)},"
                        f" {warm['compile_seconds']:.1f} s, new builds {len(new_builds)},"
                        f" {'verified' if cell['verified'] else 'NOT VERIFIED'})",
                        flush=True,
                    )

    # The matrix, one block per variant and adapter setting.
    print(f"\nre-translations in mode B of a cache filled in mode A (of {len(args.programs)} programs)")
    run_modes = [m for m in MODES if any(b == m for _, b in wanted)]
    for order, allocator in variants(args.reduced):
        for adapter in (False, True):
            print(f"\n  {label(order, allocator)}, {'with' if adapter else 'without'} gridkey.gt4py")
            corner = "A \\ B"
            print(f"    {corner:<9}" + "".join(f"{m:>9}" for m in run_modes))
            for a in fills_needed:
                row = []
                for b in run_modes:
                    hit = [c for c in cells if (c["order"], c["allocator"], c["adapter"], c["fill_mode"], c["run_mode"]) == (order, allocator, adapter, a, b)]
                    row.append(f"{hit[0]['retranslations']:>9}" if hit else f"{'-':>9}")
                print(f"    {a:<9}" + "".join(row))

    with_cells = [c for c in cells if c["adapter"]]
    without_cells = [c for c in cells if not c["adapter"]]
    with_zero = sum(c["retranslations"] == 0 for c in with_cells)
    without_missed = sum(c["retranslations"] for c in without_cells)
    without_cells_missing = sum(c["retranslations"] > 0 for c in without_cells)
    with_builds = sum(c["new_builds"] for c in with_cells)
    ok &= with_zero == len(with_cells) and with_builds == 0 and without_missed > 0

    # Generated C++ with and without the adapter.
    identical = 0
    compared = 0
    for order, allocator in variants(args.reduced):
        without, with_ = sources.get((order, allocator, False)), sources.get((order, allocator, True))
        if without is None or with_ is None:
            continue
        for name in sorted(set(without) | set(with_)):
            compared += 1
            if without.get(name) is not None and without.get(name) == with_.get(name):
                identical += 1
            else:
                print(f"  C++ of {name} differs with the adapter ({label(order, allocator)})")
    ok &= compared > 0 and identical == compared

    # One persistent key's cost.
    key_dir = copy_cache(seed, args.work / "key-cost")
    key = run_cell(key_dir, "serial", args, ["--key-cost", "--tile", str(args.tile), "--order", "C", "--allocator", "np"])
    tiled = f"tiled {args.tile}x"

    # Warm start: runs on caches warm for their mode, with and without the adapter alternating, in one run.
    warm_start, warm_ok = warm_starts(args, REDUCED_WARM_REPEATS if args.reduced else args.warm_repeats, seed)
    ok &= warm_ok
    # The ratios are timings on a shared machine: printed and written, never the exit status.
    ratios, ratios_ok = warm_start_ratios(warm_start)

    # N ranks cold on one cache.
    rank_programs = args.ranks_programs if args.reduced else args.programs
    ranks_results = {}
    one = ranks(args, 1, rank_programs)
    for n in (4,) if args.reduced else (4, 8):
        ranks_results[n] = ranks(args, n, rank_programs)
    ranks_ok, ranks_within = check_ranks(one, ranks_results, rank_programs)
    ok &= ranks_ok

    print(f"\nC++ generated with the adapter equals the C++ without: {identical}/{compared} programs; new builds with the adapter: {with_builds}")
    print(
        f"one persistent key (div, median of {key['repeat']}): R02B04 without {key['R02B04 without'] * 1e3:.2f} ms,"
        f" with {key['R02B04 with'] * 1e3:.3f} ms; {tiled} ({key[tiled + ' table_bytes'] / 1e6:.0f} MB of tables) without"
        f" {key[tiled + ' without'] * 1e3:.2f} ms ({key[tiled + ' without'] / key['R02B04 without']:.1f}x R02B04),"
        f" with {key[tiled + ' with'] * 1e3:.3f} ms ({key[tiled + ' with'] / key['R02B04 with']:.2f}x R02B04, limit 1.2x)"
    )
    print(
        f"  converting the provider once (digest, store, map; not part of a key): R02B04 {key['R02B04 convert'] * 1e3:.1f} ms,"
        f" {tiled} {key[tiled + ' convert'] * 1e3:.1f} ms"
    )
    print_warm_starts(warm_start, args.programs)
    for name, value in ratios.items():
        print(f"  {name}: {value:.2f}")
    print(
        f"a miss's lookup in the calling process with the adapter (div, ADR 0038): R02B04 {key['R02B04 miss lookup'] * 1e3:.2f} ms,"
        f" {tiled} {key[tiled + ' miss lookup'] * 1e3:.2f} ms (one key and a cache probe)"
    )
    print_ranks(one, ranks_results, rank_programs)

    results = {
        "gt4py": gt4py.__version__,
        "reduced": args.reduced,
        "cells": cells,
        "cpp_identical": identical,
        "cpp_compared": compared,
        "key_cost": key,
        "warm_start_seconds": {f"{m} {'with' if a else 'without'}": s for (m, a), s in warm_start.items()},
        "warm_start_ratios": ratios,
        "ranks": {
            "programs": rank_programs,
            "one_rank": one,
            **{f"{n}_ranks": r for n, r in ranks_results.items()},
            "ok": ranks_ok,
            "within_limit": ranks_within,
        },
        "seconds": time.perf_counter() - started,
    }
    (args.work / "gt4py-proof.json").write_text(json.dumps(results, indent=1))
    print(
        f"\ngt4py proof: with gridkey.gt4py {with_zero}/{len(with_cells)} cells re-translated 0;"
        f" without it {without_cells_missing}/{len(without_cells)} cells missed ({without_missed} re-translations);"
        f" C++ identical {identical}/{compared}; warm-start ratios {'within limits' if ratios_ok else 'EXCEEDED'};"
        f" N ranks {'ok' if ranks_ok else 'FAILED'} (wall {'within' if ranks_within else 'over'} {RANKS_LIMIT}x); {time.perf_counter() - started:.0f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
