"""One run of the eight programs in one build-jobs mode on one persistent GT4Py cache (a cell of the proof).

Run by ``gt4py_proof.py`` in a fresh interpreter per cell, with the environment GT4Py reads at import
(``GT4PY_BUILD_CACHE_LIFETIME=persistent``, ``GT4PY_BUILD_CACHE_DIR``, ``GT4PY_BUILD_JOBS_MODE``, ``GT4PY_BUILD_JOBS``)
and ``GRIDKEY_CACHE_DIR`` set. It compiles the eight programs against the grid's full offset provider (tables in the
given memory order and allocator), with or without ``gridkey.gt4py``, waits for every compilation, runs each program
on the runtime provider and checks it against the NumPy reference. It prints one JSON object on its last line.

``--programs`` compiles only the named programs; ``--count-work`` counts the translations and C++ builds this process
makes (``gt4py_nodes.count_work``: writes to GT4Py's translation cache and calls of ``CompiledbProject.build``, in
this process: serial mode), so that ranks started together on one cache can be added up (the N-ranks part of the
proof).

``--key-cost`` instead measures one persistent translation-cache key (GT4Py's translation step ``cache_key``) of the
``div`` program at the grid's size and with every table tiled ``--tile`` times, with and without the adapter.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Python is not running in optimized mode")

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import gt4py.next as gtx  # noqa: E402
from gt4py.next import config  # noqa: E402
from gt4py.next.otf import compilation_tasks, compiled_program, runners  # noqa: E402
from gt4py.next.program_processors.runners.gtfn import run_gtfn  # noqa: E402

import icon_programs as ip  # noqa: E402
from gt4py_nodes import count_work  # noqa: E402


def translation_dir() -> pathlib.Path:
    return config.BUILD_CACHE_DIR / "translation_cache" / "gtfn"


def entries() -> set[str]:
    d = translation_dir()
    return {p.name for p in d.glob("*.pkl")} if d.is_dir() else set()


def allocator_of(name: str):
    return {"np": np, "default": None}[name]


def run(args) -> dict:
    tables = ip.read_icon_tables(args.grid)
    provider = ip.offset_provider(tables, order=args.order, allocator=allocator_of(args.allocator))
    names = args.programs or list(ip.PROGRAMS)
    work = count_work() if args.count_work else None
    before = entries()
    started_at = time.time()
    started = time.perf_counter()
    if args.adapter:
        import gridkey.gt4py

        active = gridkey.gt4py.install()
        assert active, "gridkey.gt4py.install() found GT4Py's own compile-time connectivities"
    for name in names:
        ip.PROGRAMS[name].compile(offset_provider=provider)
    pool_started = runners._default_runner is not None and not isinstance(runners._default_runner, runners.SerialRunner)
    compiled_program.wait_for_compilation()
    compile_seconds = time.perf_counter() - started
    compile_window = (started_at, time.time())
    after = entries()

    errors = {}
    for name, (inputs, out, reference) in ip.cases(tables).items():
        if name not in names:
            continue
        fields = ip.as_fields({**inputs, out: np.zeros_like(reference)})
        ip.PROGRAMS[name](**fields, offset_provider=provider)
        got = fields[out].asnumpy()
        errors[name] = float(np.max(np.abs(got - reference)) / max(float(np.max(np.abs(reference))), 1e-300))
    return {
        "mode": config.BUILD_JOBS_MODE.name.lower(),
        "order": args.order,
        "allocator": args.allocator,
        "adapter": bool(args.adapter),
        "compile_seconds": compile_seconds,
        "compile_window": compile_window,
        "pool_started": pool_started,
        "adapter_stats": gridkey.gt4py.stats() if args.adapter else None,
        "work": work,
        "new_translations": len(after - before),
        "translation_entries": len(after),
        "max_rel_error": errors,
        "verified": len(errors) == len(names) and all(e <= 1e-12 for e in errors.values()),
    }


def key_cost(args) -> dict:
    """Seconds of one persistent key of ``div`` (median of ``--repeat``) at R02B04 and tiled, with and without."""
    import gridkey.gt4py

    tables = ip.read_icon_tables(args.grid)
    captured = []
    original = compilation_tasks.make_compilation_task

    def capture(backend, definition_stage, compile_time_args):
        captured.append((backend, definition_stage, compile_time_args))
        return original(backend, definition_stage, compile_time_args)

    compilation_tasks.make_compilation_task = capture
    small = ip.offset_provider(tables, order=args.order, allocator=allocator_of(args.allocator))
    ip.PROGRAMS["div"].compile(offset_provider=small)
    compiled_program.wait_for_compilation()
    compilation_tasks.make_compilation_task = original
    backend, definition_stage, compile_time_args = captured[0]
    step = run_gtfn.executor.translation

    import dataclasses
    import statistics

    tiled = ip.offset_provider(ip.tile_tables(tables, args.tile), order=args.order, allocator=allocator_of(args.allocator))
    out: dict = {"order": args.order, "allocator": args.allocator, "tile": args.tile, "repeat": args.repeat}
    gridkey.gt4py.install()
    try:
        for label, provider in (("R02B04", small), (f"tiled {args.tile}x", tiled)):
            cta = dataclasses.replace(compile_time_args, offset_provider=provider)
            table_bytes = sum(c.ndarray.nbytes for c in provider.values())
            runtime = original(backend, definition_stage, cta).construct_compilable(False)
            started = time.perf_counter()
            ct = compilation_tasks.make_compilation_task(backend, definition_stage, cta).construct_compilable(True)
            convert = time.perf_counter() - started
            for name, compilable in (("without", runtime), ("with", ct)):
                times = []
                keys = set()
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    keys.add(step.cache_key(compilable))
                    times.append(time.perf_counter() - t0)
                assert len(keys) == 1
                out[f"{label} {name}"] = statistics.median(times)
            out[f"{label} convert"] = convert
            out[f"{label} table_bytes"] = table_bytes
            # What a miss costs in the calling process with the adapter (ADR 0038): the lookup before the task
            # goes to GT4Py's runner (a key and a cache probe; this cache holds no entry for the adapter's key).
            task = compilation_tasks.make_compilation_task(backend, definition_stage, cta)
            assert gridkey.gt4py._resolve_in_parent(task) is gridkey.gt4py._MISS
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                gridkey.gt4py._resolve_in_parent(task)
                times.append(time.perf_counter() - t0)
            out[f"{label} miss lookup"] = statistics.median(times)
    finally:
        gridkey.gt4py.uninstall()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", type=pathlib.Path, required=True)
    parser.add_argument("--order", choices=["C", "F"], default="C")
    parser.add_argument("--allocator", choices=["np", "default"], default="np")
    parser.add_argument("--adapter", type=int, choices=[0, 1], default=0)
    parser.add_argument("--programs", nargs="*", default=None, help="the programs to compile (default: all eight)")
    parser.add_argument("--count-work", action="store_true")
    parser.add_argument("--key-cost", action="store_true")
    parser.add_argument("--tile", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    assert config.BUILD_CACHE_LIFETIME is config.BuildCacheLifetime.PERSISTENT, os.environ.get("GT4PY_BUILD_CACHE_LIFETIME")
    result = key_cost(args) if args.key_cost else run(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
