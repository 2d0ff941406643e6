"""Tests for the catalog entries added for mixed fleets: older and newer accelerators, the
cloud instance types people name (AWS, Google Cloud, Azure), the default systems of the new
parts and the fabrics they need. Every expected number below is written from the vendor or
provider figure the data file cites, not read back from the data file."""

from __future__ import annotations

from typing import Any

import pytest

from app.services import planning
from hardware_catalog import (
    get_accelerator,
    get_fabric,
    get_system,
    list_accelerators,
    list_systems,
    resolve_cluster,
)
from hardware_catalog.schema import GIB
from specs.cluster import ClusterSpec
from specs.errors import SpecError

NEW_ACCELERATORS = [
    "t4", "v100-16gb", "a10g", "rtx-3090", "rtx-a6000", "l40", "mi210", "gh200", "gh200-144gb",
    "b300", "gb300",
]  # fmt: skip

NEW_SYSTEMS = [
    "pcie-server-t4", "pcie-server-rtx-3090", "pcie-server-rtx-a6000", "pcie-server-l40",
    "pcie-server-mi210", "gh200-quad-node", "gh200-nvl2", "hgx-b300", "gb300-nvl72",
    "aws-p3-16xlarge", "aws-p3dn-24xlarge", "aws-p4d-24xlarge", "aws-p4de-24xlarge",
    "aws-p5-48xlarge", "aws-g4dn-12xlarge", "aws-g5-48xlarge", "aws-g6e-48xlarge",
    "gcp-a2-highgpu-8g", "gcp-a2-ultragpu-8g", "gcp-a3-highgpu-8g", "gcp-a3-megagpu-8g",
    "gcp-g2-standard-96", "azure-nd96asr-v4", "azure-nd96amsr-a100-v4", "azure-nd96isr-h100-v5",
]  # fmt: skip

NEW_FABRICS = [
    "pcie-gen3", "nvlink4-mesh", "aws-efa-100g", "aws-efa-50g", "cloud-tcp-25g",
    "cloud-tcp-100g", "gcp-gpudirect-tcpx", "infiniband-xdr",
]  # fmt: skip


