#!/usr/bin/env python3
"""Plots decodebench result files (schema decodebench/result/v1) as PNG.

  scripts/plot.py roofline OUT.png FILES...
      median TPOT (ms) against bytes per token (GB), one labelled point per run, p10..p90
      error bars, marker shape by kernel family, filled = graph on, hollow = graph off, and
      the floor TPOT = bytes / measured read bandwidth of every device.
  scripts/plot.py position OUT.png FILES...
      TPOT against position (KV depth) of each timed step, averaged over the repetitions
      (band: min..max over them), one line per run: how TPOT grows with the KV cache.
  scripts/plot.py batch OUT.png FILES...
      TPOT (left) and tokens/s of all sequences together (right) against the batch
      (config.batch; a result without it is batch 1), one line per model, kernel and setting,
      with its bandwidth floor (dashed) and compute floor (dotted). Prints each line's knee
      on stdout: the first batch whose TPOT is at least 1.5x its batch-1 TPOT, with its
      multiple there and at the batch before, beside the first batch whose floor is (the
      knee the two floors predict).
  scripts/plot.py context OUT.png FILES...
      TPOT against the KV depth (config.context), one line per model, weights, KV cache
      scheme (config.kv_cache; a result without it is fp16), kernel and setting, with its
      bandwidth floor (dashed): a context sweep over --kv-cache fp16,fp8,int8 draws each
      scheme and the floor its bytes set. Prints each line from its least context to its
      largest, and where it has a context-0 run, its KV part (TPOT minus context 0's) and the
      rate it streams the KV bytes at (their growth over the KV part) against the measured
      read bandwidth.
  scripts/plot.py energy OUT.png FILES...
      Joules per token (median; bars the least and largest repetition) against the bytes a
      token reads (bytes per step / batch), one point per run as in roofline (left); and
      against the batch, one line per model, kernel and setting, with its TPOT dashed on the
      right-hand axis (right): J/token falls with the batch while TPOT rises. Runs without
      energy figures (energy.reason says why) are left out with one line on stderr each;
      with none at all the exit is 2. Prints each line's J/token and TPOT from its smallest
      batch to its largest.

FILES hold one result object, a JSON array of them, or JSONL (what `decodebench run -o`
and `decodebench report` write). The PNG is written to OUT.png.tmp, then renamed.
Exit codes: 0 success; 2 bad command line, unreadable file or not a v1 result (one line
on stderr); 1 matplotlib missing or the PNG could not be written.
Needs matplotlib (Debian: python3-matplotlib, installed by scripts/install_deps.sh); where
the python3 on PATH lacks it, the script runs itself again with /usr/bin/python3.
"""

import json
import math
import os
import statistics
import sys

SCHEMA = "decodebench/result/v1"
PROG = "plot.py"

# Kernel family (the part of config.kernel after the scheme) -> marker, legend text.
FAMILIES = [
    ("gemv", "o", "gemv (fast, auto)"),
    ("cublas", "D", "cublas"),
    ("naive", "^", "naive (slow path)"),
    ("dequant-cublas", "s", "dequant-cublas (slow path)"),
    ("cpu.reference", "P", "cpu.reference"),
]
OTHER_MARKER = "X"
SCHEME_COLORS = {"fp16": "tab:blue", "int8": "tab:orange", "int4": "tab:green"}
# Lines of the context plot, by KV cache scheme.
KV_COLORS = {"fp16": "tab:blue", "fp8": "tab:red", "int8": "tab:green"}
OTHER_COLOR = "tab:purple"
# Lines of the position plot, one per run.
LINE_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]


class InputError(Exception):
    """Bad command line or bad input: exit 2."""


def fail(msg, code):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------- reading

