#!/usr/bin/env python3
"""tools/ptxas_table.py: the resource table of the CUDA kernels from nvcc's `-Xptxas -v` output.

    tools/ptxas_table.py --out build/cuda-check/kernels.md build/cuda-check/*.log

Each LOG is the output of one `nvcc -Xptxas -v -c engine/cuda/<file>.cu` (the log's name without
.log names the source file). Writes a markdown table, one line per kernel (file, kernel, registers,
the largest block those registers allow, stack frame, spill stores, spill loads, static shared
memory, barriers; "a / b" where the archs differ), sorted by file and kernel, prints
it, and exits with status 1 when any function spills registers to local memory (a kernel of the
training step that spills is slow on every step), naming each one. Non-kernel device functions
that ptxas compiled on their own (not inlined) get a row too, marked "(device function)".
Standard library only; kernel names are demangled with c++filt when it is there.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPS = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
BARRIERS = re.compile(r"used (\d+) barriers")


def parse(text, source):
    """Rows (dicts) for every function ptxas reported in one nvcc log."""
    rows = {}  # (name, arch) -> row
    arch = None
    entry = None  # the entry function being compiled now
    props_for = None  # the function whose "Function properties" line came last
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            entry, arch = m.group(1), m.group(2)
            rows.setdefault((entry, arch), new_row(source, entry, arch, True))
            props_for = None
            continue
        m = PROPS.search(line)
        if m and arch:
            props_for = m.group(1)
            if (props_for, arch) not in rows:
                rows[(props_for, arch)] = new_row(source, props_for, arch, props_for == entry)
            continue
        m = FRAME.search(line)
        if m and props_for and arch:
            r = rows[(props_for, arch)]
            r["stack"], r["spill_stores"], r["spill_loads"] = (int(g) for g in m.groups())
            continue
        m = USED.search(line)
        if m and entry and arch:
            r = rows[(entry, arch)]
            r["registers"] = int(m.group(1))
            s = SMEM.search(line)
            r["smem"] = int(s.group(1)) if s else 0
            b = BARRIERS.search(line)
            r["barriers"] = int(b.group(1)) if b else None
    return list(rows.values())


def new_row(source, name, arch, is_entry):
    return {"file": source, "name": name, "arch": arch, "entry": is_entry, "registers": None, "stack": 0,
            "spill_stores": 0, "spill_loads": 0, "smem": 0, "barriers": None}


def demangle(names):
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def cell(v):
    return "" if v is None else str(v)


def max_block_threads(registers):
    """The most threads a block of a kernel using `registers` a thread can be launched with on sm_80
    and sm_90 (65,536 registers a block, allocated in units of 256 a warp): a larger block fails to
    launch ("too many resources requested for launch"), which the CUDA emulator cannot see."""
    if not registers:
        return 1024
    per_warp = -(-registers * 32 // 256) * 256
    return min(1024, 65536 // per_warp * 32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="*", help="nvcc -Xptxas -v outputs, one per .cu file")
    ap.add_argument("--out", help="write the markdown table here too")
    args = ap.parse_args()

    rows = []
    for path in args.logs:
        source = os.path.basename(path)
        source = source[:-4] if source.endswith(".log") else source
        with open(path, encoding="utf-8", errors="replace") as f:
            rows += parse(f.read(), source)
    pretty = demangle(sorted({r["name"] for r in rows}))
    for r in rows:
        r["pretty"] = pretty.get(r["name"], r["name"]) + ("" if r["entry"] else " (device function)")
        r["max_threads"] = max_block_threads(r["registers"]) if r["entry"] else None
    rows.sort(key=lambda r: (r["file"], r["pretty"], r["arch"]))
    archs = sorted({r["arch"] for r in rows})

    # One line per kernel; a column with several archs shows "sm_80 value / sm_90 value" where
    # they differ and one value where they agree.
    by_kernel = {}
    for r in rows:
        by_kernel.setdefault((r["file"], r["pretty"]), {})[r["arch"]] = r

    def per_arch(k, key):
        vals = [cell(k[a][key]) if a in k else "–" for a in archs]
        return vals[0] if len(set(vals)) == 1 else " / ".join(vals)

    lines = [f"| file | kernel | registers ({' / '.join(archs)}) | largest block (threads) | stack frame (B) | "
             "spill stores (B) | spill loads (B) | static shared (B) | barriers |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (source, pretty), k in by_kernel.items():
        name = pretty.replace("engine::cuda::", "").replace("|", "\\|")
        lines.append(f"| {source} | `{name}` | " + " | ".join(
            per_arch(k, key) for key in ("registers", "max_threads", "stack", "spill_stores", "spill_loads", "smem",
                                         "barriers")) + " |")
    spills = [r for r in rows if r["spill_stores"] or r["spill_loads"]]
    kernels = len({(r["file"], r["name"]) for r in rows if r["entry"]})
    summary = (f"{kernels} kernels in {len(args.logs)} files for {', '.join(archs)}; "
               f"{len(spills)} (kernel, arch) pairs with register spills")
    table = "# CUDA kernels: ptxas resource usage\n\n" + summary + ".\n\n" + "\n".join(lines) + "\n"
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(table)
    print(table)
    if spills:
        print("✗ cuda-check: register spills (each costs local-memory traffic on every launch):", file=sys.stderr)
        for r in spills:
            print(f"  {r['file']}: {r['pretty']} ({r['arch']}): {r['spill_stores']} bytes spill stores, "
                  f"{r['spill_loads']} bytes spill loads, {cell(r['registers'])} registers", file=sys.stderr)
        return 1
    print(f"✓ cuda-check: {summary}" + (f" (table: {args.out})" if args.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
