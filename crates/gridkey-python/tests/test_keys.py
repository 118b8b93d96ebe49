"""Translation keys and explain from Python, against the golden files and the key witness."""

from __future__ import annotations

from typing import Any
from pathlib import Path

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import gridkey
from conftest import DATA, dims, icon_like, key_witness_source, gather

# The witness's functions, without running its command line.
witness: dict[str, Any] = {"__name__": "translation_key_witness"}
exec(key_witness_source, witness)


def record(frontend: Any="test-frontend", version: Any="1.0.0", program: Any="div", encoding: Any="00ff", options: Any=None, offsets: Any=None,
           fingerprint: Any="5e1f" * 8) -> Any:
    return {
        "key_format_version": 2,
        "digest_format_version": 1,
        "frontend": {"name": frontend, "version": version, "fingerprint": fingerprint},
        "program": program,
        "program_encoding": encoding,
        "options": options or {},
        "offsets": offsets if offsets is not None else [
            {"kind": "dimension", "offset": "Koff", "name": "K", "dimension_kind": "vertical"},
            {"kind": "gather", "offset": "C2E", "domain": "Cell", "local": "C2EDim", "codomain": "Edge",
             "skip_value": None, "dtype": "<i4", "shape": [20480, 3], "digest": "9bcee51d14f05d37316945fc51e952ed"},
        ],
    }


def test_the_golden_key() -> None:
    golden = (DATA / "golden" / "translation-key-v2.txt").read_text().strip()
    inputs = gridkey.KeyInputs.from_json(json.dumps(record()))
    assert inputs.key() == gridkey.translation_key(inputs) == golden
    assert gridkey.KeyInputs.from_json(inputs.to_json()) == inputs


def test_explain_matches_the_golden_file() -> None:
    golden = json.loads((DATA / "golden" / "explain-v1.json").read_text())

    def c2e(digest: Any, rows: Any, skip: Any) -> Any:
        return {"kind": "gather", "offset": "C2E", "domain": "Cell", "local": "C2EDim", "codomain": "Edge",
                "skip_value": skip, "dtype": "<i4", "shape": [rows, 3], "digest": digest}

    koff = {"kind": "dimension", "offset": "Koff", "name": "K", "dimension_kind": "vertical"}
    fp = "0123456789abcdef" * 2
    a = record("gridkey-stencil", "0.1.0", "div", "0102", {}, [c2e("9bcee51d14f05d37316945fc51e952ed", 20480, None), koff],
               fp)
    b = record("gridkey-stencil", "0.1.0", "div", "0102", {"opt_level": "3"},
               [c2e("eca80d29e9c8c9e85522c42c2dcf1a50", 1791, -1), koff], fp)
    a, b = gridkey.KeyInputs.from_json(json.dumps(a)), gridkey.KeyInputs.from_json(json.dumps(b))
    assert gridkey.explain(a, b) == golden
    same = gridkey.explain(a, a)
    assert same["identical"] and same["differences"] == []


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@st.composite
def offset_entries(draw: Any) -> Any:
    out: list[tuple[Any, ...]] = []
    for i in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            out.append(("dimension", f"D{i}", draw(names), draw(st.sampled_from(["horizontal", "vertical", "local"]))))
        else:
            out.append(("gather", f"G{i}", draw(names), draw(names), draw(names),
                        draw(st.none() | st.integers(-(2**63), 2**63 - 1)), draw(st.sampled_from(["<i4", "<i8"])),
                        (draw(st.integers(0, 2**40)), draw(st.integers(0, 64))),
                        draw(st.text("0123456789abcdef", min_size=32, max_size=32))))
    return out


@settings(max_examples=200, deadline=None)
@given(names, names, names, st.binary(max_size=40), st.dictionaries(names, names, max_size=4), offset_entries())
def test_keys_equal_the_witness(frontend: Any, version: Any, program: Any, encoding: Any, options: Any, entries: Any) -> None:
    offsets, encoded = [], []
    for e in entries:
        if e[0] == "dimension":
            _, offset, name, kind = e
            offsets.append({"kind": "dimension", "offset": offset, "name": name, "dimension_kind": kind})
            encoded.append(witness["dimension"](offset, name, kind))
        else:
            _, offset, domain, local, codomain, skip, dtype, shape, digest = e
            offsets.append({"kind": "gather", "offset": offset, "domain": domain, "local": local, "codomain": codomain,
                            "skip_value": skip, "dtype": dtype, "shape": list(shape), "digest": digest})
            encoded.append(witness["gather"](offset, domain, local, codomain, skip, dtype, shape, digest))
    rec = record(frontend, version, program, encoding.hex(), options, offsets, fingerprint=version[::-1])
    expected = witness["key"](frontend, version, version[::-1], program, encoding.hex(), options, encoded)
    assert gridkey.KeyInputs.from_json(json.dumps(rec)).key() == expected


