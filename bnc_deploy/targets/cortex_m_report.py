"""The text report of a Cortex-M check (:func:`bnc_deploy.targets.cortex_m.check_header`'s dict).

One line per board (rows passed, invalid rows refused, the model's FLASH and RAM, instructions
per row), then the failing rows, build errors and compiler warnings, and what the figures mean.
"""

from __future__ import annotations


def format_report(r: dict) -> str:
    rows = r["rows"]
    given = f"{rows['n_given']:,} from the {rows['source']}" if rows["n_given"] else "none given"
    lines = [
        f"Cortex-M check of {r['header']} (emulated in QEMU, not on hardware)",
        f"  model      {r['structure'].upper()} {r['model_kind']}, {r['n_features']} features, "
        f"{r['n_classes']} classes, B = {r['bits']} bits",
        f"  B*|theta|  {r['bits']} x {r['n_parameters']:,} = {r['size_bits']:,} bits ({r['size_bytes']:,} B); "
        f"tables in the header: {r['table_bytes']:,} B ({r['table_storage']})",
        f"  rows       {rows['n_rows']:,} ({given} + {rows['n_random']:,} random), {rows['n_invalid']} invalid rows "
        f"that must be refused" + (f", {rows['n_raw']} raw-input rows" if rows["n_raw"] else ""),
        "",
        f"  {'board':<11} {'cpu':<10} {'rows passed':>14} {'invalid':>8}  {'FLASH code + tables':>22}  "
        f"{'RAM data+bss+stack':>19}  {'instr/row predict':>17} {'log_joint':>9}",
    ]
    for b in r["boards"]:
        m = b.get("model")
        flash = f"{m['code_bytes']:,} + {m['table_bytes']:,} B" if m else "-"
        ram = f"{m['data_bss_bytes']} + {m['stack_bytes']} B" if m and m["stack_bytes"] is not None else "-"
        ins = b["instructions"]
        pred = f"{ins['predict_per_row']:,.0f}" if ins.get("available") else "n/a"
        lj = f"{ins['log_joint_per_row']:,.0f}" if ins.get("available") else "n/a"
        inv = f"{rows['n_invalid'] - b['invalid_failed']}/{rows['n_invalid']}"
        lines.append(
            f"  {b['board']:<11} {b['cpu']:<10} {b['passed']:>6,}/{b['n_rows']:<7,} {inv:>8}  {flash:>22}  "
            f"{ram:>19}  {pred:>17} {lj:>9}  {'PASS' if b['ok'] else 'FAIL'}"
        )
    for b in r["boards"]:
        if rows["n_raw"]:
            lines.append(f"  {b['board']}: raw-input rows passed {rows['n_raw'] - b['raw_failed']}/{rows['n_raw']}")
        for f in b["failures"]:
            lines.append(
                f"  {b['board']}: {f['kind']} row {f['row']}: got label {f['label']} (rc {f['rc']}), "
                f"expected {f['expected_label']}; scores {f['scores']} vs {f['expected_scores']}"
            )
        more = b["failed"] + b["invalid_failed"] + b["raw_failed"] - len(b["failures"])
        if more > 0:
            lines.append(f"  {b['board']}: ... {more} more failing rows (--json lists them)")
        for e in b["errors"]:
            lines.append(f"  {b['board']}: error: {e}")
        for w in b["compiler_warnings"] + (
            [b["model"]["compiler_warnings"]] if b.get("model") and b["model"]["compiler_warnings"] else []
        ):
            lines.append(f"  {b['board']}: compiler warnings: {w.splitlines()[0]}")
    first = r["boards"][0] if r["boards"] else None
    lines += [
        "",
        "  FLASH = .text + .rodata, RAM = .data + .bss + worst-case stack (GCC -fstack-usage), of the header's own",
        "  object file (arm-none-eabi-size -A; only predict called; with log_joint too: --json).",
    ]
    if first and first.get("model"):
        m = first["model"]
        lines.append(
            f"  Tables on {first['board']}: {m['codes_bytes']:,} B of codes + {m['index_bytes']:,} B of index "
            f"arrays (largest codes, row offsets, parents, strides); B*|theta| = {r['size_bytes']:,} B."
        )
    if first and first.get("image"):
        img = first["image"]
        lines.append(
            f"  Whole test program on {first['board']} (harness, newlib-nano, semihosting, check rows): "
            f"FLASH {img['flash_bytes']:,} B, RAM {img['ram_bytes']:,} B "
            f"(+ {img['heap_bytes']:,} B heap)."
        )
    lines.append(
        "  QEMU is not cycle-accurate: instructions are executed instructions (-icount), net of the call loop;"
    )
    lines.append("  cycles and latency on a real chip differ by core, clock and memory wait states.")
    lines.append(f"  {'PASS' if r['ok'] else 'FAIL'}: {sum(b['ok'] for b in r['boards'])} of {len(r['boards'])} boards")
    return "\n".join(lines)