def _cluster(*groups: dict[str, Any], **extra: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({"node_groups": list(groups), **extra})


def _flagged(lines: list[str], field: str) -> bool:
    return any(line.startswith(f"{field}:") for line in lines)


# --- accelerators: lookup ------------------------------------------------------------------

# (typed name, expected id): nvidia-smi / rocm names and the short names people use
ALIASES = [
    ("Tesla T4", "t4"),
    ("nvidia_tesla_t4", "t4"),
    ("Tesla V100-SXM2-16GB", "v100-16gb"),
    ("NVIDIA A10G", "a10g"),
    ("a10g", "a10g"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("RTX 3090", "rtx-3090"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("A6000", "rtx-a6000"),
    ("NVIDIA L40", "l40"),
    ("AMD Instinct MI210", "mi210"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("GH200 96GB", "gh200"),
    ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
    ("NVIDIA B300 SXM6 AC", "b300"),
    ("B300-SXM-270GB", "b300"),
    ("NVIDIA GB300", "gb300"),
    ("GB300 NVL72", "gb300"),
]


@pytest.mark.parametrize(("name", "expected"), ALIASES)
def test_new_accelerator_resolves_by_alias(name: str, expected: str) -> None:
    assert get_accelerator(name).id == expected


@pytest.mark.parametrize("accelerator_id", NEW_ACCELERATORS)
def test_new_accelerator_resolves_by_id_in_any_spelling(accelerator_id: str) -> None:
    assert get_accelerator(accelerator_id).id == accelerator_id
    assert get_accelerator(accelerator_id.upper().replace("-", "_")).id == accelerator_id


def test_existing_short_names_keep_their_meaning() -> None:
    # the new entries must not steal names the catalog already answered
    assert get_accelerator("V100").id == "v100-32gb"
    assert get_accelerator("A10").id == "a10"
    assert get_accelerator("L40S").id == "l40s"
    assert get_accelerator("GB200 NVL72").id == "gb200"


# --- accelerators: datasheet values -------------------------------------------------------

# Dense bf16 (or fp16 where the part has no bf16) TFLOP/s, from the cited figure:
DENSE_16BIT_TFLOPS = {
    "t4": 65.0,  # T4: "65 TFLOPS FP16 mixed precision"; Turing has no sparsity, no bf16
    "v100-16gb": 125.0,  # V100 SXM2: 125 TFLOPS FP16 tensor; Volta has no bf16
    "a10g": 70.0,  # no datasheet; published tables, measured bf16 matmul 69.47
    "rtx-3090": 71.0,  # GA102 whitepaper: BF16 with FP32 accumulate 71 / 142*
    "rtx-a6000": 309.6 / 2,  # GA102 whitepaper: BF16 with FP32 accumulate 154.8 / 309.6*
    "l40": 362.1 / 2,  # L40 datasheet: BFLOAT16 181.05 | 362.1*
    "mi210": 181.0,  # AMD: FP16 matrix 181 TFLOPS (CDNA2, dense, no sparsity)
    "gh200": 990.0,  # GH200 datasheet: BFLOAT16 1,979* | 990
    "gh200-144gb": 990.0,  # same GPU, same datasheet row
    "b300": 4500.0 / 2,  # Blackwell Ultra datasheet, HGX B300: FP16/BF16 4.5 PF*
    "gb300": 360_000.0 / 72 / 2,  # GB300 NVL72: FP16/BF16 360 PF* for 72 GPUs
}

# nvidia-smi memory.total (MiB) where the device-reported figure is known
REPORTED_MIB = {
    "t4": 15360,
    "v100-16gb": 16160,
    "a10g": 23028,
    "rtx-3090": 24576,
    "rtx-a6000": 49140,
    "l40": 46068,
    "gh200": 97871,
    "b300": 275040,
    "gb300": 284208,
}
# vendor label read as GiB (flagged unverified)
LABEL_GIB = {"mi210": 64, "gh200-144gb": 144}

# HBM / GDDR bandwidth in GB/s from the cited figure
MEMORY_BANDWIDTH_GB_S = {
    "t4": 320.0,
    "v100-16gb": 900.0,
    "a10g": 600.0,
    "rtx-3090": 936.0,
    "rtx-a6000": 768.0,
    "l40": 864.0,
    "mi210": 1600.0,  # "1.6 TB/s"
    "gh200": 4000.0,  # "up to 4 TB/s"
    "gh200-144gb": 4900.0,  # "up to 4.9 TB/s"
    "b300": 7700.0,  # "270 GB HBM3E | 7.7 TB/s"
    "gb300": 8000.0,  # "279 GB HBM3E | 8 TB/s"
}


@pytest.mark.parametrize("accelerator_id", NEW_ACCELERATORS)
def test_dense_16bit_peak_is_the_datasheet_figure(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    expected = DENSE_16BIT_TFLOPS[accelerator_id]
    assert acc.peak_flops("bf16") == pytest.approx(expected * 1e12)
    assert acc.peak_flops("fp16") == pytest.approx(expected * 1e12)


def test_parts_without_bf16_fall_back_to_fp16() -> None:
    for accelerator_id in ("t4", "v100-16gb"):
        acc = get_accelerator(accelerator_id)
        assert acc.peak_tflops["bf16"] is None
        assert acc.peak_tflops["fp16"] is not None


# sparse datasheet figures (2:4) next to the dense value the catalog must hold
SPARSE_DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    "l40": {"tf32": 181, "bf16": 362.1, "fp8": 724, "int8": 724},
    "gh200": {"tf32": 989, "bf16": 1979, "fp8": 3958, "int8": 3958},
    "b300": {"tf32": 2200, "bf16": 4500, "fp8": 9000, "int8": 307},
    "gb300": {"tf32": 2500, "bf16": 5000, "fp8": 10000, "int8": 330},
}


@pytest.mark.parametrize("accelerator_id", sorted(SPARSE_DATASHEET_TFLOPS))
def test_dense_peaks_are_half_the_sparse_figures(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    for precision, sparse in SPARSE_DATASHEET_TFLOPS[accelerator_id].items():
        dense = acc.peak_tflops[precision]
        assert dense is not None, precision
        assert 2 * dense == pytest.approx(sparse, rel=2e-3), precision


def test_blackwell_ultra_fp4_dense_figures() -> None:
    # Blackwell Ultra datasheet prints FP4 as sparse | dense: HGX B300 18 | 14, GB300 20 | 15
    assert get_accelerator("b300").peak_tflops["fp4"] == 14_000.0
    assert get_accelerator("gb300").peak_tflops["fp4"] == 15_000.0
    # GB300 NVL72 rack: 1,080 PF dense FP4 over 72 GPUs
    assert get_accelerator("gb300").peak_tflops["fp4"] == pytest.approx(1_080_000 / 72)


@pytest.mark.parametrize("accelerator_id", sorted(REPORTED_MIB))
def test_memory_is_what_the_device_reports(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    assert acc.memory_bytes == REPORTED_MIB[accelerator_id] * 1024**2
    assert not _flagged(acc.unverified_fields, "memory_gib")


@pytest.mark.parametrize("accelerator_id", sorted(LABEL_GIB))
def test_memory_label_fallback_is_flagged(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    assert acc.memory_bytes == LABEL_GIB[accelerator_id] * GIB
    assert _flagged(acc.unverified_fields, "memory_gib")


def test_memory_examples_in_gib() -> None:
    assert get_accelerator("t4").memory_gib == 15.0
    assert get_accelerator("gh200").memory_gib == pytest.approx(95.58, abs=0.005)
    assert get_accelerator("b300").memory_gib == pytest.approx(268.59, abs=0.005)
    assert get_accelerator("gb300").memory_gib == pytest.approx(277.55, abs=0.005)


@pytest.mark.parametrize("accelerator_id", NEW_ACCELERATORS)
def test_memory_bandwidth(accelerator_id: str) -> None:
    expected = MEMORY_BANDWIDTH_GB_S[accelerator_id]
    assert get_accelerator(accelerator_id).memory_bandwidth_gb_s == expected


def test_power_and_compute_units() -> None:
    expected = {
        "t4": (70, 40),
        "v100-16gb": (300, 80),
        "a10g": (300, 80),
        "rtx-3090": (350, 82),
        "rtx-a6000": (300, 84),
        "l40": (300, 142),
        "mi210": (300, 104),
        "gh200": (700, 132),
        "b300": (1100, None),
        "gb300": (1400, None),
    }
    for accelerator_id, (tdp, units) in expected.items():
        acc = get_accelerator(accelerator_id)
        assert (acc.tdp_w, acc.num_compute_units) == (tdp, units), accelerator_id


@pytest.mark.parametrize("accelerator_id", NEW_ACCELERATORS)
def test_every_new_entry_flags_its_assumed_efficiencies(accelerator_id: str) -> None:
    acc = get_accelerator(accelerator_id)
    for field in ("gemm_efficiency", "scale_up_efficiency", "scale_out_efficiency"):
        assert _flagged(acc.unverified_fields, field), field
    assert acc.sources and all(s.ref.strip() and s.supports.strip() for s in acc.sources)


def test_default_systems_of_the_new_parts() -> None:
    expected = {
        "t4": "pcie-server-t4",
        "v100-16gb": "aws-p3-16xlarge",
        "a10g": "aws-g5-48xlarge",
        "rtx-3090": "pcie-server-rtx-3090",
        "rtx-a6000": "pcie-server-rtx-a6000",
        "l40": "pcie-server-l40",
        "mi210": "pcie-server-mi210",
        "gh200": "gh200-quad-node",
        "gh200-144gb": "gh200-nvl2",
        "b300": "hgx-b300",
        "gb300": "gb300-nvl72",
    }
    for accelerator_id, system_id in expected.items():
        acc = get_accelerator(accelerator_id)
        assert acc.default_system == system_id
        assert get_system(system_id).accelerator == accelerator_id


# --- systems: cloud instance types --------------------------------------------------------

# (typed name, system id, accelerator, GPUs per instance, documented Gbit/s for GPU traffic)
CLOUD_INSTANCES = [
    ("p3.16xlarge", "aws-p3-16xlarge", "v100-16gb", 8, 25),
    ("p3dn.24xlarge", "aws-p3dn-24xlarge", "v100-32gb", 8, 100),
    ("p4d.24xlarge", "aws-p4d-24xlarge", "a100-40gb", 8, 400),
    ("aws-p4d", "aws-p4d-24xlarge", "a100-40gb", 8, 400),
    ("p4de.24xlarge", "aws-p4de-24xlarge", "a100-80gb", 8, 400),
    ("p5.48xlarge", "aws-p5-48xlarge", "h100-sxm", 8, 3200),
    ("g4dn.12xlarge", "aws-g4dn-12xlarge", "t4", 4, 50),
    ("g5.48xlarge", "aws-g5-48xlarge", "a10g", 8, 100),
    ("g6e.48xlarge", "aws-g6e-48xlarge", "l40s", 8, 400),
    ("a2-highgpu-8g", "gcp-a2-highgpu-8g", "a100-40gb", 8, 100),
    ("a2-ultragpu-8g", "gcp-a2-ultragpu-8g", "a100-80gb", 8, 100),
    ("a3-highgpu-8g", "gcp-a3-highgpu-8g", "h100-sxm", 8, 4 * 200),  # 4 of its 5 NICs
    ("a3-megagpu-8g", "gcp-a3-megagpu-8g", "h100-sxm", 8, 8 * 200),
    ("g2-standard-96", "gcp-g2-standard-96", "l4", 8, 100),
    ("Standard_ND96asr_v4", "azure-nd96asr-v4", "a100-40gb", 8, 8 * 200),
    ("ND96asr_v4", "azure-nd96asr-v4", "a100-40gb", 8, 8 * 200),
    ("Standard_ND96amsr_A100_v4", "azure-nd96amsr-a100-v4", "a100-80gb", 8, 8 * 200),
    ("Standard_ND96isr_H100_v5", "azure-nd96isr-h100-v5", "h100-sxm", 8, 8 * 400),
]


@pytest.mark.parametrize(("name", "system_id", "accelerator_id", "gpus", "gbps"), CLOUD_INSTANCES)
def test_cloud_instance_resolves_with_documented_shape(
    name: str, system_id: str, accelerator_id: str, gpus: int, gbps: int
) -> None:
    system = get_system(name)
    assert system.id == system_id
    assert system.accelerator == accelerator_id
    assert system.gpus_per_node == gpus
    # per-GPU scale-out rate: instance Gbit/s / 8 bits / GPUs
    assert system.scale_out_bandwidth_gb_s == pytest.approx(gbps / 8 / gpus)


def test_per_gpu_scale_out_examples() -> None:
    assert get_system("p4d.24xlarge").scale_out_bandwidth_gb_s == 6.25  # 400 Gb/s / 8 GPUs
    assert get_system("p5.48xlarge").scale_out_bandwidth_gb_s == 50.0  # 3,200 Gb/s / 8
    assert get_system("p3.16xlarge").scale_out_bandwidth_gb_s == 0.390625  # 25 Gb/s / 8
    assert get_system("g4dn.12xlarge").scale_out_bandwidth_gb_s == 1.5625  # 50 Gb/s / 4
    assert get_system("Standard_ND96isr_H100_v5").scale_out_bandwidth_gb_s == 50.0


def test_cloud_instances_name_their_scale_up_and_scale_out_tiers() -> None:
    expected = {
        "p3.16xlarge": ("nvlink2-hybrid-cube-mesh", 150.0, 25.0, "cloud-tcp-25g", 1),
        "p3dn.24xlarge": ("nvlink2-hybrid-cube-mesh", 150.0, 25.0, "aws-efa-100g", 1),
        "p4d.24xlarge": ("nvlink3-nvswitch", 300.0, None, "aws-efa-100g", 4),
        "p5.48xlarge": ("nvlink4-nvswitch", 450.0, None, "aws-efa-100g", 32),
        "g4dn.12xlarge": ("pcie-gen3", 15.75, None, "aws-efa-50g", 1),
        "g5.48xlarge": ("pcie-gen4", 31.0, None, "aws-efa-100g", 1),
        "g6e.48xlarge": ("pcie-gen4", 31.0, None, "aws-efa-100g", 4),
        "a2-highgpu-8g": ("nvlink3-nvswitch", 300.0, None, "cloud-tcp-100g", 1),
        "a3-megagpu-8g": ("nvlink4-nvswitch", 450.0, None, "gcp-gpudirect-tcpx", 8),
        "g2-standard-96": ("pcie-gen4", 31.0, None, "cloud-tcp-100g", 1),
        "Standard_ND96asr_v4": ("nvlink3-nvswitch", 300.0, None, "infiniband-hdr", 8),
        "Standard_ND96isr_H100_v5": ("nvlink4-nvswitch", 450.0, None, "infiniband-ndr", 8),
    }
    for name, (up, up_rate, peer, out, nics) in expected.items():
        system = get_system(name)
        assert (system.scale_up_fabric, system.scale_up_bandwidth_gb_s) == (up, up_rate), name
        assert system.scale_up_peer_bandwidth_gb_s == peer, name
        assert (system.scale_out_fabric, system.nics_per_node) == (out, nics), name


def test_instance_name_lookup_ignores_case_and_separators() -> None:
    assert get_system("P4D.24XLARGE").id == "aws-p4d-24xlarge"
    assert get_system("standard nd96asr v4").id == "azure-nd96asr-v4"
    assert get_system("A3 Mega").id == "gcp-a3-megagpu-8g"


# --- systems: default systems of the new parts -------------------------------------------


def test_gh200_quad_node_is_a_point_to_point_mesh() -> None:
    node = get_system("JUPITER Booster node")
    assert node.id == "gh200-quad-node"
    assert (node.gpus_per_node, node.scale_up_domain_gpus) == (4, 4)
    # NVLink 4: 150 GB/s per direction to each of 3 peers, 450 aggregate
    assert (node.scale_up_bandwidth_gb_s, node.scale_up_peer_bandwidth_gb_s) == (450.0, 150.0)
    assert not get_fabric(node.scale_up_fabric).switched
    # 4 x NDR200 (200 Gb/s) for 4 GPUs
    assert node.scale_out_bandwidth_gb_s == pytest.approx(200 / 8)


def test_blackwell_ultra_systems() -> None:
    hgx = get_system("DGX B300")
    assert (hgx.id, hgx.gpus_per_node, hgx.scale_up_domain_gpus) == ("hgx-b300", 8, 8)
    assert hgx.scale_up_bandwidth_gb_s == 1800 / 2  # "1.8 TB/s" NVLink 5 is bidirectional
    assert hgx.scale_out_bandwidth_gb_s == 800 / 8  # one 800 Gb/s ConnectX-8 per GPU
    rack = get_system("gb300-nvl72")
    assert (rack.gpus_per_node, rack.scale_up_domain_gpus) == (4, 72)
    assert rack.scale_up_fabric == "nvlink5-nvl72"
    assert rack.scale_out_bandwidth_gb_s == 3200 / 8 / 4  # 4 x CX-8 per 4-GPU tray


@pytest.mark.parametrize("system_id", NEW_SYSTEMS)
def test_every_new_system_is_sourced_and_its_layout_flagged(system_id: str) -> None:
    system = get_system(system_id)
    assert system.sources and all(s.ref.strip() and s.supports.strip() for s in system.sources)
    assert _flagged(system.unverified_fields, "fabric") or any(
        line.startswith("fabric.") for line in system.unverified_fields
    )


def test_catalog_lists_the_new_entries() -> None:
    accelerators = {a.id for a in list_accelerators()}
    systems = {s.id for s in list_systems()}
    assert set(NEW_ACCELERATORS) <= accelerators
    assert set(NEW_SYSTEMS) <= systems
    for fabric_id in NEW_FABRICS:
        assert get_fabric(fabric_id).id == fabric_id


# --- fabrics ------------------------------------------------------------------------------


def test_new_fabric_line_rates() -> None:
    expected_gbit = {
        "pcie-gen3": 15.75 * 8,
        "aws-efa-100g": 100,
        "aws-efa-50g": 50,
        "cloud-tcp-25g": 25,
        "cloud-tcp-100g": 100,
        "gcp-gpudirect-tcpx": 200,
        "infiniband-xdr": 800,
    }
    for fabric_id, gbit in expected_gbit.items():
        assert get_fabric(fabric_id).line_rate_gb_s * 8 == pytest.approx(gbit), fabric_id
    assert get_fabric("EFA").id == "aws-efa-100g"
    assert get_fabric("XDR").id == "infiniband-xdr"


@pytest.mark.parametrize("fabric_id", NEW_FABRICS)
def test_new_fabric_curves_are_derived_and_flagged(fabric_id: str) -> None:
    fabric = get_fabric(fabric_id)
    for curve in fabric.collectives.values():
        assert curve.provenance == "derived"
    assert _flagged(fabric.unverified_fields, "collectives")
    default_peak = 0.80 if fabric.kind == "scale_up" else 0.90
    all_reduce = fabric.curve("all_reduce")
    assert all_reduce is not None and all_reduce.peak_efficiency == default_peak


def test_scale_out_all_gather_keeps_the_ndr_ratio() -> None:
    fabric = get_fabric("aws-efa-100g")
    all_reduce, all_gather = fabric.curve("all_reduce"), fabric.curve("all_gather")
    assert all_reduce is not None and all_gather is not None
    assert all_gather.peak_efficiency == pytest.approx(0.90 * 0.5624, abs=1e-4)


def test_nvlink4_mesh_send_recv_is_per_peer() -> None:
    send_recv = get_fabric("nvlink4-mesh").curve("send_recv")
    assert send_recv is not None and send_recv.line_rate_basis == "peer"


# --- cluster resolution with instance names -----------------------------------------------


def test_mixed_fleet_cluster_resolves_by_instance_names() -> None:
    cluster = _cluster(
        {"system": "p4d.24xlarge", "num_nodes": 2},
        {"system": "Standard_ND96isr_H100_v5", "num_nodes": 1},
        {"accelerator": "T4", "num_nodes": 3},
        {"system": "g5.48xlarge", "num_nodes": 1},
    )
    resolved = planning.resolve_cluster(cluster)
    groups = resolved.groups
    assert [g.accelerator.id for g in groups] == ["a100-40gb", "h100-sxm", "t4", "a10g"]
    assert [g.system.id for g in groups] == [
        "aws-p4d-24xlarge",
        "azure-nd96isr-h100-v5",
        "pcie-server-t4",
        "aws-g5-48xlarge",
    ]
    assert [g.gpus_per_node for g in groups] == [8, 8, 8, 8]
    assert resolved.num_gpus == 2 * 8 + 8 + 3 * 8 + 8
    assert [g.inter_node_bandwidth_gb_s for g in groups] == [6.25, 50.0, 25.0, 1.5625]
    assert [g.intra_node_bandwidth_gb_s for g in groups] == [300.0, 450.0, 15.75, 31.0]
    assert groups[0].scale_out_fabric.id == "aws-efa-100g"
    assert not resolved.is_homogeneous


def test_catalog_resolver_agrees_with_the_service() -> None:
    cluster = _cluster({"system": "aws-p4d", "num_nodes": 4})
    direct = resolve_cluster(cluster)
    assert direct == planning.resolve_cluster(cluster)
    assert (direct.accelerator.id, direct.num_gpus) == ("a100-40gb", 32)
    assert direct.inter_node_bandwidth_gb_s == 400 / 8 / 8


def test_gb300_trays_and_racks() -> None:
    trays = resolve_cluster(_cluster({"system": "gb300-nvl72", "num_nodes": 18}))
    assert (trays.gpus_per_node, trays.scale_up_domain_gpus, trays.num_gpus) == (4, 72, 72)
    racks = resolve_cluster(_cluster({"accelerator": "gb300", "num_nodes": 2}))
    assert (racks.gpus_per_node, racks.scale_up_domain_gpus, racks.num_gpus) == (72, 72, 144)
    assert racks.inter_node_bandwidth_gb_s == 100.0


def test_gh200_group_gets_the_mesh_peer_rate() -> None:
    group = resolve_cluster(_cluster({"accelerator": "gh200", "num_nodes": 2})).groups[0]
    assert (group.gpus_per_node, group.scale_up_domain_gpus) == (4, 4)
    assert group.scale_up_peer_bandwidth_gb_s == 150.0
    assert group.scale_up_fabric.id == "nvlink4-mesh"


def test_instance_holding_another_accelerator_is_rejected() -> None:
    cluster = _cluster({"accelerator": "a100-80gb", "system": "p4d.24xlarge", "num_nodes": 1})
    with pytest.raises(SpecError) as info:
        resolve_cluster(cluster)
    assert info.value.field == "cluster.node_groups.0.system"
    assert "'a100-40gb'" in info.value.detail