def parse_results(path):
    """The result objects in `path`: one object, an array of objects, or JSONL."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a decodebench result file (not UTF-8 text)")
    if not text.strip():
        raise InputError(f"{path}: empty file, no results")
    try:
        doc = json.loads(text)
        objs = doc if isinstance(doc, list) else [doc]
    except ValueError as whole_err:
        objs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objs.append(json.loads(line))
            except ValueError:
                # A single-line file or a broken first line: report the whole-file error.
                where = whole_err if len(objs) == 0 else f"line {n}: not JSON"
                raise InputError(f"{path}: not JSON, a JSON array or JSONL ({where})")
    if not objs:
        raise InputError(f"{path}: an empty array, no results")
    runs = []
    for i, obj in enumerate(objs):
        where = path if len(objs) == 1 else f"{path}: result {i + 1}"
        runs.append(check_result(obj, where))
    return runs


def field(obj, dotted, where, kind):
    cur = obj
    for key in dotted.split("."):
        if not isinstance(cur, dict) or key not in cur:
            raise InputError(f"{where}: missing field {dotted} (not a {SCHEMA} result)")
        cur = cur[key]
    ok = {
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "num": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
        "numornull": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
        "list": lambda v: isinstance(v, list),
    }[kind]
    if not ok(cur):
        raise InputError(f"{where}: field {dotted} is not a {'finite number' if kind == 'num' else kind} "
                         f"(not a {SCHEMA} result)")
    return cur


def check_result(obj, where):
    if not isinstance(obj, dict):
        raise InputError(f"{where}: not a JSON object (not a {SCHEMA} result)")
    schema = obj.get("schema")
    if schema != SCHEMA:
        raise InputError(f"{where}: schema is {json.dumps(schema)}, this script reads {SCHEMA}")
    r = {"where": where}
    r["device_name"] = field(obj, "device.name", where, "str")
    r["device_uuid"] = obj.get("device", {}).get("uuid") or ""
    r["backend"] = field(obj, "device.backend", where, "str")
    r["peak_GBps"] = field(obj, "device.peak_read_GBps", where, "numornull")
    r["model"] = field(obj, "config.model", where, "str")
    r["scheme"] = field(obj, "config.scheme", where, "str")
    r["kernel"] = field(obj, "config.kernel", where, "str")
    # Added with --kv-cache: a result from before it ran an fp16 cache.
    r["kv_cache"] = optional_field(obj, "config.kv_cache", where, "str", "fp16")
    r["graph"] = field(obj, "config.graph", where, "bool")
    r["sync"] = field(obj, "config.sync_per_token", where, "bool")
    r["context"] = field(obj, "config.context", where, "int")
    r["tokens"] = field(obj, "config.tokens", where, "int")
    r["repeat"] = field(obj, "config.repeat", where, "int")
    r["bytes"] = field(obj, "bytes.per_token.total", where, "int")
    r["median"] = field(obj, "timing.tpot_ms.median", where, "num")
    r["p10"] = field(obj, "timing.tpot_ms.p10", where, "num")
    r["p90"] = field(obj, "timing.tpot_ms.p90", where, "num")
    r["samples"] = field(obj, "timing.samples_ms", where, "list")
    # Fields added with --batch; a result from before them is batch 1 with a bandwidth floor.
    r["batch"] = optional_field(obj, "config.batch", where, "int", 1)
    if r["batch"] < 1:
        raise InputError(f"{where}: field config.batch is {r['batch']}, not a batch (at least 1)")
    r["floor"] = field(obj, "roofline.floor_tpot_ms", where, "numornull")
    r["bw_floor"] = optional_field(obj, "roofline.bandwidth_floor_tpot_ms", where, "numornull", r["floor"])
    r["compute_floor"] = optional_field(obj, "roofline.compute_floor_tpot_ms", where, "numornull", 0)
    # Added later: the path each kind of matrix takes at batch > 1 ("gate_up [28672 x 4096]:
    # skinny-gemm"), by matrix; empty where the result has none.
    r["paths"] = batched_paths(optional_field(obj, "config.batched_paths", where, "list", []))
    # Energy, added later: a result from before it did not measure any.
    r["energy_reason"] = optional_field(obj, "energy.reason", where, "str", "not measured")
    r["j_per_token"] = optional_field(obj, "energy.j_per_token.median", where, "numornull", None)
    r["j_per_token_min"] = optional_field(obj, "energy.j_per_token.min", where, "numornull", None)
    r["j_per_token_max"] = optional_field(obj, "energy.j_per_token.max", where, "numornull", None)
    r["power_w"] = optional_field(obj, "energy.power_w.median", where, "numornull", None)
    return r


def batched_paths(lines):
    """config.batched_paths as {matrix: path}; an entry of another form is skipped."""
    out = {}
    for line in lines:
        if isinstance(line, str) and " [" in line and "]: " in line:
            out[line.split(" [", 1)[0]] = line.split("]: ", 1)[1]
    return out


def optional_field(obj, dotted, where, kind, default):
    """A field added to v1 later: `default` where the result predates it."""
    cur = obj
    for key in dotted.split("."):
        if not isinstance(cur, dict) or key not in cur:
            return default
        cur = cur[key]
    return field(obj, dotted, where, kind)


def read_all(files):
    runs = []
    for path in files:
        runs.extend(parse_results(path))
    return runs


def family(kernel):
    """'int4.dequant-cublas' -> 'dequant-cublas'; 'cpu.reference' stays whole."""
    if kernel == "cpu.reference":
        return kernel
    return kernel.split(".", 1)[1] if "." in kernel else kernel


def marker_of(kernel):
    fam = family(kernel)
    for name, marker, _ in FAMILIES:
        if name == fam:
            return marker
    return OTHER_MARKER


def label_of(r):
    label = f"{r['model']} {r['kernel']}"
    if r["kv_cache"] != "fp16":
        label += f" KV {r['kv_cache']}"
    if r["sync"]:
        label += " sync-per-token"
    if r["context"]:
        label += f" @{r['context']}"
    return label


def device_key(r):
    return (r["backend"], r["device_name"], r["device_uuid"])


def device_names(runs):
    names = []
    for r in runs:
        if r["device_name"] not in names:
            names.append(r["device_name"])
    return ", ".join(names)


# ----------------------------------------------------------------------------- drawing

def save(fig, out):
    tmp = out + ".tmp"
    try:
        fig.savefig(tmp, format="png", dpi=fig.dpi)
        os.replace(tmp, out)
    except Exception as e:  # noqa: BLE001 - any failure: one line, no file left behind
        try:
            os.remove(tmp)
        except OSError:
            pass
        fail(f"{out}: cannot write the PNG: {getattr(e, 'strerror', None) or e}", 1)


def overlaps(box, boxes, pad=2.0):
    for b in boxes:
        if (box.x0 - pad < b.x1 and b.x0 - pad < box.x1 and
                box.y0 - pad < b.y1 and b.y0 - pad < box.y1):
            return True
    return False


def place_labels(fig, ax, items, obstacles):
    """Greedy label placement: each (x, y, text) gets the first offset, nearest first, whose
    box overlaps neither an earlier label, a marker, nor leaves the axes. Far offsets get a
    leader line."""
    renderer = fig.canvas.get_renderer()
    axbox = ax.get_window_extent(renderer)
    placed = []
    # Offsets in points: (dx, dy, ha, va); nearest first.
    near = [(7, 0, "left", "center"), (-7, 0, "right", "center"),
            (6, 7, "left", "bottom"), (6, -7, "left", "top"),
            (-6, 7, "right", "bottom"), (-6, -7, "right", "top")]
    far = []
    for dist in (16, 28, 42, 58):
        for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1.6, 0.35), (1.6, -0.35),
                       (-1.6, 0.35), (-1.6, -0.35), (0, 1.1), (0, -1.1)):
            ha = "left" if dx > 0 else ("right" if dx < 0 else "center")
            va = "bottom" if dy > 0 else "top"
            far.append((dx * dist, dy * dist, ha, va))
    for x, y, text in items:
        chosen = None
        for i, (dx, dy, ha, va) in enumerate(near + far):
            arrow = dict(arrowstyle="-", color="0.45", lw=0.6, shrinkA=0, shrinkB=3) if i >= len(near) else None
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                            fontsize=8, arrowprops=arrow, zorder=5)
            box = t.get_window_extent(renderer)
            inside = (box.x0 >= axbox.x0 + 2 and box.x1 <= axbox.x1 - 2 and
                      box.y0 >= axbox.y0 + 2 and box.y1 <= axbox.y1 - 2)
            if inside and not overlaps(box, placed) and not overlaps(box, obstacles):
                chosen = t
                placed.append(box)
                break
            t.remove()
        if chosen is None:  # nowhere free: right of the point, overlapping
            t = ax.annotate(text, (x, y), xytext=(7, 0), textcoords="offset points",
                            ha="left", va="center", fontsize=8, zorder=5)
            placed.append(t.get_window_extent(renderer))


def plot_roofline(runs, out):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import Bbox

    fig, ax = plt.subplots(figsize=(12, 8), dpi=110)
    ax.set_xscale("log")
    ax.set_yscale("log")

    xs = [r["bytes"] / 1e9 for r in runs]
    lo_x, hi_x = min(xs) / 1.5, max(xs) * 1.6
    ys = [r["p10"] for r in runs] + [r["p90"] for r in runs]

    # Floors, one per device: TPOT (ms) = GB / (GB/s) * 1000, at the median measured bandwidth.
    devices = {}
    for r in runs:
        if r["peak_GBps"] is not None and math.isfinite(r["peak_GBps"]) and r["peak_GBps"] > 0:
            devices.setdefault(device_key(r), []).append(r["peak_GBps"])
    names = [k[1] for k in devices]
    floor_styles = ["-", "--", "-.", ":"]
    handles_floor = []
    fracs = []
    for i, (key, bws) in enumerate(devices.items()):
        bw = statistics.median(bws)
        name = key[1] if names.count(key[1]) == 1 else f"{key[1]} {key[2][:12]}"
        spread = f", runs {min(bws):.0f}-{max(bws):.0f}" if len(bws) > 1 and max(bws) - min(bws) >= 1 else ""
        fx = [lo_x, hi_x]
        fy = [x / bw * 1000 for x in fx]
        ys += [x / bw * 1000 for x in xs]
        h, = ax.plot(fx, fy, color="black", lw=1.3, ls=floor_styles[i % len(floor_styles)], zorder=1,
                     label=f"floor at {bw:.0f} GB/s ({name}{spread})" if bw >= 100 else
                     f"floor at {bw:.3g} GB/s ({name})")
        handles_floor.append(h)
        if i == 0:  # fractions of the floor, faint: where efficiency 0.5, 0.25, 0.1 lie
            for frac in (0.5, 0.25, 0.1):
                ax.plot(fx, [y / frac for y in fy], color="0.75", lw=0.8, ls=":", zorder=0)
                fracs.append((frac, bw))

    ax.set_xlim(lo_x, hi_x)
    y_lo, y_hi = min(ys) / 1.5, max(ys) * 1.5
    ax.set_ylim(y_lo, y_hi)

    # Points.
    for r, x in zip(runs, xs):
        color = SCHEME_COLORS.get(r["scheme"], OTHER_COLOR)
        ax.errorbar([x], [r["median"]], yerr=[[r["median"] - r["p10"]], [r["p90"] - r["median"]]],
                    fmt="none", ecolor=color, elinewidth=1.0, capsize=3, zorder=2)
        ax.plot([x], [r["median"]], marker=marker_of(r["kernel"]), markersize=8, ls="none",
                markeredgecolor=color, markeredgewidth=1.5,
                markerfacecolor=color if r["graph"] else "white", zorder=3)

    ax.set_xlabel("bytes per token (GB, bytes.per_token.total)")
    ax.set_ylabel("TPOT (ms per token, median; bars p10..p90)")
    ax.set_title(f"Decode TPOT vs bytes per token, batch 1: {device_names(runs)}")
    ax.grid(True, which="major", color="0.88", lw=0.8)
    ax.grid(True, which="minor", color="0.95", lw=0.5)
    from matplotlib.ticker import FuncFormatter, LogLocator
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))

    # Legend: floors, schemes (colour), kernel families (shape), graph (fill).
    present_fams = []
    for r in runs:
        fam = family(r["kernel"])
        if fam not in present_fams:
            present_fams.append(fam)
    handles = list(handles_floor)
    for scheme, color in SCHEME_COLORS.items():
        if any(r["scheme"] == scheme for r in runs):
            handles.append(Line2D([], [], ls="none", marker="o", markersize=8, color=color,
                                  label=f"{scheme} weights (colour)"))
    for name, marker, text in FAMILIES:
        if name in present_fams:
            handles.append(Line2D([], [], ls="none", marker=marker, markersize=8, color="0.3",
                                  label=f"kernel {text}"))
    if any(marker_of(r["kernel"]) == OTHER_MARKER for r in runs):
        handles.append(Line2D([], [], ls="none", marker=OTHER_MARKER, markersize=8, color="0.3",
                              label="kernel, other"))
    if any(r["graph"] for r in runs):
        handles.append(Line2D([], [], ls="none", marker="o", markersize=8, color="0.3",
                              label="filled: CUDA Graph on"))
    if any(not r["graph"] for r in runs):
        handles.append(Line2D([], [], ls="none", marker="o", markersize=8, color="0.3",
                              markerfacecolor="white", markeredgewidth=1.5, label="hollow: graph off (eager)"))
    ax.legend(handles=handles, loc="upper left", fontsize=8.5, framealpha=0.95)

    # Labels: every run when there are few; when crowded, the graph-on runs and the slow
    # paths only (each graph-off run sits just above its graph-on twin).
    crowded = len(runs) > 12
    items, seen = [], set()
    for r, x in sorted(zip(runs, xs), key=lambda t: (t[1], t[0]["median"])):
        slow = family(r["kernel"]) not in ("gemv", "cpu.reference")
        if crowded and not (r["graph"] or slow):
            continue
        text = label_of(r) + ("" if r["graph"] else " (graph off)")
        if (text, x, r["median"]) not in seen:
            seen.add((text, x, r["median"]))
            items.append((x, r["median"], text))

    caption = (f"{len(runs)} runs. Floor: no step can be faster than its bytes read at the bandwidth "
               "measured in the same process (device.peak_read_GBps, median over the runs).")
    if crowded:
        caption += ("\nLabelled: graph-on runs and slow kernels; each unlabelled hollow marker is the graph-off "
                    "run of the filled marker just below it.")
    fig.text(0.01, 0.01, caption, fontsize=8, color="0.3", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.05 if crowded else 0.03, 1, 1))
    fig.canvas.draw()
    obstacles = []
    for r, x in zip(runs, xs):
        px, py = ax.transData.transform((x, r["median"]))
        obstacles.append(Bbox.from_extents(px - 6, py - 6, px + 6, py + 6))
    renderer = fig.canvas.get_renderer()
    leg = ax.get_legend().get_window_extent(renderer)
    obstacles.append(leg)
    axbox = ax.get_window_extent(renderer)
    for frac, bw in fracs:  # label each fraction line near where it leaves the axes, off the legend
        x = min(hi_x, y_hi * bw * frac / 1000)
        while x > lo_x * 1.3:
            t = ax.annotate(f"{frac:.0%} of floor", (x, x / bw * 1000 / frac), xytext=(-4, 2),
                            textcoords="offset points", ha="right", va="bottom", fontsize=7.5, color="0.5")
            box = t.get_window_extent(renderer)
            if box.y1 <= axbox.y1 - 2 and box.x0 >= axbox.x0 + 2 and not overlaps(box, [leg]):
                obstacles.append(box)
                break
            t.remove()
            x /= 1.08
    place_labels(fig, ax, items, obstacles)
    save(fig, out)


def plot_position(runs, out):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    # The roofline's scheme colour for the first run of each scheme, then the other colours.
    colors, used = [], set()
    spare = [c for c in LINE_COLORS if c not in SCHEME_COLORS.values()]
    for r in runs:
        c = SCHEME_COLORS.get(r["scheme"])
        if c is None or c in used:
            c = spare.pop(0) if spare else LINE_COLORS[len(colors) % len(LINE_COLORS)]
        used.add(c)
        colors.append(c)
    for i, r in enumerate(runs):
        n, reps, s = r["tokens"], r["repeat"], r["samples"]
        if n <= 0 or reps <= 0 or len(s) != n * reps:
            raise InputError(f"{r['where']}: timing.samples_ms holds {len(s)} values, not "
                             f"config.repeat x config.tokens = {reps} x {n}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in s):
            raise InputError(f"{r['where']}: timing.samples_ms holds a value that is not a finite number")
        pos = [r["context"] + j for j in range(n)]
        per_pos = [[s[k * n + j] for k in range(reps)] for j in range(n)]
        mean = [sum(v) / reps for v in per_pos]
        color = colors[i]
        slope = ""
        if n >= 2:  # least-squares growth per position
            mx, my = sum(pos) / n, sum(mean) / n
            sxx = sum((p - mx) ** 2 for p in pos)
            if sxx > 0:
                b = sum((p - mx) * (m - my) for p, m in zip(pos, mean)) / sxx
                slope = f", {b * 1000:+.2f} \u00b5s/position"
        label = label_of(r) + ("" if r["graph"] else " (graph off)")
        if reps > 1:
            ax.fill_between(pos, [min(v) for v in per_pos], [max(v) for v in per_pos], color=color,
                            alpha=0.2, lw=0)
        ax.plot(pos, mean, color=color, lw=1.6,
                label=f"{label} ({device_names([r])}; median {r['median']:.3f} ms{slope})")
    ax.set_xlabel("position of the timed step (KV depth: config.context + step)")
    ax.set_ylabel(f"TPOT (ms per token, mean over repetitions; band min..max)")
    ax.set_title(f"TPOT vs position, batch 1: {device_names(runs)}")
    ax.grid(True, color="0.9")
    ax.legend(loc="best", fontsize=8.5, framealpha=0.95)
    fig.tight_layout()
    save(fig, out)


KNEE = 1.5  # the knee of a batch curve: the first batch whose TPOT is this many times batch 1's


def positive(v):
    return v is not None and math.isfinite(v) and v > 0


def batch_curves(runs):
    """The runs as curves of one setting each, in order of first appearance: (label, scheme,
    points), points sorted by batch, each (batch, median TPOT, bandwidth floor, compute floor,
    paths) with the median of the runs at that batch (--runs gives several) and the first run's
    batched paths by matrix (batch 1: every matrix the run's kernel)."""
    curves = {}
    for r in runs:
        key = (r["device_name"], r["model"], r["scheme"], r["kv_cache"], r["kernel"], r["graph"], r["sync"],
               r["context"])
        curves.setdefault(key, []).append(r)
    out = []
    for key, rs in curves.items():
        by_batch = {}
        for r in rs:
            by_batch.setdefault(r["batch"], []).append(r)
        points = []
        for b in sorted(by_batch):
            group = by_batch[b]
            bw = [r["bw_floor"] for r in group if positive(r["bw_floor"])]
            cf = [r["compute_floor"] for r in group if positive(r["compute_floor"])]
            paths = group[0]["paths"]
            if b == 1 and rs:
                paths = {m: group[0]["kernel"] for m in set().union(*(r["paths"] for r in rs))}
            points.append((b, statistics.median(r["median"] for r in group),
                           statistics.median(bw) if bw else None, statistics.median(cf) if cf else None, paths))
        first = rs[0]
        label = label_of(first) + ("" if first["graph"] else " (graph off)")
        if len(curves) > 1 and len({k[0] for k in curves}) > 1:
            label += f" ({first['device_name']})"
        out.append((label, first["scheme"], points))
    return out


def knee_text(points):
    """The knee of a curve: the first batch whose TPOT is at least KNEE x its batch-1 TPOT,
    and the first whose floor (the larger of the two) is at least KNEE x its batch-1 floor."""
    if not points or points[0][0] != 1:
        return "knee unknown (no batch-1 run)"
    ratios = [p[1] / points[0][1] for p in points]
    at = next((i for i, r in enumerate(ratios) if r >= KNEE), None)
    floors = [max(p[2] or 0, p[3] or 0) for p in points]
    predicted = None
    if floors[0] > 0:
        predicted = next((p[0] for p, f in zip(points, floors) if f >= KNEE * floors[0]), None)
    # The ratios beside the knee say how near the line it fell: a knee at 1.52x after 1.46x
    # moves with a run's few percent.
    if at is not None:
        text = f"knee at batch {points[at][0]} (TPOT {ratios[at]:.2f}x batch 1's"
        text += f", {ratios[at - 1]:.2f}x at {points[at - 1][0]})" if at > 1 else ")"
    else:
        text = f"no knee up to the largest batch run (TPOT {ratios[-1]:.2f}x batch 1's at {points[-1][0]})"
    text += "; the floors predict "
    text += f"batch {predicted}" if predicted else "none up to it"
    if at is not None and at > 0:
        text += path_change_text(points[at - 1], points[at])
    return text


def path_change_text(before, at):
    """Where a knee's batch runs some matrices on other paths than the batch before it: which,
    from what to what ("; there qkv, o_proj move from gemv-columns to skinny-gemm and lm_head
    moves from gemv-columns to cublas"), so that a
    knee set by a kernel reads as one. Empty where no path changed or a point has none."""
    if len(before) < 5 or len(at) < 5:
        return ""
    changes = {}
    for matrix, path in at[4].items():
        old = before[4].get(matrix)
        if old is not None and old != path:
            changes.setdefault((old, path), []).append(matrix)
    moves = [f"{', '.join(ms)} {'moves' if len(ms) == 1 else 'move'} from {old} to {new}"
             for (old, new), ms in changes.items()]
    return f"; there {' and '.join(moves)}" if moves else ""


def curve_colors(curves):
    """A colour for each (label, scheme, points) curve: its scheme's where that is still free,
    else the next unused one."""
    colors, used = [], set()
    spare = [c for c in LINE_COLORS if c not in SCHEME_COLORS.values()]
    for _, scheme, _ in curves:
        c = SCHEME_COLORS.get(scheme)
        if c is None or c in used:
            c = spare.pop(0) if spare else LINE_COLORS[len(colors) % len(LINE_COLORS)]
        used.add(c)
        colors.append(c)
    return colors


def plot_batch(runs, out):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    curves = batch_curves(runs)
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(14, 6.5), dpi=110)
    colors = curve_colors(curves)
    lines = []
    for (label, _, points), color in zip(curves, colors):
        bs = [p[0] for p in points]
        tpot = [p[1] for p in points]
        knee = knee_text(points)
        lines.append(f"{label}: {knee}")
        ax_t.plot(bs, tpot, color=color, lw=1.8, marker="o", markersize=5, label=f"{label}: {knee}", zorder=3)
        ax_s.plot(bs, [b * 1000 / t for b, t in zip(bs, tpot)], color=color, lw=1.8, marker="o", markersize=5,
                  zorder=3)
        for idx, style in ((2, "--"), (3, ":")):  # bandwidth floor, compute floor
            fb = [(p[0], p[idx]) for p in points if positive(p[idx])]
            if fb:
                ax_t.plot([b for b, _ in fb], [f for _, f in fb], color=color, lw=1.1, ls=style, zorder=2)
                ax_s.plot([b for b, _ in fb], [b * 1000 / f for b, f in fb], color=color, lw=1.1, ls=style,
                          zorder=2)
    for ax in (ax_t, ax_s):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.grid(True, which="major", color="0.88", lw=0.8)
        ax.set_xlabel("batch (sequences decoded in lockstep, config.batch)")
    ax_t.set_ylabel("TPOT (ms per step: the latency each sequence sees, median)")
    ax_s.set_ylabel("tokens/s of all sequences (batch x 1000 / TPOT)")
    ax_t.set_title("TPOT vs batch, with each line's floors")
    ax_s.set_title("tokens/s vs batch, with the floors' ceilings")
    handles, _ = ax_t.get_legend_handles_labels()
    handles += [Line2D([], [], color="0.3", lw=1.1, ls="--", label="bandwidth floor (bytes / measured read)"),
                Line2D([], [], color="0.3", lw=1.1, ls=":", label="compute floor (FLOPs / measured throughput)")]
    # Below both panels, where no curve runs.
    rows = (len(handles) + 1) // 2
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"Where the byte law stops: {device_names(runs)}", fontsize=11)
    fig.tight_layout(rect=(0, min(0.5, 0.03 + 0.032 * rows), 1, 1))
    save(fig, out)
    for line in lines:
        print(line)


