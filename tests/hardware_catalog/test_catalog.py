"""Tests for the accelerator catalog: data-file contents against published figures and the
reference catalog, lookup by id/alias, and cluster resolution of accelerator-only groups
(systems, fabrics and topology resolution: test_topology.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hardware_catalog.loader import (
    PRECISIONS,
    CatalogDataError,
    get_accelerator,
    list_accelerators,
    load_accelerators,
    normalize_accelerator_name,
    resolve_cluster,
)
from hardware_catalog.schema import AcceleratorSpec
from specs.cluster import MAX_TOTAL_GPUS, ClusterSpec
from specs.errors import CatalogLookupError, SpecError

REPO = Path(__file__).parents[2]
DATA_DIR = REPO / "hardware_catalog" / "data"
# The reference catalog every accelerator file was converted from (carried in the repository).
REFERENCE_JSON = REPO / "docs" / "reference" / "hardware_catalog.json"

REQUIRED_IDS = [
    "v100-32gb", "a100-40gb", "a100-80gb", "a100-pcie-80gb", "a800", "h100-sxm", "h100-pcie",
    "h800", "h20", "h200", "b200", "gb200", "l40s", "l4", "a10", "rtx-4090", "mi250x", "mi300x",
    "mi325x", "mi355x", "gaudi2", "gaudi3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
]  # fmt: skip
# Reference entries deliberately left out (see hardware_catalog/data/README.md).
SKIPPED_REFERENCE_IDS = {"huawei_ascend_910b"}
PCIE_CARDS = ["l40s", "l4", "a10", "rtx-4090"]


def _flagged(acc: AcceleratorSpec, field: str) -> bool:
    """True when `field` is listed in unverified_fields (our lines start with the field name)."""
    return any(line.startswith(f"{field}:") for line in acc.unverified_fields)


def _reference() -> list[dict[str, Any]]:
    assert REFERENCE_JSON.is_file(), f"reference catalog missing: {REFERENCE_JSON}"
    data: list[dict[str, Any]] = json.loads(REFERENCE_JSON.read_text())
    return data


# --- public API and inventory -------------------------------------------------------------


def _package() -> ModuleType:
    """The `hardware_catalog` package with its `__init__` executed.

    An editable install made before the package had an `__init__.py` makes a bare `pytest`
    (cwd not on sys.path) import it as a namespace package; then run the real file.
    """
    package = importlib.import_module("hardware_catalog")
    if getattr(package, "__file__", None):
        return package
    init = REPO / "hardware_catalog" / "__init__.py"
    spec = importlib.util.spec_from_file_location("hardware_catalog", init)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_public_api_is_pinned() -> None:
    hardware_catalog = _package()
    assert sorted(hardware_catalog.__all__) == sorted(
        [
            "COLLECTIVES",
            "PRECISIONS",
            "AcceleratorSpec",
            "Catalog",
            "CatalogDataError",
            "CollectiveCurve",
            "FabricLayout",
            "FabricSpec",
            "InNetworkReduction",
            "ResolvedCluster",
            "ResolvedNodeGroup",
            "Source",
            "SystemSpec",
            "get_accelerator",
            "get_fabric",
            "get_system",
            "list_accelerators",
            "list_fabrics",
            "list_systems",
            "load_accelerators",
            "load_catalog",
            "load_fabrics",
            "load_shipped",
            "load_systems",
            "normalize_accelerator_name",
            "resolve_cluster",
        ]
    )
    for name in hardware_catalog.__all__:
        assert hasattr(hardware_catalog, name), name


def test_every_required_id_is_present() -> None:
    ids = {a.id for a in list_accelerators()}
    missing = [i for i in REQUIRED_IDS if i not in ids]
    assert not missing


def test_catalog_has_at_least_20_entries_sorted_by_id() -> None:
    accelerators = list_accelerators()
    assert len(accelerators) >= 20
    ids = [a.id for a in accelerators]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_data_files_are_json_named_after_their_id() -> None:
    files = sorted((DATA_DIR / "accelerators").glob("*"))
    assert [f.name for f in files] == sorted(f"{a.id}.json" for a in list_accelerators())


def test_every_entry_has_a_source_with_ref_and_supports() -> None:
    for acc in list_accelerators():
        assert len(acc.sources) >= 1, acc.id
        for source in acc.sources:
            assert source.ref.strip() and source.supports.strip(), acc.id


def test_skipped_ascend_is_explained_in_the_data_readme() -> None:
    readme = (DATA_DIR / "README.md").read_text()
    assert "Ascend 910B" in readme and "skipped" in readme
    with pytest.raises(CatalogLookupError):
        get_accelerator("ascend-910b")


def test_list_is_cached_and_lookups_share_objects() -> None:
    assert get_accelerator("h100-sxm") is get_accelerator("H100")
    assert [a.id for a in list_accelerators()] == [a.id for a in list_accelerators()]


# --- aliases and lookup ---------------------------------------------------------------------


def test_aliases_are_unique_across_the_catalog() -> None:
    owner: dict[str, str] = {}
    for acc in list_accelerators():
        for name in (acc.id, *acc.aliases):
            key = normalize_accelerator_name(name)
            assert key not in owner, f"{name!r} ({acc.id}) clashes with {owner.get(key)}"
            owner[key] = acc.id


@pytest.mark.parametrize(
    "name",
    ["h100-sxm", "H100-SXM5-80GB", "h100 sxm", "H100_SXM", "H100 SXM", "  h100__SXM ",
     "nvidia_h100_sxm5_80gb", "NVIDIA H100 80GB HBM3", "H100"],
)  # fmt: skip
def test_lookup_ignores_case_and_separators(name: str) -> None:
    assert get_accelerator(name).id == "h100-sxm"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("A100", "a100-40gb"),
        ("A100-SXM4-40GB", "a100-40gb"),
        ("A100-SXM4-80GB", "a100-80gb"),  # the calibration runs' gpu_type
        ("a100 80gb", "a100-80gb"),
        ("AMD Instinct MI300X", "mi300x"),
        ("mi300x", "mi300x"),
        ("MI250X", "mi250x"),
        ("Gaudi 3", "gaudi3"),
        ("RTX 4090", "rtx-4090"),
        ("TPU v5 lite", "tpu-v5e"),
        ("GB200 NVL72", "gb200"),
    ],
)
def test_lookup_by_common_names(name: str, expected: str) -> None:
    assert get_accelerator(name).id == expected


def test_normalisation_rule() -> None:
    assert normalize_accelerator_name(" H100_SXM  5 ") == "h100-sxm-5"
    assert normalize_accelerator_name("a--b__c") == "a-b-c"


def test_unknown_accelerator_raises_404_naming_the_value_and_close_matches() -> None:
    with pytest.raises(CatalogLookupError) as info:
        get_accelerator("h100-sxn")
    err = info.value
    assert err.status == 404
    assert "'h100-sxn'" in err.detail
    assert "h100-sxm" in err.detail
    assert err.extensions["suggestions"][0] == "h100-sxm"
    assert len(err.extensions["suggestions"]) <= 3


def test_unknown_accelerator_without_close_match() -> None:
    with pytest.raises(CatalogLookupError, match="'qqqqzzzz'") as info:
        get_accelerator("qqqqzzzz")
    assert info.value.extensions["suggestions"] == []


def test_huge_unknown_name_is_truncated_not_echoed() -> None:
    with pytest.raises(CatalogLookupError) as info:
        get_accelerator("x" * 100_000)
    assert len(info.value.detail) < 500


# --- values: dense peaks --------------------------------------------------------------------


def test_h100_bf16_is_the_dense_peak_not_the_sparse_datasheet_figure() -> None:
    h100 = get_accelerator("h100-sxm")
    assert h100.peak_tflops["bf16"] == 989.4  # datasheet prints 1,979 "with sparsity"
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_tflops["fp8"] == 1978.9


# NVIDIA datasheet tensor figures "with sparsity" (2:4), as printed; dense = sparse / 2.
SPARSE_DATASHEET_TFLOPS = {
    "a100-40gb": {"tf32": 312, "bf16": 624, "fp16": 624, "int8": 1248},
    "a100-80gb": {"tf32": 312, "bf16": 624, "fp16": 624, "int8": 1248},
    "h100-sxm": {"tf32": 989, "bf16": 1979, "fp16": 1979, "fp8": 3958, "int8": 3958},
    "h100-pcie": {"tf32": 756, "bf16": 1513, "fp16": 1513, "fp8": 3026, "int8": 3026},
    # L40S bf16: the datasheet's own dense (362.05) and sparse (733) figures are not 1:2.
    "l40s": {"tf32": 366, "fp8": 1466},
    "l4": {"tf32": 120, "bf16": 242, "fp16": 242, "fp8": 485, "int8": 485},
    "a10": {"tf32": 125, "bf16": 250, "fp16": 250, "int8": 500},
    "b200": {"fp8": 9000},  # DGX B200: 72 PF FP8 sparse / 8 GPUs
}


@pytest.mark.parametrize("accelerator_id", sorted(SPARSE_DATASHEET_TFLOPS))
def test_dense_peaks_are_half_the_sparse_datasheet_figures(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    for precision, sparse in SPARSE_DATASHEET_TFLOPS[accelerator_id].items():
        dense = acc.peak_tflops[precision]
        assert dense is not None
        assert 2 * dense == pytest.approx(sparse, rel=2e-3), precision


def test_peak_keys_are_the_same_set_everywhere() -> None:
    for acc in list_accelerators():
        assert set(acc.peak_tflops) == set(PRECISIONS), acc.id


def test_v100_has_no_bf16_and_falls_back_to_fp16() -> None:
    v100 = get_accelerator("v100-32gb")
    assert v100.peak_tflops["bf16"] is None
    assert v100.peak_flops("bf16") == pytest.approx(125e12)


def test_mi250x_is_catalogued_per_gcd() -> None:
    gcd = get_accelerator("mi250x")
    assert gcd.peak_tflops["bf16"] == pytest.approx(383 / 2)  # package 383 TFLOP/s, 2 GCDs
    assert gcd.memory_gib == 64.0  # 128 GB package = 2 x 64 GiB
    assert gcd.memory_bandwidth_gb_s == pytest.approx(3200 / 2)
    assert gcd.gpus_per_node == 8  # Frontier node: 4 MI250X = 8 GCDs
    assert gcd.scale_out_bandwidth_gb_s == pytest.approx(200 / 8 / 2)
    assert "GCD" in (gcd.notes or "")


# --- values: memory -------------------------------------------------------------------------

# nvidia-smi memory.total in MiB for the parts where the device-reported figure is known.
REPORTED_MIB = {
    "h100-sxm": 81559, "h100-pcie": 81559, "h800": 81559, "a100-80gb": 81920,
    "a100-40gb": 40960, "v100-32gb": 32768, "h200": 143771, "h20": 97871, "b200": 183359,
    "l40s": 46068, "l4": 23034, "a10": 23028, "rtx-4090": 24564,
    # added for mixed fleets (captures cited in each file's sources)
    "t4": 15360, "v100-16gb": 16160, "a10g": 23028, "rtx-3090": 24576, "rtx-a6000": 49140,
    "l40": 46068, "gh200": 97871, "b300": 275040, "gb300": 284208,
}  # fmt: skip
# Vendor GB label read as GiB (device-reported figure unknown), flagged unverified.
LABEL_GIB = {
    "a100-pcie-80gb": 80, "a800": 80, "gb200": 186, "mi300x": 192, "mi325x": 256,
    "mi355x": 288, "gaudi2": 96, "gaudi3": 128, "tpu-v5e": 16, "tpu-v5p": 95, "tpu-v6e": 32,
    "mi210": 64, "gh200-144gb": 144,
}  # fmt: skip


@pytest.mark.parametrize("accelerator_id", sorted(REPORTED_MIB))
def test_memory_gib_is_what_the_device_reports(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    assert acc.memory_gib * 1024 == REPORTED_MIB[accelerator_id]
    assert not _flagged(acc, "memory_gib")


def test_memory_gib_examples() -> None:
    assert get_accelerator("h100-sxm").memory_gib == pytest.approx(79.65, abs=0.005)
    assert get_accelerator("h200").memory_gib == pytest.approx(140.4, abs=0.005)
    assert get_accelerator("b200").memory_gib == pytest.approx(179.06, abs=0.005)
    assert get_accelerator("h100-sxm").memory_bytes == 81559 * 1024**2


@pytest.mark.parametrize("accelerator_id", sorted(LABEL_GIB))
def test_memory_gib_label_fallback_is_flagged(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    assert acc.memory_gib == LABEL_GIB[accelerator_id]
    assert _flagged(acc, "memory_gib")


def test_every_memory_figure_follows_one_of_the_rules() -> None:
    special = {"mi250x", "tpu-v4"}  # per GCD (64 GiB); TPU v4 documented as 32 GiB
    covered = set(REPORTED_MIB) | set(LABEL_GIB) | special
    assert {a.id for a in list_accelerators()} == covered
    assert get_accelerator("tpu-v4").memory_gib == 32.0


# --- values: bandwidth, node shape, efficiencies --------------------------------------------


def test_bandwidth_unit_conversions() -> None:
    h100 = get_accelerator("h100-sxm")
    assert h100.memory_bandwidth_gb_s == 3350.0  # 3.35 TB/s
    assert h100.scale_up_bandwidth_gb_s == 450.0  # NVLink "900 GB/s" is bidirectional
    assert h100.scale_out_bandwidth_gb_s == 50.0  # 400 Gb/s NDR / 8
    assert get_accelerator("gaudi3").scale_out_bandwidth_gb_s == 75.0  # 3 x 200 GbE
    assert get_accelerator("tpu-v5e").scale_out_bandwidth_gb_s == pytest.approx(25 / 8)
    assert get_accelerator("v100-32gb").scale_out_bandwidth_gb_s == pytest.approx(50 / 8)


def test_peer_bandwidth_only_for_point_to_point_meshes() -> None:
    expected = {"mi300x": 64.0, "mi325x": 64.0, "mi355x": 76.5, "gaudi2": 37.5, "gaudi3": 75.0}
    for accelerator_id, peer in expected.items():
        assert get_accelerator(accelerator_id).scale_up_peer_bandwidth_gb_s == peer
    for switched in ["a100-80gb", "h100-sxm", "h200", "b200", "gb200", *PCIE_CARDS]:
        assert get_accelerator(switched).scale_up_peer_bandwidth_gb_s is None, switched


@pytest.mark.parametrize("accelerator_id", PCIE_CARDS)
def test_pcie_cards_are_modelled_as_a_pcie_node(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    assert acc.scale_up_bandwidth_gb_s == 31.0  # PCIe Gen4 x16 per direction
    assert acc.scale_up_domain_size == 8
    assert acc.gpus_per_node == 8
    assert acc.scale_out_bandwidth_gb_s == 25.0  # default 200 Gb/s per card
    assert _flagged(acc, "scale_out_bandwidth_gb_s")
    assert _flagged(acc, "gpus_per_node")


def test_gb200_node_is_the_nvl72_rack() -> None:
    gb200 = get_accelerator("gb200")
    assert gb200.gpus_per_node == 72
    assert gb200.scale_up_domain_size == 72


def test_tpu_node_is_a_host_and_domain_is_a_slice() -> None:
    expected = {"tpu-v4": (4, 4096), "tpu-v5e": (8, 256), "tpu-v5p": (4, 6144), "tpu-v6e": (8, 256)}
    for accelerator_id, (per_host, slice_size) in expected.items():
        acc = get_accelerator(accelerator_id)
        assert (acc.gpus_per_node, acc.scale_up_domain_size) == (per_host, slice_size)


# Best-shape MAMF TFLOP/s (ml-engineering, reference md section 4): efficiency x dense peak
# must give the measured number back, whatever "theory" figure the source divided by.
MAMF_BF16_TFLOPS = {
    "a100-40gb": 271.2, "a100-80gb": 271.2, "a100-pcie-80gb": 252.9, "h100-sxm": 794.5,
    "h200": 794.5, "b200": 1745.0, "gb200": 1822.0, "mi300x": 668.4, "mi325x": 784.9,
    "mi355x": 1565.0, "gaudi2": 418.7, "gaudi3": 1243.0,
}  # fmt: skip
MAMF_FP8_TFLOPS = {
    "h100-sxm": 1402.6, "h200": 1453.4, "b200": 3432.5, "gb200": 3615.6, "gaudi2": 826.5,
    "gaudi3": 1289.5,
}  # fmt: skip


def test_gemm_efficiency_reproduces_the_measured_tflops() -> None:
    for acc in list_accelerators():
        peak = acc.peak_tflops["bf16"] or acc.peak_tflops["fp16"]
        assert peak is not None
        if acc.id in MAMF_BF16_TFLOPS:
            assert acc.gemm_efficiency * peak == pytest.approx(MAMF_BF16_TFLOPS[acc.id], rel=1e-3)
            assert not _flagged(acc, "gemm_efficiency")
        else:
            assert _flagged(acc, "gemm_efficiency"), acc.id


def test_gaudi3_and_mi300x_efficiency_is_against_the_stored_peak() -> None:
    # 1243 / 1835 (spec clock), not the source's 0.741 against the 1,677 shipping clock
    assert get_accelerator("gaudi3").gemm_efficiency == pytest.approx(0.6774, abs=1e-4)
    # 668.4 / 1307.4, not the source's 0.514 against 1,300
    assert get_accelerator("mi300x").gemm_efficiency == pytest.approx(0.5112, abs=1e-4)


def test_fp8_efficiency() -> None:
    for acc in list_accelerators():
        fp8 = acc.peak_tflops["fp8"]
        if fp8 is None:
            assert acc.gemm_efficiency_fp8 is None, acc.id
        elif acc.id in MAMF_FP8_TFLOPS:
            assert acc.gemm_efficiency_fp8 is not None
            assert acc.gemm_efficiency_fp8 * fp8 == pytest.approx(MAMF_FP8_TFLOPS[acc.id], rel=1e-3)
        else:
            assert acc.gemm_efficiency_fp8 is not None
            assert _flagged(acc, "gemm_efficiency_fp8"), acc.id


# NCCL intra-node ring busbw / unidirectional line rate (GB/s), measured.
RING_BUSBW = {
    "h100-sxm": (370, 450), "a100-40gb": (235, 300), "a100-80gb": (235, 300),
    "b200": (682.2, 900), "h800": (160, 200), "a800": (160, 200), "h200": (365.6, 450),
}  # fmt: skip


def test_scale_up_efficiency_is_measured_busbw_over_line_rate() -> None:
    for acc in list_accelerators():
        if acc.id in RING_BUSBW:
            busbw, line = RING_BUSBW[acc.id]
            assert acc.scale_up_bandwidth_gb_s == line
            assert acc.scale_up_efficiency == pytest.approx(busbw / line, abs=1e-4)
        else:
            assert _flagged(acc, "scale_up_efficiency"), acc.id
    assert get_accelerator("h100-sxm").scale_up_efficiency == pytest.approx(0.822, abs=1e-3)


def test_scale_out_efficiency_is_measured_nic_rate_over_line_rate() -> None:
    measured = {
        "h100-sxm": 48.5 / 50,
        "h200": 48.5 / 50,
        "a100-80gb": 24 / 25,
        "v100-32gb": 12.2 / 12.5,
    }
    for acc in list_accelerators():
        if acc.id in measured:
            assert acc.scale_out_efficiency == pytest.approx(measured[acc.id], abs=1e-4)
        elif acc.id not in {"a100-40gb", "a800"}:  # same HDR NIC measurement as a100-80gb
            assert _flagged(acc, "scale_out_efficiency"), acc.id


# --- against the reference catalog ----------------------------------------------------------

_REFERENCE_PEAK_KEYS = {
    "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "fp32", "tf32": "tf32",
    "int8": "int8_tops", "fp4": "fp4",
}  # fmt: skip


def test_every_reference_entry_is_catalogued_or_skipped() -> None:
    reference = _reference()
    assert len(reference) == 27
    for entry in reference:
        if entry["id"] in SKIPPED_REFERENCE_IDS:
            with pytest.raises(CatalogLookupError):
                get_accelerator(entry["id"])
        else:
            get_accelerator(entry["id"])  # the reference id is an alias


def test_values_match_the_reference_catalog() -> None:
    for entry in _reference():
        if entry["id"] in SKIPPED_REFERENCE_IDS:
            continue
        acc = get_accelerator(entry["id"])
        per_device = 2.0 if acc.id == "mi250x" else 1.0  # catalogued per GCD
        for ours, theirs in _REFERENCE_PEAK_KEYS.items():
            ref_value = entry["dense_peak_tflops"][theirs]
            got = acc.peak_tflops[ours]
            if ref_value is None:
                assert got is None, (acc.id, ours)
            else:
                assert got == pytest.approx(ref_value / per_device), (acc.id, ours)
        assert acc.memory_bandwidth_gb_s == pytest.approx(
            entry["memory"]["bandwidth_TBps"] * 1000 / per_device
        ), acc.id
        gbps = entry["typical_node"]["scale_out_Gbps_per_device"]
        if gbps is not None:
            assert acc.scale_out_bandwidth_gb_s == pytest.approx(gbps / 8 / per_device), acc.id
        else:
            assert _flagged(acc, "scale_out_bandwidth_gb_s"), acc.id
        if acc.id in {*PCIE_CARDS, "a100-pcie-80gb", "h100-pcie"}:  # a PCIe node of 8
            assert acc.scale_up_bandwidth_gb_s == entry["host_link"]["GBps_unidir"], acc.id
        else:
            assert acc.scale_up_bandwidth_gb_s == pytest.approx(
                entry["scale_up"]["per_device_GBps_unidir"] / per_device
            ), acc.id
            if entry["scale_up"]["domain_size_typical"] is not None:
                assert acc.scale_up_domain_size == entry["scale_up"]["domain_size_typical"]
        ref_sources = [(s["ref"], s["supports"]) for s in entry["sources"]]
        our_sources = [(s.ref, s.supports) for s in acc.sources]
        assert our_sources[: len(ref_sources)] == ref_sources, acc.id
        assert all(u in acc.unverified_fields for u in entry["unverified_fields"]), acc.id


# --- resolve_cluster ------------------------------------------------------------------------


def _cluster(*groups: dict[str, Any]) -> ClusterSpec:
    return ClusterSpec.model_validate({"node_groups": list(groups)})


def test_resolve_cluster_fills_catalog_defaults() -> None:
    resolved = resolve_cluster(_cluster({"accelerator": "H100-SXM5-80GB", "num_nodes": 4}))
    assert resolved.accelerator.id == "h100-sxm"
    assert resolved.gpus_per_node == 8
    assert resolved.intra_node_bandwidth_gb_s == 450.0
    assert resolved.inter_node_bandwidth_gb_s == 50.0
    assert resolved.num_gpus == 32


def test_resolve_cluster_keeps_explicit_values() -> None:
    resolved = resolve_cluster(
        _cluster(
            {
                "accelerator": "a100-pcie-80gb",
                "num_nodes": 3,
                "gpus_per_node": 2,
                "intra_node_bandwidth_gb_s": 300,
                "inter_node_bandwidth_gb_s": 12.5,
            }
        )
    )
    group = resolved.groups[0]
    assert (group.gpus_per_node, group.intra_node_bandwidth_gb_s) == (2, 300)
    assert group.inter_node_bandwidth_gb_s == 12.5
    assert resolved.num_gpus == 6


def test_resolve_cluster_defaults_only_the_null_fields() -> None:
    resolved = resolve_cluster(
        _cluster({"accelerator": "mi300x", "num_nodes": 2, "inter_node_bandwidth_gb_s": 25})
    )
    assert resolved.gpus_per_node == 8
    assert resolved.intra_node_bandwidth_gb_s == 448.0
    assert resolved.inter_node_bandwidth_gb_s == 25.0


def test_resolve_cluster_gb200_counts_racks() -> None:
    resolved = resolve_cluster(_cluster({"accelerator": "gb200", "num_nodes": 2}))
    assert resolved.num_gpus == 144  # 2 NVL72 racks
    assert resolved.intra_node_bandwidth_gb_s == 900.0


def test_resolve_cluster_heterogeneous_groups() -> None:
    resolved = resolve_cluster(
        _cluster({"accelerator": "h100", "num_nodes": 2}, {"accelerator": "a100", "num_nodes": 3})
    )
    assert [g.accelerator.id for g in resolved.groups] == ["h100-sxm", "a100-40gb"]
    assert resolved.num_gpus == 2 * 8 + 3 * 8
    assert not resolved.is_homogeneous
    same = resolve_cluster(
        _cluster(
            {"accelerator": "h100", "num_nodes": 2}, {"accelerator": "H100_SXM", "num_nodes": 1}
        )
    )
    assert same.is_homogeneous and same.num_nodes == 3


def test_resolve_cluster_unknown_accelerator_is_a_spec_error() -> None:
    cluster = _cluster(
        {"accelerator": "h100-sxm", "num_nodes": 1}, {"accelerator": "mi300", "num_nodes": 1}
    )
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    err = info.value
    assert err.status == 422
    assert err.field == "cluster.node_groups.1.accelerator"
    assert err.rule == "must be a known accelerator id or alias"
    assert err.value == "mi300"
    assert "'mi300'" in err.detail and "mi300x" in err.detail
    assert err.extensions["errors"][0]["field"] == "cluster.node_groups.1.accelerator"


def test_resolve_cluster_checks_the_total_with_resolved_node_sizes() -> None:
    num_racks = MAX_TOTAL_GPUS // 72 + 1  # passes ClusterSpec (it assumes 8 per node)
    cluster = _cluster({"accelerator": "gb200", "num_nodes": num_racks})
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    assert info.value.field == "cluster.node_groups"
    assert info.value.value == num_racks * 72


# --- loader validation ----------------------------------------------------------------------


def _copy_entry(directory: Path, accelerator_id: str, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(
        (DATA_DIR / "accelerators" / f"{accelerator_id}.json").read_text()
    )
    raw.update(changes)
    (directory / f"{raw['id']}.json").write_text(json.dumps(raw))
    return raw


def test_load_accelerators_reads_a_folder(tmp_path: Path) -> None:
    shutil.copy(DATA_DIR / "accelerators" / "l4.json", tmp_path)
    shutil.copy(DATA_DIR / "accelerators" / "a10.json", tmp_path)
    assert [a.id for a in load_accelerators(tmp_path)] == ["a10", "l4"]


def test_load_rejects_alias_clash_between_files(tmp_path: Path) -> None:
    _copy_entry(tmp_path, "h100-sxm")
    _copy_entry(tmp_path, "h200", aliases=["H100 SXM5"])
    with pytest.raises(CatalogDataError, match="already taken by 'h100-sxm'"):
        load_accelerators(tmp_path)


def test_load_rejects_file_name_not_matching_id(tmp_path: Path) -> None:
    raw = _copy_entry(tmp_path, "l4")
    (tmp_path / "l4.json").rename(tmp_path / "nvidia-l4.json")
    assert raw["id"] == "l4"
    with pytest.raises(CatalogDataError, match="file name must be l4.json"):
        load_accelerators(tmp_path)


def test_load_rejects_unknown_precision_key(tmp_path: Path) -> None:
    _copy_entry(tmp_path, "l4", peak_tflops={"bf16": 121.0, "bfloat16": 121.0})
    with pytest.raises(CatalogDataError, match="unknown precision keys"):
        load_accelerators(tmp_path)


def test_load_rejects_schema_violation(tmp_path: Path) -> None:
    _copy_entry(tmp_path, "l4", memory_gib=-1)
    with pytest.raises(CatalogDataError, match="memory_gib"):
        load_accelerators(tmp_path)


def test_load_rejects_bad_json_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(CatalogDataError, match="no \\*.json"):
        load_accelerators(tmp_path)
    (tmp_path / "l4.json").write_text("{not json")
    with pytest.raises(CatalogDataError, match="cannot read JSON"):
        load_accelerators(tmp_path)


def test_load_rejects_peer_above_aggregate(tmp_path: Path) -> None:
    _copy_entry(tmp_path, "mi300x", scale_up_peer_bandwidth_gb_s=500.0)
    with pytest.raises(CatalogDataError, match="scale_up_peer_bandwidth_gb_s"):
        load_accelerators(tmp_path)
