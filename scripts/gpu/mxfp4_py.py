#!/usr/bin/env python3
"""MXFP4 of one 32-value group on plain Python lists, as the HF gpt-oss checkpoint stores expert
weights (see ../shared/refdata/gpt-oss-20b/MXFP4_NOTES.md and kernels/mxfp4.h): 16 bytes of E2M1
codes, two per byte (low nibble = even element), and one E8M0 scale byte (bias 127):
value = FP4_VALUES[code] * 2^(scale - 127).

Encoding follows what HF's quantize_to_mxfp4 calls (triton_kernels' downcast_to_mxfp_torch with
DequantScaleRoundingMode.ROUND_UP, the OpenAI quantizer): the group's scale is max|v| / 6.0 in
fp32 rounded UP to a power of two (so the largest magnitude fits FP4's 6.0, with the smallest
such scale), each value divided by it is rounded to the nearest E2M1 value with ties away from
zero, and the sign bit is kept (so -0.0, and negatives that round to 0, get code 8). An all-zero
group gets scale byte 0.

Standard library only: the reference for e2e_reference.py's vectorised torch version, and a
self-test that runs anywhere (here without numpy/torch, and on the GPU host).

Usage: python3 scripts/gpu/mxfp4_py.py [--vectors FILE]
       (default tests/data/kernels/mxfp4_test_vectors.derived.json)
Exits 0 when every check passes.
"""
import argparse
import json
import math
import random
import struct
import sys
from pathlib import Path

GROUP = 32        # values per scale
GROUP_BYTES = 16  # two E2M1 codes per byte
SCALE_BIAS = 127  # E8M0: 2^(byte - 127)
FP4_MAX = 6.0
# E2M1 by code: bit 3 = sign, bits 2..1 = exponent, bit 0 = mantissa.
FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
# Half-way points between neighbouring magnitudes: a magnitude m gets the code
# #{t in FP4_MIDPOINTS : m >= t}, i.e. round to nearest with ties away from zero, saturating at 6.
# This is what the downcast's bit arithmetic computes ((exp:2 | top two mantissa bits) + 1) >> 1,
# capped at 7), for normal and subnormal E2M1 alike.
FP4_MIDPOINTS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VECTORS = REPO / "tests" / "data" / "kernels" / "mxfp4_test_vectors.derived.json"