def context_curves(runs):
    """The runs as curves of one setting each (the KV cache scheme among it), in order of first
    appearance: (label, kv_cache, points), points sorted by context, each (context, median
    TPOT, bandwidth floor, bytes per step, measured read GB/s), the median of the runs at that
    context (--runs gives several); a floor or bandwidth not measured is None."""
    curves = {}
    for r in runs:
        key = (r["device_name"], r["model"], r["scheme"], r["kv_cache"], r["kernel"], r["graph"], r["sync"],
               r["batch"])
        curves.setdefault(key, []).append(r)
    out = []
    for key, rs in curves.items():
        by_context = {}
        for r in rs:
            by_context.setdefault(r["context"], []).append(r)
        points = []
        for c in sorted(by_context):
            group = by_context[c]
            bw = [r["bw_floor"] for r in group if positive(r["bw_floor"])]
            peak = [r["peak_GBps"] for r in group if positive(r["peak_GBps"])]
            points.append((c, statistics.median(r["median"] for r in group), statistics.median(bw) if bw else None,
                           statistics.median(r["bytes"] for r in group), statistics.median(peak) if peak else None))
        first = rs[0]
        label = f"{first['model']} {first['kernel']} KV {first['kv_cache']}"
        if first["sync"]:
            label += " sync-per-token"
        if first["batch"] != 1:
            label += f" B={first['batch']}"
        if not first["graph"]:
            label += " (graph off)"
        if len({k[0] for k in curves}) > 1:
            label += f" ({first['device_name']})"
        out.append((label, first["kv_cache"], points))
    return out