def key_of(provider: Any, store: gridkey.TableStore, program: Any="div", options: Any=None, frontend: Any=("fe", "1.0", "f1"), encoding: Any=b"\x01\x02") -> Any:
    view = gridkey.compile_time_offset_provider(provider, store)
    return gridkey.KeyInputs(frontend[0], frontend[1], program, encoding, options or {}, view,
                             frontend_fingerprint=frontend[2]).key()


def provider(table: Any, skip: Any=-1, domain: Any=None, codomain: Any=None, koff: Any=True, name: Any="C2E") -> Any:
    d, local, c = dims()
    out: dict[str, gridkey.Connectivity | gridkey.Dimension] = {
        name: gridkey.Connectivity(table, domain or d, local, codomain or c, skip)
    }
    if koff:
        out["Koff"] = gridkey.Dimension("K", "vertical")
    return out


def test_every_key_input_changes_the_key(store: gridkey.TableStore) -> None:
    table = icon_like(seed=11)
    base = key_of(provider(table), store)
    changed_table = table.copy()
    changed_table[5, 1] += 1
    wide = table.astype(np.int64)
    wide[0, 0] = 2**40
    variants = {
        "table content": key_of(provider(changed_table), store),
        "table shape": key_of(provider(table[:-1]), store),
        "skip value": key_of(provider(table, skip=None), store),
        "domain": key_of(provider(table, domain=gridkey.Dimension("Edge")), store),
        "codomain": key_of(provider(table, codomain=gridkey.Dimension("Vertex")), store),
        "offset name": key_of(provider(table, name="C2X"), store),
        "entries": key_of(provider(table, koff=False), store),
        "order": key_of(dict(reversed(list(provider(table).items()))), store),
        "program": key_of(provider(table), store, program="grad"),
        "encoding": key_of(provider(table), store, encoding=b"\x01\x03"),
        "option": key_of(provider(table), store, options={"opt_level": "3"}),
        "frontend": key_of(provider(table), store, frontend=("other", "1.0", "f1")),
        "frontend version": key_of(provider(table), store, frontend=("fe", "1.1", "f1")),
        "frontend fingerprint": key_of(provider(table), store, frontend=("fe", "1.0", "f2")),
        "int64 not fitting int32": key_of(provider(wide), store),
    }
    for what, key in variants.items():
        assert key != base, what
    assert len(set(variants.values())) == len(variants)


def test_layout_width_device_and_path_do_not_enter_the_key(store: gridkey.TableStore, tmp_path: Path) -> None:
    from conftest import DeviceTable

    table = icon_like(seed=12)
    base = key_of(provider(table), store)
    other_store = gridkey.TableStore(tmp_path / "elsewhere", settings=gridkey.Settings.from_vars({}))
    for what, variant, s in [
        ("Fortran order", np.asfortranarray(table), store),
        ("int64", table.astype(np.int64), store),
        ("big-endian", table.astype(">i8"), store),
        ("strided", np.repeat(table, 3, axis=0)[::3], store),
        ("device", DeviceTable(table), store),
        ("another cache directory", table, other_store),
    ]:
        assert key_of(provider(variant), s) == base, what


def test_key_inputs_expose_the_record(store: gridkey.TableStore) -> None:
    table = icon_like(seed=13)
    view = gridkey.compile_time_offset_provider(provider(table), store)
    inputs = gridkey.KeyInputs("fe", "1.0", "div", b"\xab", {"b": "2", "a": "1"}, view)
    assert inputs.program == "div" and inputs.frontend == "fe" and inputs.frontend_version == "1.0"
    assert inputs.encoding == b"\xab" and list(inputs.options) == ["a", "b"]
    assert inputs.offsets[0]["digest"] == gather(view, "C2E").digest and inputs.offsets[1]["kind"] == "dimension"
    rec = json.loads(inputs.to_json())
    assert rec["program_encoding"] == "ab" and str(store.cache_dir) not in inputs.to_json()