def f32(x):
    """x rounded to fp32 (the quantizer works in fp32)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def scale_byte(values):
    """E8M0 scale byte of a group: max|v| / 6 (an fp32 division) rounded up to a power of two,
    by adding 0x7FFFFF to the fp32 bits and keeping the exponent; 0 for an all-zero group."""
    amax = max(abs(f32(v)) for v in values)
    bits = f32_bits(f32(amax / FP4_MAX))  # double division rounded once: = fp32 division
    return ((bits + 0x7FFFFF) & 0x7F800000) >> 23


def fp4_code(x):
    """E2M1 code of x (already divided by the group's scale)."""
    magnitude = abs(x)
    code = sum(1 for t in FP4_MIDPOINTS if magnitude >= t)
    return code | (8 if math.copysign(1.0, x) < 0 else 0)


def encode_group(values):
    """32 floats -> (16 block bytes, scale byte)."""
    assert len(values) == GROUP, len(values)
    scale = scale_byte(values)
    # 1 / 2^(scale-127) is exact; the quantizer multiplies by 0 when the group is all zeros.
    inverse = math.ldexp(1.0, SCALE_BIAS - scale) if scale else 0.0
    codes = [fp4_code(f32(v) * inverse) for v in values]
    return [codes[2 * i] | (codes[2 * i + 1] << 4) for i in range(GROUP_BYTES)], scale


def decode_group(blocks, scale):
    """16 block bytes + scale byte -> 32 floats (element 2i from byte i's low nibble)."""
    assert len(blocks) == GROUP_BYTES, len(blocks)
    factor = math.ldexp(1.0, scale - SCALE_BIAS)
    out = []
    for b in blocks:
        out.append(FP4_VALUES[b & 0x0F] * factor)
        out.append(FP4_VALUES[b >> 4] * factor)
    return out


def same_float(a, b):
    """Equal including the sign of zero."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# ---------------------------------------------------------------------------------------------
# Self-test


def _json_float(v):
    return -0.0 if v == "-0.0" else float(v)


def check_vectors(path, fail):
    """Decodes every group of the derived vectors (transformers convert_moe_packed_tensors
    semantics: blocks [E, R, G, 16] + scales [E, R, G] -> out [E, G*32, R]) and re-encodes it."""
    data = json.loads(Path(path).read_text())
    lut = [_json_float(v) for v in data["fp4_lut"]]
    if len(lut) != 16 or not all(same_float(a, b) for a, b in zip(lut, FP4_VALUES)):
        fail(f"fp4_lut differs: {data['fp4_lut']}")
    if data["scale_bias"] != SCALE_BIAS:
        fail(f"scale_bias {data['scale_bias']}")
    checks = same_bytes = 0
    for case in data["cases"]:
        experts, rows, groups, _ = case["blocks_shape"]
        if case["expected_shape"] != [experts, groups * GROUP, rows]:
            fail(f"{case['name']}: expected_shape {case['expected_shape']}")
        for e in range(experts):
            for r in range(rows):
                for g in range(groups):
                    blocks = case["blocks"][e][r][g]
                    scale = case["scales"][e][r][g]
                    got = decode_group(blocks, scale)
                    want = [_json_float(case["expected"][e][g * GROUP + k][r])
                            for k in range(GROUP)]
                    for k in range(GROUP):
                        if not same_float(got[k], want[k]):
                            fail(f"{case['name']} e{e} r{r} g{g} k{k}: decoded {got[k]}, "
                                 f"expected {want[k]}")
                    # Re-encoding a decoded group gives back the same values; when the group holds
                    # a +-6 code its scale is forced, so the bytes must match too.
                    blocks2, scale2 = encode_group(got)
                    again = decode_group(blocks2, scale2)
                    if not all(same_float(a, b) for a, b in zip(again, got)):
                        fail(f"{case['name']} e{e} r{r} g{g}: re-encoding changed values")
                    if any((b & 7) == 7 or (b >> 4 & 7) == 7 for b in blocks):
                        same_bytes += 1
                        if (blocks2, scale2) != (list(blocks), scale):
                            fail(f"{case['name']} e{e} r{r} g{g}: re-encoded to {blocks2} "
                                 f"scale {scale2}, stored {blocks} scale {scale}")
                    checks += 1
    if same_bytes == 0:
        fail("no vector group holds a +-6 code: the byte round trip was not exercised")
    return checks


def nearest_magnitude(m):
    """Brute force: the E2M1 magnitude nearest to m, ties to the larger one."""
    best = None
    for v in FP4_VALUES[:8]:
        if best is None or abs(m - v) < abs(m - best) or (abs(m - v) == abs(m - best) and v > best):
            best = v
    return best


def check_encoder(fail):
    checks = 0

    def expect(values, scale, codes=None, label=""):
        nonlocal checks
        blocks, s = encode_group(values)
        if s != scale:
            fail(f"{label}: scale byte {s}, want {scale}")
        if codes is not None:
            got = [b >> (4 * j) & 0xF for b in blocks for j in (0, 1)]
            if got != codes:
                fail(f"{label}: codes {got}, want {codes}")
        checks += 1

    pad = [0.0] * (GROUP - 16)
    expect([0.0] * GROUP, 0, [0] * GROUP, "all zeros")
    expect([-0.0, 0.0] * 16, 0, [8, 0] * 16, "signed zeros")
    # max 6 -> scale 2^0; ties round away from zero, just below a tie rounds down.
    ties = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.2499, 4.999, -0.25, -0.1, -5.0, 7e-9,
            1.0, -6.0]
    expect(ties + pad, 127, [7, 1, 2, 3, 4, 5, 6, 7, 0, 6, 9, 8, 15, 0, 2, 15] + [0] * 16, "ties")
    # max 7 -> 7/6 rounds up to 2: 7/2 = 3.5 is a tie -> 4.0 (code 6); 1.0/2 = 0.5 -> code 1.
    expect([7.0, 1.0] + [0.0] * 30, 128, [6, 1] + [0] * 30, "max 7")
    # max 3: 3/6 = 0.5 is a power of two already, so it is kept (2^-1), and 3/0.5 = 6.
    expect([3.0] + [0.0] * 31, 126, [7] + [0] * 31, "max 3")
    # max 1e-3: 1e-3/6 = 1.67e-4 -> 2^-12 (byte 115).
    expect([1e-3] + [0.0] * 31, 115, None, "max 1e-3")

    # Random groups: the scale is the smallest power of two that fits the max in 6.0, and every
    # code is the nearest E2M1 value (ties away from zero) of value / scale.
    rng = random.Random(0)
    for n in range(500):
        spread = 10 ** rng.uniform(-6, 3)
        values = [f32(rng.gauss(0.0, spread)) for _ in range(GROUP)]
        if n % 7 == 0:
            values[rng.randrange(GROUP)] = -0.0
        blocks, s = encode_group(values)
        scale = math.ldexp(1.0, s - SCALE_BIAS)
        amax = max(abs(v) for v in values)
        if not (amax / scale <= FP4_MAX and amax / (scale / 2) > FP4_MAX):
            fail(f"random group {n}: scale 2^{s - SCALE_BIAS} for max {amax}")
        decoded = decode_group(blocks, s)
        for v, d in zip(values, decoded):
            want = math.copysign(nearest_magnitude(abs(v) / scale), v) * scale
            if not same_float(d, want):
                fail(f"random group {n}: {v} decoded as {d}, want {want}")
        checks += 1
    return checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=Path, default=DEFAULT_VECTORS)
    args = ap.parse_args()
    failures = []

    def fail(msg):
        if len(failures) < 20:
            print("FAIL:", msg)
        failures.append(msg)

    vector_groups = check_vectors(args.vectors, fail)
    encoder_checks = check_encoder(fail)
    status = "FAILED" if failures else "ok"
    print(f"mxfp4_py self-test {status}: {vector_groups} vector groups decoded and re-encoded, "
          f"{encoder_checks} encoder cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