def context_text(points):
    """A curve from its least context to its largest; with a context-0 point, the KV part of
    the largest context's TPOT and the rate its KV bytes stream at."""
    (c0, t0, f0, b0, _), (c1, t1, f1, b1, bw) = points[0], points[-1]
    floors = f", floor {f0:.3f} -> {f1:.3f} ms" if f0 is not None and f1 is not None else ""
    text = f"context {c0} -> {c1}: TPOT {t0:.3f} -> {t1:.3f} ms{floors}"
    if c0 == 0 and c1 > 0:
        part, kv = t1 - t0, b1 - b0
        text += f"; KV part {part:.3f} ms for {kv / 1e9:.3g} GB"
        if part > 0:
            rate = kv / (part * 1e-3) / 1e9
            text += f": {rate:.0f} GB/s"
            if bw:
                text += f", {rate / bw:.2f} of the measured {bw:.0f} GB/s"
    return text


def plot_context(runs, out):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    curves = context_curves(runs)
    fig, ax = plt.subplots(figsize=(12, 7), dpi=110)
    colors, used = [], set()
    spare = [c for c in LINE_COLORS if c not in KV_COLORS.values()]
    for _, kv, _ in curves:
        c = KV_COLORS.get(kv)
        if c is None or c in used:
            c = spare.pop(0) if spare else LINE_COLORS[len(colors) % len(LINE_COLORS)]
        used.add(c)
        colors.append(c)
    lines = []
    for (label, _, points), color in zip(curves, colors):
        cs = [p[0] for p in points]
        lines.append(f"{label}: {context_text(points)}")
        ax.plot(cs, [p[1] for p in points], color=color, lw=1.8, marker="o", markersize=5, label=label, zorder=3)
        fb = [(p[0], p[2]) for p in points if p[2] is not None]
        if fb:
            ax.plot([c for c, _ in fb], [f for _, f in fb], color=color, lw=1.1, ls="--", zorder=2)
    ax.set_xlabel("context (KV depth of the first timed step, config.context)")
    ax.set_ylabel("TPOT (ms per step, median)")
    ax.set_title(f"TPOT vs context, each KV cache scheme with its floor: {device_names(runs)}")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, color="0.9")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.3", lw=1.1, ls="--",
                          label="its floor: bytes (weights, K and V with their scales) / measured read bandwidth"))
    ax.legend(handles=handles, loc="upper left", fontsize=8.5, framealpha=0.95)
    fig.tight_layout()
    save(fig, out)
    for line in lines:
        print(line)


