"""ONNX Runtime int8: dynamic or static QDQ quantization (calibration method, weights per channel), and mixed
precision, the layers `keep_fp32` leaves in fp32: named, or the ones int8 hurts most as measured on the
calibration samples. The measure is ONNX Runtime's QDQ debugger (qdq_loss_debug): every tensor of the float model
beside its value in the QDQ model, and per layer the signal-to-quantization-noise ratio (SQNR) lost between the
layer's input and its output. A ranking is computed once per model, calibration samples and quantization settings
and kept in the store (`.rankings/`); OpenVINO's NNCF builds use the same one (gpux.runtimes.openvino_int8)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from gpux.errors import BuildFailed
from gpux.optional import require
from gpux.runtimes.onnxruntime import OnnxInfo, create_session, optimized, quiet_stderr, save_model
from gpux.runtimes.onnxruntime_fp16 import QUANTIZED_OPS

if TYPE_CHECKING:
    from gpux.arrays import Feeds
    from gpux.runtimes import Context

LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # the layers with weights a quantizer makes int8
ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "HardSigmoid", "Sigmoid")  # the quantizer may fold these into the layer
METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}  # -> CalibrationMethod
# histogram bins of entropy calibration (TensorRT's recipe): quantize_static's own (128 bins, 128 quantized bins)
# leave the KL search one candidate, the whole range, so its entropy ranges equal minmax's
ENTROPY_BINS = {"num_bins": 2048, "num_quantized_bins": 128}
RANKED_BY = ("ONNX Runtime qdq_loss_debug on the calibration samples: SQNR (dB) of each layer's input and output, "
             "QDQ model vs float model; a layer's sensitivity is the SQNR it loses")
RANKING_SHOWN = 50  # the most sensitive layers an artifact's info lists


class LayerLoss(TypedDict):
    """One quantizable layer's SQNR (dB) at its input and output, QDQ model vs float model, and what it loses."""

    layer: str
    in_db: float
    out_db: float
    lost_db: float


class RankedOn(TypedDict):
    samples: int  # calibration samples the ranking was measured on
    digest: str  # their samples_digest


class Ranking(TypedDict):
    """The quantizable layers, most sensitive first, and what they were ranked on (kept in `.rankings/`)."""

    layers: list[LayerLoss]
    ranked_on: RankedOn


class Kept(TypedDict):
    """What `keep_fp32` left in fp32, as an artifact's info records it (a count or fraction: with its ranking;
    OpenVINO: the IR's operations those layers are)."""

    asked: int | float | list[str]
    kept: list[str]
    of: int  # quantizable layers in the model
    ranked_by: NotRequired[str]
    ranked_on: NotRequired[RankedOn]
    ranking: NotRequired[list[LayerLoss]]
    openvino_ops: NotRequired[list[str]]
    not_in_ir: NotRequired[list[str]]


class Int8Key(TypedDict):
    mode: str
    per_channel: bool
    method: str


class Int8Effect(TypedDict):
    """What quantization did: int8 operators put in, size after / before, and a warning where it did nothing."""

    quantized_ops: int
    size_ratio: float | None
    int8_warning: NotRequired[str]


class Int8Info(OnnxInfo):
    """An int8 ONNX artifact's info: what quantization did, and the layers `keep_fp32` left in fp32."""

    quantized_ops: int
    size_ratio: float | None
    int8_warning: NotRequired[str]
    keep_fp32: NotRequired[Kept]


@dataclass(frozen=True)
class Int8:
    """How ONNX Runtime quantizes: dynamic or static (QDQ), weights per channel, the calibration method, and
    the layers (node names) left in fp32."""

    mode: str = "static"
    per_channel: bool = False
    method: str = "minmax"
    exclude: tuple[str, ...] = ()

    def key(self) -> Int8Key:
        return {"mode": self.mode, "per_channel": self.per_channel, "method": self.method}


def build_int8(ctx: Context) -> Int8Info:
    """The int8 ONNX artifact: quantized (with `keep_fp32`'s layers left in fp32), then optimized offline."""
    opts = ctx.target.options
    how = Int8(opts.get("quantization", "dynamic"), bool(opts.get("per_channel")),
               opts.get("calibration_method", "minmax"))
    feeds = ctx.calibration() if how.mode == "static" else None
    pre = pre_processed(ctx.src, ctx.workdir / "pre.onnx", ctx.log)
    record = None
    if opts.get("keep_fp32"):
        layers = quantizable(pre)
        record = kept(ctx, opts["keep_fp32"], layers, lambda: ranking(ctx, pre, how, feeds or []),
                      f"providers.{ctx.target.provider}.keep_fp32")
        how = replace(how, exclude=tuple(record["kept"]))
    int8 = ctx.workdir / "int8.onnx"
    quantize(pre, int8, how, feeds, ctx.log)
    if pre != ctx.src:
        for p in (pre, pre.with_name(pre.name + ".data")):
            p.unlink(missing_ok=True)
    effect = int8_effect(ctx, int8)
    info: Int8Info = {**optimized(ctx, int8), **effect}
    if record is not None:
        info["keep_fp32"] = record
    return info


