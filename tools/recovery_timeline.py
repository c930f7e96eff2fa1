#!/usr/bin/env python3
"""Draws an in-place recovery from a real trace: ddp_mlp --min_replicas=K --trace=PREFIX writes one
PREFIX.replica<id>.jsonl per replica (examples/internal/in_place_training.h), each line a span of that
replica: "step", "failed step", "quorum + new group", "live state + DDP". One lane per replica, wall-clock
time across; a replica whose lane stops was lost (its last span's end is marked).

  tools/recovery_timeline.py docs/traces/in_place_recovery/rec -o docs/images/in_place_recovery.svg
"""
import argparse
import glob
import json
import re

COLORS = {"step": "#4e79a7", "failed step": "#e15759", "quorum + new group": "#f28e2b",
          "live state + DDP": "#59a14f"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("prefix")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--title", default="In-place recovery: replica 1 killed before step 6, 4 Gloo ranks (real trace)")
    a = p.parse_args()
    lanes = {}
    for path in sorted(glob.glob(a.prefix + ".replica*.jsonl")):
        rid = int(re.search(r"replica(\d+)\.jsonl$", path).group(1))
        lanes[rid] = [json.loads(line) for line in open(path) if line.strip()]
    t0 = min(s["start_us"] for spans in lanes.values() for s in spans)
    t1 = max(s["end_us"] for spans in lanes.values() for s in spans)
    width, left, lane_h, top = 1100, 110, 46, 70
    scale = (width - left - 30) / (t1 - t0)
    x = lambda t: left + (t - t0) * scale
    height = top + lane_h * len(lanes) + 120
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="13"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="28" font-size="16" font-weight="bold">{a.title}</text>']
    last_generation = max(s["generation"] for spans in lanes.values() for s in spans)
    for i, (rid, spans) in enumerate(sorted(lanes.items())):
        y = top + i * lane_h
        out.append(f'<text x="10" y="{y + 24}">replica {rid}</text>')
        for s in spans:
            w = max(1.0, (s["end_us"] - s["start_us"]) * scale)
            color = COLORS.get(s["name"], "#999")
            tip = f'{s["name"]} (step {s["step"]}, generation {s["generation"]}): {(s["end_us"] - s["start_us"]) / 1e3:.1f} ms'
            out.append(f'<rect x="{x(s["start_us"]):.1f}" y="{y + 8}" width="{w:.1f}" height="24" fill="{color}" '
                       f'stroke="white" stroke-width="0.5"><title>{tip}</title></rect>')
            label = f'{s["name"]} {(s["end_us"] - s["start_us"]) / 1e3:.0f} ms'
            if s["name"] != "step" and w > 7.5 * len(label):
                out.append(f'<text x="{x(s["start_us"]) + 4:.1f}" y="{y + 25}" fill="white">{label}</text>')
        if max(sp["generation"] for sp in spans) < last_generation:  # lost: its lane stops
            xe = x(spans[-1]["end_us"]) + 3
            out.append(f'<text x="{xe:.1f}" y="{y + 27}" fill="#e15759" font-size="18" font-weight="bold">&#10007; '
                       f'killed (SIGKILL) before step {spans[-1]["step"] + 1}</text>')
    # The time axis, in seconds from the first span.
    ya = top + lane_h * len(lanes) + 10
    out.append(f'<line x1="{left}" y1="{ya}" x2="{width - 30}" y2="{ya}" stroke="#333"/>')
    seconds = (t1 - t0) / 1e6
    step = next(v for v in [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10] if seconds / v <= 12)
    k = 0
    while k * step <= seconds + 1e-9:
        xt = x(t0 + k * step * 1e6)
        out.append(f'<line x1="{xt:.1f}" y1="{ya}" x2="{xt:.1f}" y2="{ya + 5}" stroke="#333"/>'
                   f'<text x="{xt - 8:.1f}" y="{ya + 20}" font-size="11">{round(k * step, 3):g} s</text>')
        k += 1
    ly = ya + 45
    lx = left
    for name, color in COLORS.items():
        out.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" fill="{color}"/>'
                   f'<text x="{lx + 20}" y="{ly + 12}">{name}</text>')
        lx += 40 + 8 * len(name)
    out.append(f'<text x="{left}" y="{ly + 38}" font-size="12" fill="#555">Each bar is a span of that replica '
               f'(wall clock). The survivors\' all_reduce fails at once (a closed socket); the quorum ends as soon as '
               f'the killed one is</text>')
    out.append(f'<text x="{left}" y="{ly + 54}" font-size="12" fill="#555">known gone (same host); then they build a '
               f'new Gloo group, take the source\'s state (weights, optimizer, step, cursor) and redo the step.</text>')
    out.append("</svg>")
    open(a.output, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