def with_energy(runs):
    """The runs that measured energy; one stderr line for each that did not."""
    kept = []
    for r in runs:
        if r["energy_reason"] == "" and positive(r["j_per_token"]):
            kept.append(r)
        else:
            print(f"{PROG}: {r['where']}: no energy ({r['energy_reason'] or 'no J/token'}): left out",
                  file=sys.stderr)
    if not kept:
        raise InputError("no run has energy figures (energy.reason says why for each)")
    return kept


def energy_curves(runs):
    """As batch_curves: one curve a setting, points (batch, median J/token, median TPOT)."""
    curves = {}
    for r in runs:
        key = (r["device_name"], r["model"], r["scheme"], r["kv_cache"], r["kernel"], r["graph"], r["sync"],
               r["context"])
        curves.setdefault(key, []).append(r)
    out = []
    for key, rs in curves.items():
        by_batch = {}
        for r in rs:
            by_batch.setdefault(r["batch"], []).append(r)
        points = [(b, statistics.median(r["j_per_token"] for r in by_batch[b]),
                   statistics.median(r["median"] for r in by_batch[b])) for b in sorted(by_batch)]
        first = rs[0]
        label = label_of(first) + ("" if first["graph"] else " (graph off)")
        if len({k[0] for k in curves}) > 1:
            label += f" ({first['device_name']})"
        out.append((label, first["scheme"], points))
    return out