def quantize(pre: Path, dst: Path, how: Int8, calibration: Sequence[Feeds] | None = None,
             log: Callable[[str], None] | None = None) -> None:
    """ONNX Runtime's int8 quantization of a pre-processed model: dynamic (weights) or static QDQ calibrated on
    `calibration`, leaving `how.exclude` in fp32. The quantizer's own output goes to `log` (shown with -v)."""
    import tempfile

    q = require("onnxruntime.quantization", "cpu")
    method = getattr(q.CalibrationMethod, METHODS[how.method])
    with quiet_stderr(log, "onnxruntime.quantization"), tempfile.TemporaryDirectory() as tmp:
        if how.mode == "dynamic":
            q.quantize_dynamic(str(pre), str(dst), weight_type=q.QuantType.QInt8, per_channel=how.per_channel,
                               nodes_to_exclude=list(how.exclude))
            return
        ranges = _entropy_ranges(pre, calibration or [], Path(tmp)) if how.method == "entropy" else None
        q.quantize_static(str(pre), str(dst), _Reader(list(calibration or [])), quant_format=q.QuantFormat.QDQ,
                          per_channel=how.per_channel, activation_type=q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8, nodes_to_exclude=list(how.exclude), calibrate_method=method,
                          calibration_cache_path=ranges)


def _entropy_ranges(pre: Path, calibration: Sequence[Feeds], tmp: Path) -> Path:
    """Entropy calibration's ranges over ENTROPY_BINS, computed as quantize_static would (the same calibrator on
    the same operator types) and saved as its calibration cache."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator, save_tensors_data
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    calibrator = create_calibrator(pre, list(set(QLinearOpsRegistry) | set(QDQRegistry)),
                                   augmented_model_path=str(tmp / "augmented.onnx"),
                                   calibrate_method=CalibrationMethod.Entropy, extra_options=ENTROPY_BINS)
    calibrator.collect_data(_Reader(list(calibration)))
    calibrator.collector.get_entropy_threshold = entropy_threshold  # the same search, without its Python loops
    out = tmp / "ranges.json"
    save_tensors_data(calibrator.compute_data(), out)
    return out


def entropy_threshold(histogram: tuple[Any, ...], num_quantized_bins: int) -> tuple[Any, Any]:
    """HistogramCollector.get_entropy_threshold of ONNX Runtime's calibrator (TensorRT's KL search over the candidate
    ranges of one tensor's histogram) giving the same range: its per-bin sums in Python (about a second a tensor at
    2048 bins) done as array sums; its smoothing and divergence are its own functions."""
    import numpy as np
    from onnxruntime.quantization.calibrate import entropy
    from onnxruntime.quantization.quant_utils import smooth_distribution

    hist, edges = histogram[0], histogram[1]
    bins, zero, half = hist.size, hist.size // 2, num_quantized_bins // 2
    below = np.concatenate(([0], np.cumsum(hist)))  # below[k]: the count in hist[:k]
    kl = np.zeros(zero - half + 1)
    for i in range(half, zero + 1):
        start, end = zero - i, min(zero + i + 1, bins)
        sliced = hist[start:end]
        p = sliced.copy()
        p[0] += below[start]
        p[-1] += below[-1] - below[end]
        merged = sliced.size // num_quantized_bins
        whole = num_quantized_bins * merged
        quantized = sliced[:whole].reshape(num_quantized_bins, merged).sum(1)
        quantized[-1] += sliced[whole:].sum()
        norm = (p[:whole] != 0).reshape(num_quantized_bins, merged).sum(1)
        q = np.zeros(p.size, dtype=np.int64)
        q[:whole] = np.repeat(np.where(norm != 0, quantized / np.maximum(norm, 1), 0).astype(np.int64), merged)
        ps, qs = smooth_distribution(p), smooth_distribution(q)
        kl[i - half] = np.inf if ps is None or qs is None else np.array(entropy(ps, qs), dtype=edges.dtype)
    best = int(np.argmin(kl))
    low, high = edges[zero - half - best], edges[min(zero + half + best + 1, bins)]
    return (histogram[2] if low < histogram[2] else low), (histogram[3] if high > histogram[3] else high)


def pre_processed(src: Path, dst: Path, log: Callable[[str], None] | None = None) -> Path:
    """ONNX Runtime's pre-processing before quantization (shape inference, constant folding of weights that
    exporters such as Paddle's write as Constant nodes): with symbolic shape inference, else without it (it fails
    on some exported models), else the source as it is; layers without a name are named `OPTYPE_INDEX` (the
    quantizer leaves layers out by name)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = src
    with quiet_stderr(log, "onnxruntime.quantization"):
        for skip in (False, True):
            try:
                quant_pre_process(str(src), str(dst), skip_symbolic_shape=skip)
                out = dst
                break
            except Exception:  # an optimisation: try the next way
                continue
    onnx = require("onnx")
    model = onnx.load(str(out))
    nameless = [(i, n) for i, n in enumerate(model.graph.node) if n.op_type in LAYER_OPS and not n.name]
    if not nameless:
        return out
    for i, n in nameless:
        n.name = f"{n.op_type}_{i}"
    save_model(model, dst)
    return dst


