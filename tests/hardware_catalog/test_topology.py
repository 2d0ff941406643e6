"""Tests for systems, fabrics and topology resolution: curve interpolation, the loader's
rules for the systems/ and fabrics/ folders, the data files against their sources, lookups,
and how `resolve_cluster` fills the system, scale-up domain, fabrics and scale-out layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hardware_catalog import (
    COLLECTIVES,
    CatalogDataError,
    CollectiveCurve,
    FabricLayout,
    InNetworkReduction,
    ResolvedCluster,
    ResolvedNodeGroup,
    get_accelerator,
    get_fabric,
    get_system,
    list_accelerators,
    list_fabrics,
    list_systems,
    load_catalog,
    load_fabrics,
    load_systems,
    resolve_cluster,
)
from hardware_catalog.schema import AcceleratorSpec, FabricSpec, Source, SystemSpec
from specs.cluster import ClusterSpec
from specs.errors import CatalogLookupError, SpecError

REPO = Path(__file__).parents[2]
DATA_DIR = REPO / "hardware_catalog" / "data"
KIB, MIB, GIB = 1024, 1024**2, 1024**3

REQUIRED_SYSTEMS = [
    "dgx-a100", "hgx-a100-40gb", "dgx-h100", "hgx-h200", "hgx-h800", "hgx-h20", "dgx-b200",
    "gb200-nvl72", "mi300x-platform", "mi325x-platform", "mi355x-platform",
]  # fmt: skip
REQUIRED_FABRICS = [
    "nvlink3-nvswitch", "nvlink4-nvswitch", "nvlink5-nvswitch", "nvlink5-nvl72", "xgmi-mesh",
    "pcie-gen4", "pcie-gen5", "infiniband-hdr", "infiniband-ndr", "roce-400g",
]  # fmt: skip


def _cluster(*groups: dict[str, Any], **extra: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({"node_groups": list(groups), **extra})


def _flagged(lines: list[str], prefix: str) -> bool:
    return any(line.startswith(prefix) for line in lines)


def _curve(points: list[tuple[float, float]], **changes: Any) -> CollectiveCurve:
    fields: dict[str, Any] = {
        "reference_ranks": 8,
        "reference_ranks_per_node": 8,
        "algorithm": "ring",
        "provenance": "measured",
        "points": points,
    }
    return CollectiveCurve.model_validate({**fields, **changes})


# --- interpolation --------------------------------------------------------------------------


def test_efficiency_is_exact_at_the_points() -> None:
    curve = _curve([(64 * KIB, 0.01), (MIB, 0.1), (GIB, 0.8)])
    assert curve.efficiency(64 * KIB) == 0.01
    assert curve.efficiency(MIB) == 0.1
    assert curve.efficiency(GIB) == 0.8


def test_efficiency_is_linear_in_log2_bytes() -> None:
    curve = _curve([(64 * KIB, 0.01), (MIB, 0.1), (GIB, 0.8)])
    # 256 KiB is halfway between 64 KiB and 1 MiB in log2 (16 -> 18 -> 20)
    assert curve.efficiency(256 * KIB) == pytest.approx(0.055)
    # 32 MiB is halfway between 1 MiB and 1 GiB (20 -> 25 -> 30)
    assert curve.efficiency(32 * MIB) == pytest.approx(0.45)
    # a quarter of the way: 2**21.5 bytes
    assert curve.efficiency(2**21.5) == pytest.approx(0.1 + 0.7 * 0.15)


def test_efficiency_is_clamped_at_both_ends() -> None:
    curve = _curve([(64 * KIB, 0.01), (MIB, 0.1), (GIB, 0.8)])
    assert curve.efficiency(1) == 0.01
    assert curve.efficiency(0) == 0.01
    assert curve.efficiency(-5) == 0.01
    assert curve.efficiency(64 * GIB) == 0.8
    assert curve.peak_efficiency == 0.8


def test_single_point_curve_is_flat() -> None:
    curve = _curve([(1.0, 0.9)])
    assert curve.efficiency(1) == curve.efficiency(1e12) == 0.9


def test_interpolation_stays_between_neighbours() -> None:
    fabric = get_fabric("nvlink3-nvswitch")
    curve = fabric.curve("all_reduce")
    assert curve is not None
    points = curve.points
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        for fraction in (0.1, 0.5, 0.9):
            size = x0 * (x1 / x0) ** fraction
            assert min(y0, y1) <= curve.efficiency(size) <= max(y0, y1)


def test_curve_survives_a_json_round_trip() -> None:
    curve = _curve([(64 * KIB, 0.01), (MIB, 0.1)])
    again = CollectiveCurve.model_validate_json(curve.model_dump_json())
    assert again == curve
    assert again.efficiency(256 * KIB) == pytest.approx(0.055)


def test_fabric_curve_lookup() -> None:
    fabric = get_fabric("nvlink4-nvswitch")
    for name in COLLECTIVES:
        assert fabric.curve(name) is fabric.collectives[name]  # type: ignore[index]
    assert fabric.curve("broadcast") is None


def test_in_network_reduction_interpolates_and_exceeds_the_line_rate() -> None:
    nvls = get_fabric("nvlink4-nvswitch").in_network_reduction
    assert nvls is not None and nvls.name == "nvls"
    # 8x H200, NVLS: 482.26 GB/s busbw at 16 GiB on a 450 GB/s link
    assert nvls.efficiency(16 * GIB) == pytest.approx(482.26 / 450, abs=1e-4)
    assert nvls.efficiency(64 * GIB) > 1
    assert nvls.curve().efficiency(16 * GIB) == nvls.efficiency(16 * GIB)
    assert nvls.curve().algorithm == "nvls"


# --- schema rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([(MIB, 0.1), (64 * KIB, 0.2)], "strictly ascending"),
        ([(MIB, 0.1), (MIB, 0.2)], "strictly ascending"),
        ([(0, 0.1)], "strictly ascending"),
        ([(MIB, 0.0)], r"efficiency must be in \(0, 1.5\]"),
        ([(MIB, 1.51)], r"efficiency must be in \(0, 1.5\]"),
        ([], "at least 1 item"),
    ],
)
def test_curve_points_are_checked(points: list[tuple[float, float]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _curve(points)


def test_efficiency_up_to_one_and_a_half_is_allowed() -> None:
    assert _curve([(MIB, 1.5)]).peak_efficiency == 1.5


def test_reference_ranks_per_node_must_not_exceed_ranks() -> None:
    with pytest.raises(ValidationError, match="reference_ranks_per_node"):
        _curve([(MIB, 0.5)], reference_ranks=4, reference_ranks_per_node=8)


def test_unknown_collective_key_is_rejected() -> None:
    raw = json.loads((DATA_DIR / "fabrics" / "pcie-gen4.json").read_text())
    raw["collectives"]["broadcast"] = raw["collectives"]["all_reduce"]
    with pytest.raises(ValidationError, match="broadcast"):
        FabricSpec.model_validate(raw)


# --- loader rules ---------------------------------------------------------------------------


def _copy_data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    for folder in ("accelerators", "systems", "fabrics"):
        shutil.copytree(DATA_DIR / folder, root / folder)
    return root


def _edit(root: Path, kind: str, entry_id: str, **changes: Any) -> dict[str, Any]:
    path = root / kind / f"{entry_id}.json"
    raw: dict[str, Any] = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))
    return raw


def test_load_catalog_reads_a_copy_of_the_data(tmp_path: Path) -> None:
    catalog = load_catalog(_copy_data(tmp_path))
    assert set(catalog.systems) == {s.id for s in list_systems()}
    assert set(catalog.fabrics) == {f.id for f in list_fabrics()}
    assert set(catalog.accelerators) == {a.id for a in list_accelerators()}


def test_load_systems_and_fabrics_read_a_folder(tmp_path: Path) -> None:
    for name in ("dgx-h100", "dgx-b200"):
        shutil.copy(DATA_DIR / "systems" / f"{name}.json", tmp_path)
    assert [s.id for s in load_systems(tmp_path)] == ["dgx-b200", "dgx-h100"]
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir()
    shutil.copy(DATA_DIR / "fabrics" / "pcie-gen4.json", fabrics)
    assert [f.id for f in load_fabrics(fabrics)] == ["pcie-gen4"]


def test_loader_rejects_a_fabric_file_not_named_after_its_id(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    (root / "fabrics" / "pcie-gen4.json").rename(root / "fabrics" / "pcie4.json")
    with pytest.raises(CatalogDataError, match="file name must be pcie-gen4.json"):
        load_catalog(root)


def test_loader_rejects_an_upper_case_system_id(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    raw = _edit(root, "systems", "hgx-h20", id="HGX-H20")
    (root / "systems" / "hgx-h20.json").rename(root / "systems" / f"{raw['id']}.json")
    with pytest.raises(CatalogDataError, match="must be lower-case and hyphenated"):
        load_catalog(root)


def test_loader_rejects_an_alias_claimed_by_two_systems(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "systems", "hgx-h200", aliases=["HGX H100"])
    with pytest.raises(CatalogDataError, match="already taken by 'dgx-h100'"):
        load_catalog(root)


def test_loader_rejects_an_alias_claimed_by_two_fabrics(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "fabrics", "roce-400g", aliases=["NDR"])
    with pytest.raises(CatalogDataError, match="already taken by 'infiniband-ndr'"):
        load_catalog(root)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"accelerator": "h999"}, "unknown accelerator 'h999'"),
        ({"scale_up_fabric": "nvlink9"}, "scale_up_fabric names unknown fabric 'nvlink9'"),
        ({"scale_out_fabric": "nvlink4-nvswitch"}, "is a scale_up fabric, not scale_out"),
        ({"scale_up_domain_gpus": 12}, r"scale_up_domain_gpus \(12\) must be a multiple"),
        ({"scale_up_peer_bandwidth_gb_s": 50.0}, "must be set exactly when"),
        ({"scale_out_bandwidth_gb_s": 40.0}, r"8 x 50.0 / 8 = 50"),
        ({"nics_per_node": 4}, "must be nics_per_node x"),
    ],
)
def test_loader_checks_systems(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "systems", "dgx-h100", **changes)
    with pytest.raises(CatalogDataError, match=message):
        load_catalog(root)


def test_loader_accepts_a_domain_that_divides_the_node(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "systems", "pcie-server-a100-80gb", scale_up_domain_gpus=2)
    assert load_catalog(root).systems["pcie-server-a100-80gb"].scale_up_domain_gpus == 2


def test_loader_requires_a_peer_rate_on_a_mesh(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "systems", "mi300x-platform", scale_up_peer_bandwidth_gb_s=None)
    with pytest.raises(CatalogDataError, match="xgmi-mesh switched=False"):
        load_catalog(root)


def test_loader_rejects_a_peer_rate_above_the_aggregate(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "systems", "mi300x-platform", scale_up_peer_bandwidth_gb_s=500.0)
    with pytest.raises(CatalogDataError, match="must not exceed scale_up_bandwidth_gb_s"):
        load_catalog(root)


@pytest.mark.parametrize(
    ("system", "message"),
    [
        ("dgx-404", "default_system names unknown system 'dgx-404'"),
        ("dgx-a100", "default_system 'dgx-a100' holds 'a100-80gb', not 'h100-sxm'"),
        (None, "default_system is required"),
    ],
)
def test_loader_checks_the_default_system(tmp_path: Path, system: str | None, message: str) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "accelerators", "h100-sxm", default_system=system)
    with pytest.raises(CatalogDataError, match=message):
        load_catalog(root)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([[MIB, 0.5], [64 * KIB, 0.1]], "strictly ascending"),
        ([[MIB, 1.6]], r"efficiency must be in \(0, 1.5\]"),
        ([[MIB, -0.1]], r"efficiency must be in \(0, 1.5\]"),
    ],
)
def test_loader_checks_curve_points(tmp_path: Path, points: list[Any], message: str) -> None:
    root = _copy_data(tmp_path)
    raw = json.loads((root / "fabrics" / "nvlink3-nvswitch.json").read_text())
    raw["collectives"]["all_gather"]["points"] = points
    _edit(root, "fabrics", "nvlink3-nvswitch", collectives=raw["collectives"])
    with pytest.raises(CatalogDataError, match=message):
        load_catalog(root)


def test_loader_requires_hop_estimates_to_be_flagged(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "fabrics", "infiniband-ndr", unverified_fields=[])
    with pytest.raises(CatalogDataError, match="hop_latency_estimate_us must be listed"):
        load_catalog(root)


def test_loader_rejects_hop_latency_on_a_scale_up_fabric(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    _edit(root, "fabrics", "nvlink4-nvswitch", hop_latency_us=0.5)
    with pytest.raises(CatalogDataError, match="scale-out fabrics only"):
        load_catalog(root)


# --- the shipped data -----------------------------------------------------------------------


def test_required_systems_and_fabrics_are_present() -> None:
    systems = {s.id for s in list_systems()}
    fabrics = {f.id for f in list_fabrics()}
    assert not [s for s in REQUIRED_SYSTEMS if s not in systems]
    assert not [f for f in REQUIRED_FABRICS if f not in fabrics]


@pytest.mark.parametrize("kind", ["systems", "fabrics"])
def test_data_files_are_named_after_their_id(kind: str) -> None:
    entries = list_systems() if kind == "systems" else list_fabrics()
    files = sorted(p.name for p in (DATA_DIR / kind).glob("*"))
    assert files == sorted(f"{e.id}.json" for e in entries)
    assert [e.id for e in entries] == sorted(e.id for e in entries)


def test_every_system_and_fabric_has_sources() -> None:
    entries: list[SystemSpec | FabricSpec] = [*list_systems(), *list_fabrics()]
    for entry in entries:
        assert entry.sources, entry.id
        for source in entry.sources:
            assert source.ref.strip() and source.supports.strip(), entry.id


def test_every_accelerator_resolves_to_a_system_that_holds_it() -> None:
    systems = {s.id: s for s in list_systems()}
    for accelerator in list_accelerators():
        assert accelerator.default_system is not None, accelerator.id
        assert systems[accelerator.default_system].accelerator == accelerator.id


def test_every_system_names_a_catalogued_accelerator_and_fabrics() -> None:
    fabrics = {f.id: f for f in list_fabrics()}
    for system in list_systems():
        get_accelerator(system.accelerator)
        assert fabrics[system.scale_up_fabric].kind == "scale_up", system.id
        assert fabrics[system.scale_out_fabric].kind == "scale_out", system.id


def test_accelerator_fields_agree_with_the_default_system() -> None:
    # GET /v1/hardware keeps the per-accelerator line rates; they must be the system's
    for accelerator in list_accelerators():
        assert accelerator.default_system is not None
        system = get_system(accelerator.default_system)
        assert accelerator.scale_up_bandwidth_gb_s == system.scale_up_bandwidth_gb_s, system.id
        assert accelerator.scale_out_bandwidth_gb_s == system.scale_out_bandwidth_gb_s, system.id
        assert accelerator.scale_up_peer_bandwidth_gb_s == system.scale_up_peer_bandwidth_gb_s, (
            system.id
        )
        assert accelerator.scale_up_domain_size == system.scale_up_domain_gpus, system.id
        assert accelerator.gpus_per_node in (
            system.gpus_per_node,
            system.scale_up_domain_gpus,
        ), system.id


def test_every_fabric_has_every_collective_with_enough_points() -> None:
    for fabric in list_fabrics():
        assert set(fabric.collectives) == set(COLLECTIVES), fabric.id
        for name, curve in fabric.collectives.items():
            assert len(curve.points) >= 4, (fabric.id, name)


def test_curves_that_are_not_all_measured_are_flagged() -> None:
    for fabric in list_fabrics():
        for name, curve in fabric.collectives.items():
            if curve.provenance != "measured":
                assert _flagged(fabric.unverified_fields, f"collectives.{name}:") or _flagged(
                    fabric.unverified_fields, "collectives:"
                ), (fabric.id, name)
        reduction = fabric.in_network_reduction
        if reduction is not None and reduction.provenance != "measured":
            assert _flagged(fabric.unverified_fields, "in_network_reduction:"), fabric.id


def test_measured_curves() -> None:
    measured = {
        (f.id, name)
        for f in list_fabrics()
        for name, c in f.collectives.items()
        if c.provenance == "measured"
    }
    assert measured == {
        ("nvlink3-nvswitch", "all_reduce"),
        ("nvlink5-nvl72", "all_reduce"),
        ("infiniband-ndr", "all_reduce"),
    }


def test_a100_all_reduce_is_the_published_sweep() -> None:
    curve = get_fabric("nvlink3-nvswitch").curve("all_reduce")
    assert curve is not None
    # 8x A100 SXM nccl-tests busbw (GB/s) at 64 KiB / 1 MiB / 16 MiB / 128 MiB / 1 GiB / 16 GiB
    busbw = [2.45, 18.0, 106.2, 176.9, 229.0, 234.9]
    sizes = [64 * KIB, MIB, 16 * MIB, 128 * MIB, GIB, 16 * GIB]
    assert [s for s, _ in curve.points] == sizes
    for (_, efficiency), value in zip(curve.points, busbw, strict=True):
        assert efficiency == pytest.approx(value / 300, abs=5e-5)


def test_hopper_curves_match_the_published_figures() -> None:
    fabric = get_fabric("nvlink4-nvswitch")
    assert fabric.line_rate_gb_s == 450.0
    ring = fabric.curve("all_reduce")
    assert ring is not None
    assert ring.efficiency(16 * GIB) == pytest.approx(367.61 / 450, abs=1e-4)  # ring-only
    assert ring.efficiency(MIB) == pytest.approx(39.93 / 450, abs=1e-4)  # ring/LL point
    all_gather, all_to_all = fabric.curve("all_gather"), fabric.curve("all_to_all")
    assert all_gather is not None and all_to_all is not None
    assert all_gather.peak_efficiency == pytest.approx(361.4 / 450, abs=1e-4)
    assert all_to_all.peak_efficiency == pytest.approx(320 / 450, abs=1e-4)
    nvls = fabric.in_network_reduction
    assert nvls is not None
    assert (nvls.min_ranks, nvls.latency_us, nvls.enabled_by_default) == (5, 25.0, True)


def test_nvls_engages_from_six_gpus_on_blackwell_and_not_on_ampere() -> None:
    for fabric_id in ("nvlink5-nvswitch", "nvlink5-nvl72"):
        nvls = get_fabric(fabric_id).in_network_reduction
        assert nvls is not None and nvls.min_ranks == 6
    assert get_fabric("nvlink3-nvswitch").in_network_reduction is None
    assert get_fabric("xgmi-mesh").in_network_reduction is None
    nvl72 = get_fabric("nvlink5-nvl72").in_network_reduction
    assert nvl72 is not None
    assert nvl72.efficiency(16 * GIB) == pytest.approx(850 / 900, abs=1e-4)


def test_sharp_is_listed_but_off_by_default() -> None:
    sharp = get_fabric("infiniband-ndr").in_network_reduction
    assert sharp is not None and sharp.name == "sharp"
    assert not sharp.enabled_by_default
    assert sharp.line_rate_basis == "node"
    assert sharp.efficiency(16 * GIB) == pytest.approx(480 / 400)


def test_scale_out_efficiency_bases() -> None:
    ndr = get_fabric("infiniband-ndr")
    assert ndr.line_rate_gb_s == 50.0
    for name in ("all_reduce", "all_gather", "reduce_scatter"):
        curve = ndr.curve(name)
        assert curve is not None and curve.line_rate_basis == "node", name
    for name in ("all_to_all", "send_recv"):
        curve = ndr.curve(name)
        assert curve is not None and curve.line_rate_basis == "gpu", name
    all_to_all = ndr.curve("all_to_all")
    assert all_to_all is not None
    assert all_to_all.peak_efficiency == pytest.approx(48 / 50)  # DGX H100, 32 GPUs
    hdr = get_fabric("infiniband-hdr").curve("all_reduce")
    assert hdr is not None and hdr.peak_efficiency == pytest.approx(192 / 200)  # DGX A100


def test_hop_latencies() -> None:
    assert get_fabric("infiniband-hdr").hop_latency_us == 0.6
    ndr = get_fabric("infiniband-ndr")
    assert ndr.hop_latency_us is None
    assert ndr.hop_latency_or_estimate_us == ndr.hop_latency_estimate_us == 0.6
    assert get_fabric("nvlink4-nvswitch").hop_latency_or_estimate_us is None


def test_mesh_fabrics_are_not_switched_and_their_send_recv_is_per_peer() -> None:
    for fabric in list_fabrics():
        send_recv = fabric.curve("send_recv")
        assert send_recv is not None
        if fabric.kind == "scale_up" and not fabric.switched:
            assert send_recv.line_rate_basis == "peer", fabric.id
    assert not get_fabric("xgmi-mesh").switched
    assert get_fabric("nvlink4-nvswitch").switched


def test_latency_constants_are_nccls_ll128_values() -> None:
    for fabric_id in ("nvlink3-nvswitch", "nvlink4-nvswitch", "nvlink5-nvswitch"):
        fabric = get_fabric(fabric_id)
        assert (fabric.latency_protocol, fabric.step_latency_us) == ("LL128", 1.9)
        assert fabric.base_latency_us == 14.0
    assert get_fabric("pcie-gen4").step_latency_us == 2.5
    assert get_fabric("infiniband-ndr").step_latency_us == 4.0


def test_system_shapes() -> None:
    gb200 = get_system("gb200-nvl72")
    assert (gb200.gpus_per_node, gb200.scale_up_domain_gpus) == (4, 72)
    assert gb200.scale_up_fabric == "nvlink5-nvl72"
    assert gb200.nics_per_node == 4 and gb200.scale_out_bandwidth_gb_s == 50.0
    h800 = get_system("hgx-h800")
    assert h800.scale_up_fabric == "nvlink4-nvswitch" and h800.scale_up_bandwidth_gb_s == 200.0
    assert get_system("hgx-h20").scale_up_bandwidth_gb_s == 450.0
    mi355x = get_system("mi355x-platform")
    assert (mi355x.scale_up_bandwidth_gb_s, mi355x.scale_up_peer_bandwidth_gb_s) == (535.5, 76.5)
    dgx1 = get_system("dgx-1-v100")
    assert (dgx1.nics_per_node, dgx1.scale_out_bandwidth_gb_s) == (4, 6.25)
    assert get_system("tpu-v5p-host").scale_up_domain_gpus == 6144


def test_superpod_layouts() -> None:
    for system_id in ("dgx-h100", "dgx-b200"):
        assert get_system(system_id).fabric == FabricLayout(
            topology="rail_optimized", oversubscription=1.0, nodes_per_leaf=32
        )
    assert get_system("gb200-nvl72").fabric.nodes_per_leaf == 8 * 18  # SU = 8 racks


def test_assumed_layouts_are_flagged() -> None:
    for system in list_systems():
        if system.id not in ("dgx-h100", "dgx-b200"):
            assert _flagged(system.unverified_fields, "fabric"), system.id


# --- lookups --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("dgx-h100", "dgx-h100"), ("HGX H100", "dgx-h100"), ("hgx_b200", "dgx-b200"),
     ("GB200 NVL72", "gb200-nvl72"), ("Frontier", "frontier-node"), ("HLS-3", "hls-gaudi3")],
)  # fmt: skip
def test_get_system_by_id_or_alias(name: str, expected: str) -> None:
    assert get_system(name).id == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("IB NDR", "infiniband-ndr"), ("nvlink 4", "nvlink4-nvswitch"), ("xGMI", "xgmi-mesh"),
     ("PCIe Gen4", "pcie-gen4"), ("NVL72", "nvlink5-nvl72")],
)  # fmt: skip
def test_get_fabric_by_id_or_alias(name: str, expected: str) -> None:
    assert get_fabric(name).id == expected


def test_unknown_system_and_fabric_suggest_close_matches() -> None:
    with pytest.raises(CatalogLookupError) as info:
        get_system("dgx-h10")
    assert info.value.status == 404
    assert "unknown system 'dgx-h10'" in info.value.detail
    assert info.value.extensions["suggestions"][0] == "dgx-h100"
    with pytest.raises(CatalogLookupError, match="unknown fabric 'zzqq'") as info:
        get_fabric("zzqq")
    assert "GET /v1/fabrics" in info.value.detail


def test_lookups_are_cached() -> None:
    assert get_system("dgx-h100") is get_system("HGX H100")
    assert get_fabric("infiniband-ndr") is get_fabric("NDR")


# --- resolution -----------------------------------------------------------------------------


def test_gb200_trays_get_the_72_gpu_domain() -> None:
    resolved = resolve_cluster(_cluster({"system": "gb200-nvl72", "num_nodes": 18}))
    group = resolved.groups[0]
    assert group.accelerator.id == "gb200"
    assert (group.gpus_per_node, group.scale_up_domain_gpus, resolved.num_gpus) == (4, 72, 72)
    assert resolved.scale_up_domain_gpus == 72
    assert group.scale_up_fabric.id == "nvlink5-nvl72"
    assert group.scale_out_fabric.id == "infiniband-ndr"
    assert (group.intra_node_bandwidth_gb_s, group.inter_node_bandwidth_gb_s) == (900.0, 50.0)
    # one tray still belongs to a 72-GPU domain
    one = resolve_cluster(_cluster({"system": "gb200-nvl72", "num_nodes": 1}))
    assert one.groups[0].scale_up_domain_gpus == 72


def test_gb200_accelerator_alone_keeps_racks_as_nodes() -> None:
    resolved = resolve_cluster(_cluster({"accelerator": "gb200", "num_nodes": 2}))
    group = resolved.groups[0]
    assert (group.gpus_per_node, group.scale_up_domain_gpus, resolved.num_gpus) == (72, 72, 144)
    assert group.system.id == "gb200-nvl72"
    # the usual layout's 144 trays per leaf group are 8 racks of 72 GPUs
    assert resolved.fabric.nodes_per_leaf == 8


def test_h100_group_of_four_gpus_per_node_gets_a_domain_of_four() -> None:
    resolved = resolve_cluster(
        _cluster({"accelerator": "h100", "num_nodes": 2, "gpus_per_node": 4})
    )
    group = resolved.groups[0]
    assert (group.gpus_per_node, group.scale_up_domain_gpus) == (4, 4)
    assert group.system.id == "dgx-h100"
    assert resolved.fabric.nodes_per_leaf == 64  # 32 nodes of 8 GPUs = 64 nodes of 4


def test_explicit_domain_is_kept() -> None:
    spanning = resolve_cluster(
        _cluster({"accelerator": "h100-sxm", "num_nodes": 4, "scale_up_domain_gpus": 16})
    )
    assert spanning.groups[0].scale_up_domain_gpus == 16
    pairs = resolve_cluster(
        _cluster({"system": "pcie-server-h100", "num_nodes": 1, "scale_up_domain_gpus": 2})
    )
    assert pairs.groups[0].scale_up_domain_gpus == 2


def test_tpu_hosts_get_the_slice_as_domain() -> None:
    resolved = resolve_cluster(_cluster({"accelerator": "tpu-v5p", "num_nodes": 4}))
    group = resolved.groups[0]
    assert (group.gpus_per_node, group.scale_up_domain_gpus) == (4, 6144)
    assert group.scale_up_peer_bandwidth_gb_s == 100.0


def test_system_alone_names_the_accelerator() -> None:
    resolved = resolve_cluster(_cluster({"system": "HGX H100", "num_nodes": 2}))
    assert resolved.accelerator.id == "h100-sxm"
    assert resolved.groups[0].system.id == "dgx-h100"
    assert resolved.gpus_per_node == 8 and resolved.scale_up_domain_gpus == 8


def test_system_with_matching_accelerator_alias_is_accepted() -> None:
    resolved = resolve_cluster(
        _cluster({"accelerator": "H100", "system": "hgx-h100", "num_nodes": 1})
    )
    assert resolved.groups[0].system.id == "dgx-h100"


def test_system_accelerator_mismatch_is_a_spec_error() -> None:
    cluster = _cluster({"accelerator": "a100", "system": "dgx-h100", "num_nodes": 1})
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    err = info.value
    assert err.status == 422
    assert err.field == "cluster.node_groups.0.system"
    assert err.rule == "must hold the group's accelerator"
    assert err.value == "dgx-h100"
    assert "'h100-sxm'" in err.detail and "'a100-40gb'" in err.detail
    assert err.extensions["errors"][0]["field"] == "cluster.node_groups.0.system"


def test_unknown_system_is_a_spec_error_with_close_matches() -> None:
    cluster = _cluster({"system": "dgx-h10", "num_nodes": 1})
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    assert info.value.field == "cluster.node_groups.0.system"
    assert info.value.rule == "must be a known system id or alias"
    assert "dgx-h100" in info.value.detail


def test_domain_not_fitting_the_node_is_rejected_by_the_spec() -> None:
    with pytest.raises(ValidationError) as info:
        _cluster(
            {"accelerator": "h100", "num_nodes": 1, "gpus_per_node": 8, "scale_up_domain_gpus": 12}
        )
    error = info.value.errors()[0]
    assert error["loc"] == ("node_groups", 0, "scale_up_domain_gpus")
    assert "multiple of gpus_per_node (8) or divide it (got 12)" in error["msg"]


def test_domain_not_fitting_the_resolved_node_is_a_spec_error() -> None:
    # the spec cannot check it: gpus_per_node comes from the system
    cluster = _cluster({"system": "dgx-h100", "num_nodes": 2, "scale_up_domain_gpus": 12})
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    assert info.value.status == 422
    assert info.value.field == "cluster.node_groups.0.scale_up_domain_gpus"
    assert info.value.value == 12
    assert "multiple of gpus_per_node (8)" in info.value.detail


@pytest.mark.parametrize("domain", [0, 65537])
def test_domain_bounds(domain: int) -> None:
    with pytest.raises(ValidationError, match="scale_up_domain_gpus"):
        _cluster({"accelerator": "h100", "num_nodes": 1, "scale_up_domain_gpus": domain})


def test_node_group_needs_accelerator_or_system() -> None:
    with pytest.raises(ValidationError, match="needs accelerator or system"):
        _cluster({"num_nodes": 1})


def test_bandwidth_defaults_come_from_the_system_and_overrides_are_kept() -> None:
    h800 = resolve_cluster(_cluster({"accelerator": "h800", "num_nodes": 1})).groups[0]
    assert (h800.intra_node_bandwidth_gb_s, h800.inter_node_bandwidth_gb_s) == (200.0, 50.0)
    custom = resolve_cluster(
        _cluster(
            {
                "system": "dgx-h100",
                "num_nodes": 1,
                "intra_node_bandwidth_gb_s": 400,
                "inter_node_bandwidth_gb_s": 25,
            }
        )
    ).groups[0]
    assert (custom.intra_node_bandwidth_gb_s, custom.inter_node_bandwidth_gb_s) == (400, 25)


def test_peer_bandwidth_comes_from_the_system_capped_by_an_override() -> None:
    mi300x = resolve_cluster(_cluster({"accelerator": "mi300x", "num_nodes": 1})).groups[0]
    assert mi300x.scale_up_peer_bandwidth_gb_s == 64.0
    capped = resolve_cluster(
        _cluster({"accelerator": "mi300x", "num_nodes": 1, "intra_node_bandwidth_gb_s": 32})
    ).groups[0]
    assert capped.scale_up_peer_bandwidth_gb_s == 32
    h100 = resolve_cluster(_cluster({"accelerator": "h100", "num_nodes": 1})).groups[0]
    assert h100.scale_up_peer_bandwidth_gb_s is None


def test_accelerator_only_groups_resolve_as_before() -> None:
    for accelerator in list_accelerators():
        group = resolve_cluster(_cluster({"accelerator": accelerator.id, "num_nodes": 1})).groups[0]
        assert group.system.id == accelerator.default_system
        assert group.gpus_per_node == accelerator.gpus_per_node
        assert group.intra_node_bandwidth_gb_s == accelerator.scale_up_bandwidth_gb_s
        assert group.inter_node_bandwidth_gb_s == accelerator.scale_out_bandwidth_gb_s
        assert group.scale_up_fabric.id == group.system.scale_up_fabric
        assert group.scale_out_fabric.id == group.system.scale_out_fabric


def test_every_system_resolves() -> None:
    for system in list_systems():
        group = resolve_cluster(_cluster({"system": system.id, "num_nodes": 1})).groups[0]
        assert group.accelerator.id == system.accelerator
        assert (group.gpus_per_node, group.scale_up_domain_gpus) == (
            system.gpus_per_node,
            system.scale_up_domain_gpus,
        )


def test_fabric_layout_defaults_to_the_systems_usual_layout() -> None:
    h100 = resolve_cluster(_cluster({"accelerator": "h100", "num_nodes": 64}))
    assert h100.fabric == FabricLayout(
        topology="rail_optimized", oversubscription=1.0, nodes_per_leaf=32
    )
    mi300x = resolve_cluster(_cluster({"accelerator": "mi300x", "num_nodes": 4}))
    assert mi300x.fabric.topology == "fat_tree"


def test_fabric_layout_takes_the_requested_fields() -> None:
    partial = resolve_cluster(
        _cluster({"accelerator": "h100", "num_nodes": 64}, fabric={"oversubscription": 7.0})
    )
    assert partial.fabric == FabricLayout(
        topology="rail_optimized", oversubscription=7.0, nodes_per_leaf=32
    )
    full = resolve_cluster(
        _cluster(
            {"accelerator": "h100", "num_nodes": 64},
            fabric={"topology": "rail_only", "oversubscription": 1.0, "nodes_per_leaf": 16},
        )
    )
    assert full.fabric == FabricLayout(
        topology="rail_only", oversubscription=1.0, nodes_per_leaf=16
    )


@pytest.mark.parametrize(
    "fabric",
    [{"oversubscription": 0.5}, {"oversubscription": 65}, {"nodes_per_leaf": 0},
     {"nodes_per_leaf": 65537}, {"topology": "torus"}, {"spine": 2}],
)  # fmt: skip
def test_fabric_layout_bounds(fabric: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _cluster({"accelerator": "h100", "num_nodes": 1}, fabric=fabric)


def test_homogeneity_compares_domain_and_system() -> None:
    same = resolve_cluster(
        _cluster({"accelerator": "h100", "num_nodes": 2}, {"system": "dgx-h100", "num_nodes": 1})
    )
    assert same.is_homogeneous
    split = resolve_cluster(
        _cluster(
            {"accelerator": "h100", "num_nodes": 2},
            {"accelerator": "h100", "num_nodes": 2, "scale_up_domain_gpus": 16},
        )
    )
    assert not split.is_homogeneous
    group = same.groups[0]
    other = group.model_copy(update={"system": group.system.model_copy(update={"id": "other"})})
    assert not ResolvedCluster(groups=[group, other], fabric=same.fabric).is_homogeneous


def test_resolved_cluster_survives_a_json_round_trip() -> None:
    resolved = resolve_cluster(
        _cluster({"system": "gb200-nvl72", "num_nodes": 36}, fabric={"oversubscription": 2})
    )
    again = ResolvedCluster.model_validate(resolved.model_dump(mode="json"))
    assert again == resolved
    curve = again.groups[0].scale_up_fabric.curve("all_reduce")
    assert curve is not None and curve.efficiency(100 * MIB) > 0


# --- node groups built in code --------------------------------------------------------------


def _bare_accelerator() -> AcceleratorSpec:
    return AcceleratorSpec(
        id="fake-gpu",
        name="Fake GPU",
        vendor="test",
        memory_gib=80,
        memory_bandwidth_gb_s=2000,
        peak_tflops={"bf16": 400.0},
        scale_up_bandwidth_gb_s=300,
        scale_out_bandwidth_gb_s=25,
        scale_up_domain_size=8,
        gpus_per_node=8,
        gemm_efficiency=0.8,
        scale_up_efficiency=0.75,
        scale_out_efficiency=0.9,
        sources=[Source(ref="test", supports="made up")],
    )


def test_group_built_without_a_system_gets_one_derived_from_the_accelerator() -> None:
    # the keyword form the cost-model and solver test fixtures use (static types want the
    # topology fields; at run time the validator fills them)
    group = ResolvedNodeGroup(  # type: ignore[call-arg]
        accelerator=_bare_accelerator(),
        num_nodes=2,
        gpus_per_node=8,
        intra_node_bandwidth_gb_s=300,
        inter_node_bandwidth_gb_s=25,
    )
    assert group.system.accelerator == "fake-gpu"
    assert group.scale_up_domain_gpus == 8
    assert group.scale_up_peer_bandwidth_gb_s is None
    for name in COLLECTIVES:
        up, out = group.scale_up_fabric.curve(name), group.scale_out_fabric.curve(name)
        assert up is not None and out is not None
        assert up.efficiency(MIB) == 0.75  # flat at the scalar efficiencies
        assert out.efficiency(MIB) == 0.9
    cluster = ResolvedCluster(groups=[group])  # type: ignore[call-arg]
    assert cluster.fabric.topology == "fat_tree"
    assert ResolvedCluster.model_validate(cluster.model_dump(mode="json")) == cluster


def test_group_built_from_a_catalog_accelerator_gets_its_default_system() -> None:
    group = ResolvedNodeGroup(  # type: ignore[call-arg]
        accelerator=get_accelerator("gb200"),
        num_nodes=1,
        gpus_per_node=72,
        intra_node_bandwidth_gb_s=900,
        inter_node_bandwidth_gb_s=50,
    )
    assert group.system.id == "gb200-nvl72"
    assert group.scale_up_fabric.id == "nvlink5-nvl72"
    assert group.scale_up_domain_gpus == 72
    cluster = ResolvedCluster(groups=[group])  # type: ignore[call-arg]
    assert cluster.fabric.nodes_per_leaf == 8


def test_in_network_reduction_requires_its_points() -> None:
    with pytest.raises(ValidationError, match="all_reduce"):
        InNetworkReduction.model_validate(
            {
                "name": "nvls",
                "min_ranks": 5,
                "latency_us": 25,
                "reference_ranks": 8,
                "reference_ranks_per_node": 8,
                "provenance": "measured",
            }
        )


def test_system_spec_is_documented() -> None:
    for model in (SystemSpec, FabricSpec, FabricLayout, CollectiveCurve, InNetworkReduction):
        for name, field in model.model_fields.items():
            if name not in ("name", "vendor", "sources", "unverified_fields", "notes"):
                assert field.description, (model.__name__, name)
