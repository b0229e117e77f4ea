"""tfobs's copy of XProf's Tensor/matrix-core name rules equals the installed wheel's.

Each probed name is put on a GPU plane of a real capture and XProf 2.24.2's kernel_stats
says whether it "uses Tensor Core" (tests/support/xprof_probe.py); tfobs's XProf rules
(`extended=False`) must give the same answer for every one: a word of each rule inside a
longer name, its case variants, near misses, and CK-tile / flash-attention kernel names.
"""

from __future__ import annotations

import pytest

from tfobs.analysis import tensor_cores as tc
from tfobs.analysis.tensor_cores import AMD, NVIDIA

pytest.importorskip("xprof")

from tests.support.xprof_probe import xprof_uses_tensor_cores

ATTENTION = (
    # CK-tile (ROCm) forward, backward and helper kernels, as the profiler names them
    "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS<"
    "ck_tile::BlockFmhaPipelineProblem<ck_tile::TileFmhaShape<ck_tile::sequence<128>>>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::FmhaBwdDQDKDVKernel<ck_tile::TileFmhaBwdShape<"
    "ck_tile::sequence<64>>>>",
    "void ck_tile::kentry<64, 1, ck_tile::FmhaBwdOGradDotOKernel<ck_tile::"
    "BlockFmhaBwdOGradDotO<ck_tile::BlockFmhaBwdOGradDotOPipelineProblem<bf16>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::FmhaBwdConvertQGradKernel<ck_tile::"
    "BlockFmhaBwdConvertQGrad<ck_tile::BlockFmhaBwdConvertQGradPipelineProblem<bf16>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::FmhaFwdSplitKVCombineKernel<ck_tile::"
    "TileFmhaShape<ck_tile::sequence<64>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::GemmKernel<ck_tile::TileGemmShape<"
    "ck_tile::sequence<256, 128, 64>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::FlatmmKernel<ck_tile::TileFlatmmShape<"
    "ck_tile::sequence<128>>>>",
    "void ck_tile::kentry<256, 1, ck_tile::SageAttnKernel<ck_tile::TileSageAttnShape<"
    "ck_tile::sequence<128>>>>",
    # FlashAttention 2 (CUDA and ROCm builds)
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false>>",
    "void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128>>",
    "void flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128>>",
    "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>>",
    "fmha_fwd_d128_bf16_batch_b128x128x32",
)
HELPERS = ("OGradDotO", "ConvertQGrad", "dot_do_o", "convert_dq", "splitkv_combine")


def _probe_names(vendor: str) -> tuple[str, ...]:
    names: list[str] = []
    for rule in tc.XPROF_RULES[vendor]:
        word = rule.pattern.pattern.replace("\\", "")
        if rule.id == "xprof.amd.tensile_mi":
            names += ["Cijk_Ailk_Bljk_MI16x16x16x1_SN", "Cijk_MI32x32x8", "Cijk_MI16x16_SN",
                      "CijkMI16x16x16", "Cijk_mi16x16x16x1", "Cijk_MIx16x16x1"]
            continue
        names += [f"k_{word}_k", word.upper(), word.lower(), word.swapcase()]
    names += list(ATTENTION) + ["plain_elementwise_kernel", "TileGemmShape", "TileFmhaShape <",
                                "TileFmhaFwdShape<", "nvjet_tst_64x32", "wgmma_kernel"]
    return tuple(dict.fromkeys(names))  # unique, in order


@pytest.mark.parametrize("vendor", [AMD, NVIDIA])
def test_xprof_rules_equal_the_wheel(vendor: str) -> None:
    names = _probe_names(vendor)
    xprof = xprof_uses_tensor_cores(names, vendor)
    assert set(xprof) == set(names)  # every probe came back as a kernel row
    ours = {n: tc.uses_tensor_cores(n, vendor, extended=False) for n in names}
    assert ours == xprof
    assert any(xprof.values()) and not all(xprof.values())  # the probe tells both apart


def test_wheel_counts_ck_tile_shapes_on_amd() -> None:
    names = tuple(n for n in ATTENTION if "Tile" in n and "Shape<" in n)
    assert all(xprof_uses_tensor_cores(names, AMD).values())


@pytest.mark.parametrize("vendor", [AMD, NVIDIA])
def test_extensions_skip_attention_helpers(vendor: str) -> None:
    for name in ATTENTION:
        helper = any(h.lower() in name.lower() for h in HELPERS) or "SplitKVCombine" in name
        rule = tc.tensor_core_rule(name, vendor)
        if helper and not tc.tensor_core_rule(name, vendor, extended=False):
            assert rule == "", (vendor, name)  # no matrix instructions: not counted
    fwd = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false>>"
    assert tc.tensor_core_rule(fwd, NVIDIA) == "tfobs.nvidia.flash_attention"
    assert tc.tensor_core_rule("fmha_fwd_d128_bf16_batch_b128x128x32", AMD) == "tfobs.amd.fmha"