def plot_energy(runs, out):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    runs = with_energy(runs)
    fig, (ax_b, ax_n) = plt.subplots(1, 2, figsize=(15, 6.8), dpi=110)

    # Left: J/token against the bytes one token reads.
    for r in runs:
        x = r["bytes"] / r["batch"] / 1e9
        y = r["j_per_token"]
        color = SCHEME_COLORS.get(r["scheme"], OTHER_COLOR)
        lo = r["j_per_token_min"] if positive(r["j_per_token_min"]) else y
        hi = r["j_per_token_max"] if positive(r["j_per_token_max"]) else y
        ax_b.errorbar([x], [y], yerr=[[y - lo], [hi - y]], fmt="none", ecolor=color, elinewidth=1.0, capsize=3,
                      zorder=2)
        ax_b.plot([x], [y], marker=marker_of(r["kernel"]), markersize=8, ls="none", markeredgecolor=color,
                  markeredgewidth=1.5, markerfacecolor=color if r["graph"] else "white", zorder=3)
        text = label_of(r) + ("" if r["graph"] else " (graph off)") + (f" B={r['batch']}" if r["batch"] != 1 else "")
        ax_b.annotate(text, (x, y), xytext=(6, 3), textcoords="offset points", fontsize=7.5, color="0.25")
    ax_b.set_xlabel("bytes per token (GB: bytes.per_token.total / config.batch)")
    ax_b.set_ylabel("energy (J per token, median; bars least..largest repetition)")
    ax_b.set_title("J/token vs bytes per token")
    handles = []
    for scheme, color in SCHEME_COLORS.items():
        if any(r["scheme"] == scheme for r in runs):
            handles.append(Line2D([], [], ls="none", marker="o", markersize=8, color=color,
                                  label=f"{scheme} weights (colour)"))
    if any(not r["graph"] for r in runs):
        handles.append(Line2D([], [], ls="none", marker="o", markersize=8, color="0.3", markerfacecolor="white",
                              markeredgewidth=1.5, label="hollow: graph off (eager)"))
    if handles:
        ax_b.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.95)

    # Right: J/token against the batch, TPOT dashed on the other axis.
    ax_t = ax_n.twinx()
    curves = energy_curves(runs)
    colors = curve_colors(curves)
    lines = []
    for (label, _, points), color in zip(curves, colors):
        bs = [p[0] for p in points]
        ax_n.plot(bs, [p[1] for p in points], color=color, lw=1.8, marker="o", markersize=5, label=label, zorder=3)
        ax_t.plot(bs, [p[2] for p in points], color=color, lw=1.1, ls="--", marker=".", zorder=2)
        first, last = points[0], points[-1]
        text = f"{label}: {first[1]:.4g} J/token at batch {first[0]}"
        if len(points) > 1:
            text += (f" -> {last[1]:.4g} at batch {last[0]} ({last[1] / first[1]:.2f}x), TPOT {first[2]:.3f} -> "
                     f"{last[2]:.3f} ms ({last[2] / first[2]:.2f}x)")
        lines.append(text)
    for ax in (ax_b, ax_n, ax_t):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax_b.set_xscale("log")
    ax_b.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax_n.set_xscale("log", base=2)
    ax_n.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    for ax in (ax_b, ax_n):
        ax.grid(True, which="major", color="0.88", lw=0.8)
    ax_n.set_xlabel("batch (sequences decoded in lockstep, config.batch)")
    ax_n.set_ylabel("energy (J per token, median)")
    ax_t.set_ylabel("TPOT (ms per step, median; dashed)")
    ax_n.set_title("J/token (solid) and TPOT (dashed) vs batch")
    handles, _ = ax_n.get_legend_handles_labels()
    rows = (len(handles) + 1) // 2
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"Energy per token: {device_names(runs)}", fontsize=11)
    fig.tight_layout(rect=(0, min(0.5, 0.03 + 0.032 * rows), 1, 1))
    save(fig, out)
    for line in lines:
        print(line)