class _Reader:
    """CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: list[Feeds]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> Feeds | None:
        return next(self._it, None)


def quantizable(model: Path) -> list[str]:
    """The names of the layers a quantizer makes int8 (LAYER_OPS), in graph order."""
    onnx = require("onnx")
    graph = onnx.load(str(model), load_external_data=False).graph
    return [n.name for n in graph.node if n.op_type in LAYER_OPS]


def kept(ctx: Context, keep: int | float | list[str], layers: list[str], rank: Callable[[], Ranking], field: str,
         aliases: Sequence[str] = ()) -> Kept:
    """The layers `keep` (a count, a fraction of `layers`, or names: layer names or `aliases`) leaves in fp32,
    with the ranking a count or fraction was taken from; an unknown name is a build failure naming the field."""
    if isinstance(keep, list):
        unknown = [k for k in keep if k not in layers and k not in aliases]
        if unknown:
            raise BuildFailed(f"{field}: no quantizable layer named {unknown[0]!r} in {ctx.src.name} (it has "
                              f"{len(layers)}: {', '.join(layers[:3])}, ...)",
                              hint="name ONNX nodes of type " + ", ".join(LAYER_OPS) + ", or give a count",
                              conversion=False)  # the config, not the runtime: not remembered
        return {"asked": keep, "kept": list(keep), "of": len(layers)}
    count = keep if isinstance(keep, int) else math.ceil(keep * len(layers))
    ranked = rank()
    names = [r["layer"] for r in ranked["layers"]]
    ctx.log(f"{ctx.target.id}: layers int8 hurts most (SQNR lost): "
            + ", ".join(f"{r['layer']} {r['lost_db']:.1f} dB" for r in ranked["layers"][:min(count, 10)])
            + (f" and {count - 10} more" if count > 10 else ""))
    return {"asked": keep, "kept": names[:count], "of": len(layers), "ranked_by": RANKED_BY,
            "ranked_on": ranked["ranked_on"], "ranking": ranked["layers"][:RANKING_SHOWN]}


def ranking(ctx: Context, pre: Path, how: Int8, feeds: list[Feeds]) -> Ranking:
    """The quantizable layers of `pre`, most sensitive first, as quantizing it `how` on `feeds` makes them
    ({layer, in_db, out_db, lost_db}), and what they were ranked on; kept in the store, keyed by the source
    model, the samples and the settings."""
    from gpux.files import atomic_write_text, sha256_file

    if not feeds:
        raise BuildFailed(f"{ctx.target.id}: keep_fp32 as a count or fraction ranks layers on calibration "
                          "samples, and there are none", hint="declare calibration data, or name the layers")
    data = samples_digest(feeds)
    parts = {"source": sha256_file(ctx.src), "samples": data, "how": how.key(), "by": RANKED_BY,
             "onnxruntime": require("onnxruntime").__version__}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]
    store = ctx.workdir.parent.parent if ctx.workdir.parent.name == ".tmp" else None  # <store>/.tmp/<build>
    cached = store / ".rankings" / f"{key}.json" if store is not None else None
    if cached is not None and cached.is_file():
        ctx.log(f"{ctx.target.id}: layer ranking from {cached}")
        kept_ranking: Ranking = json.loads(cached.read_text())  # as written below
        return kept_ranking
    ctx.log(f"{ctx.target.id}: ranking layers by int8 sensitivity on {len(feeds)} calibration samples ...")
    out: Ranking = {"layers": measure(pre, how, feeds, ctx.log),
                    "ranked_on": {"samples": len(feeds), "digest": data}}
    if cached is not None:
        atomic_write_text(cached, json.dumps(out))
    return out


def samples_digest(feeds: Sequence[Feeds]) -> str:
    """A digest of samples in order: names, dtypes, shapes and bytes."""
    import numpy as np

    h = hashlib.sha256()
    for feed in feeds:
        for name in sorted(feed):
            a = np.ascontiguousarray(feed[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def measure(pre: Path, how: Int8, feeds: list[Feeds], log: Callable[[str], None] | None) -> list[LayerLoss]:
    """Quantize `pre` fully, run it and the float model on `feeds` with every tensor as an output (the QDQ
    debugger's augmented models), and rank the layers by the SQNR they lose: their output's less their input's."""
    import tempfile

    from onnxruntime.quantization import qdq_loss_debug as dbg

    with tempfile.TemporaryDirectory() as tmp:  # in the build's scratch folder
        qdq, aug_f, aug_q = (Path(tmp) / f"{n}.onnx" for n in ("qdq", "float-all", "qdq-all"))
        quantize(pre, qdq, replace(how, exclude=()), feeds, log)
        with quiet_stderr(log, "onnxruntime.quantization"):
            dbg.modify_model_output_intermediate_tensors(str(pre), str(aug_f))
            dbg.modify_model_output_intermediate_tensors(str(qdq), str(aug_q))
        db = sqnr_db(aug_f, aug_q, feeds)
    onnx = require("onnx")
    graph = onnx.load(str(pre), load_external_data=False).graph
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    rows: list[LayerLoss] = []
    for n in graph.node:
        if n.op_type not in LAYER_OPS:
            continue
        out = n.output[0]
        after = consumers.get(out, [])
        if out not in db and len(after) == 1 and after[0].op_type in ACTIVATIONS:  # folded into the layer
            out = after[0].output[0]
        if out in db:
            before = db.get(n.input[0], SQNR_CAP)
            rows.append({"layer": n.name, "in_db": round(before, 2), "out_db": round(db[out], 2),
                         "lost_db": round(before - db[out], 2)})
    return sorted(rows, key=lambda r: -r["lost_db"])


SQNR_CAP = 100.0  # dB: a tensor with no quantization noise


def sqnr_db(float_model: Path, qdq_model: Path, feeds: list[Feeds]) -> dict[str, float]:
    """SQNR in dB of every tensor of the float model against its value in the QDQ model (after its
    DequantizeLinear where it is quantized), pooled over `feeds` one sample at a time."""
    import numpy as np
    from onnxruntime.quantization import qdq_loss_debug as dbg
    from onnxruntime.quantization.quant_utils import DEQUANT_OUTPUT_SUFFIX

    saved = getattr(dbg, "_TENSOR_SAVE_POSTFIX", "_ReshapedSavedOutput")
    f, q = (create_session(p, "CPUExecutionProvider", None, level="disabled") for p in (float_model, qdq_model))
    sums: dict[str, list[float]] = {}
    for feed in feeds:
        got_f = dict(zip(f.output_names, f.session.run(None, feed), strict=True))
        got_q = dict(zip(q.output_names, q.session.run(None, feed), strict=True))
        for name, value in got_f.items():
            if not name.endswith(saved):
                continue
            tensor = name[:-len(saved)]
            other = got_q.get(tensor + DEQUANT_OUTPUT_SUFFIX + saved, got_q.get(name))
            if other is None or other.shape != value.shape:
                continue
            s = sums.setdefault(tensor, [0.0, 0.0])
            s[0] += float(np.sum(np.square(value, dtype=np.float64)))
            s[1] += float(np.sum(np.square(value.astype(np.float64) - other)))
    return {t: SQNR_CAP if noise <= 0 else min(SQNR_CAP, 10 * math.log10(max(signal, 1e-30) / noise))
            for t, (signal, noise) in sums.items()}


def int8_effect(ctx: Context, quantized: Path) -> Int8Effect:
    """How many int8 operators quantization put in and how the size changed; a quantization that did
    nothing (no int8 operator, or a bigger model) is a warning, a failure under --strict."""
    onnx = require("onnx")
    model = onnx.load(str(quantized), load_external_data=False)
    ops = sum(1 for n in model.graph.node if n.op_type in QUANTIZED_OPS)

    def size(p: Path) -> int:
        return sum(f.stat().st_size for f in (p, p.with_name(p.name + ".data")) if f.is_file()) + \
            sum(f.stat().st_size for f in p.parent.glob(p.name + "*.data") if f.name != p.name + ".data")

    before, after = size(ctx.src), size(quantized)
    out: Int8Effect = {"quantized_ops": ops, "size_ratio": round(after / before, 4) if before else None}
    from gpux.runtimes import NOTHING_QUANTIZED, int8_did_nothing

    problem = NOTHING_QUANTIZED if ops == 0 else \
        f"the int8 model is larger than its source ({after} vs {before} bytes)" if after > before else ""
    if int8_did_nothing(ctx, problem):
        out["int8_warning"] = problem
    return out