# ----------------------------------------------------------------------------- main

VERBS = ("roofline", "position", "batch", "context", "energy")
USAGE = ("usage: plot.py roofline|position|batch|context|energy OUT.png FILES...  "
         "(FILES: decodebench result JSON, JSON arrays or JSONL)")


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) < 4 or argv[1] not in VERBS:
        fail(USAGE, 2)
    verb, out, files = argv[1], argv[2], argv[3:]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except Exception as e:  # noqa: BLE001
        # `python3` on PATH may be another interpreter (pyenv, a venv): try Debian's, once.
        debian = "/usr/bin/python3"
        if (os.path.exists(debian) and not os.environ.get("DB_PLOT_REEXEC") and
                os.path.realpath(sys.executable) != os.path.realpath(debian)):
            os.environ["DB_PLOT_REEXEC"] = "1"
            os.execv(debian, [debian, os.path.abspath(__file__)] + argv[1:])
        fail(f"matplotlib is not importable by {sys.executable} ({e}): install python3-matplotlib "
             "(scripts/install_deps.sh does)", 1)
    try:
        runs = read_all(files)
        if verb == "roofline":
            plot_roofline(runs, out)
        elif verb == "batch":
            plot_batch(runs, out)
        elif verb == "context":
            plot_context(runs, out)
        elif verb == "energy":
            plot_energy(runs, out)
        else:
            plot_position(runs, out)
    except InputError as e:
        fail(str(e), 2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
