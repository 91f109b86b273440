#!/usr/bin/python3
"""tools/edit_checkpoint.py: edit the weights of a checkpoint, to start a run from the result.

A run's RUN/init.safetensors holds the weights it started from. Edit them here and pass the new
file to `--init-from` (a run of the same model flags) to test what one part of an init does:

    # an untied output layer that starts as a copy of the embedding (the tied head's start)
    tools/edit_checkpoint.py RUN/init.safetensors head_copy.safetensors --copy head.weight=tok_emb.weight
    # every block's query weights halved; the final LayerNorm's gain set to zero
    tools/edit_checkpoint.py IN OUT --scale 'blocks.*.attn.q.weight=0.5' --fill norm.weight=0

Operations run in the order given: --copy DST=SRC (SRC's values into DST, the same shape),
--scale NAMES=FACTOR and --fill NAMES=VALUE (float32 tensors; NAMES is a glob: `*` matches any
run of characters, dots included). A name or glob that matches nothing is an error, so is a
shape that differs. --list prints the tensors. The edits are recorded in the file's metadata
("edits"), the output is written atomically, and nothing but the Python standard library is
needed.
"""
import argparse
import array
import fnmatch
import json
import os
import struct
import sys

METADATA = "__metadata__"


def fail(msg):
    sys.exit(f"edit_checkpoint.py: {msg}")


def load(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if len(raw) < 8:
        fail(f"{path}: {len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        fail(f"{path}: header length {n} goes past the end of the file ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8 : 8 + n])
    except ValueError as e:
        fail(f"{path}: the header is not JSON ({e})")
    meta = header.pop(METADATA, {})
    data = bytearray(raw[8 + n :])
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            fail(f"{path}: {name}'s data [{begin}, {end}) lies outside the data section ({len(data)} bytes)")
    return header, meta, data


def save(path, header, meta, data):
    out = dict(header)
    out[METADATA] = meta
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned, as our writer does
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    os.replace(tmp, path)


def matching(header, pattern, what):
    names = [n for n in header if fnmatch.fnmatchcase(n, pattern)]
    if not names:
        fail(f"{what} {pattern}: no tensor matches (--list prints the names)")
    return names


def floats(header, data, name, what):
    info = header[name]
    if info["dtype"] != "F32":
        fail(f"{what}: {name} is {info['dtype']}, not F32")
    begin, end = info["data_offsets"]
    values = array.array("f")
    values.frombytes(bytes(data[begin:end]))
    if sys.byteorder != "little":
        values.byteswap()
    return values


def put_floats(header, data, name, values):
    if sys.byteorder != "little":
        values.byteswap()
    begin, end = header[name]["data_offsets"]
    data[begin:end] = values.tobytes()


def split_arg(arg, what):
    if "=" not in arg:
        fail(f"{what} {arg}: expected NAME=VALUE")
    left, right = arg.split("=", 1)
    return left, right


def number(text, what):
    try:
        return float(text)
    except ValueError:
        fail(f"{what}: '{text}' is not a number")


class InOrder(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        getattr(namespace, self.dest).append((option_string, value))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output", nargs="?")
    # One list of (option, argument) for all three, so the edits run in the command line's order.
    for op, metavar in (("--copy", "DST=SRC"), ("--scale", "NAMES=FACTOR"), ("--fill", "NAMES=VALUE")):
        p.add_argument(op, dest="ops", action=InOrder, default=[], metavar=metavar)
    p.add_argument("--list", action="store_true", help="print each tensor's name, dtype and shape")
    args = p.parse_args()
    ops = args.ops
    header, meta, data = load(args.input)
    if args.list:
        for name, info in header.items():
            print(f"{name:40s} {info['dtype']} {info['shape']}")
    if not ops:
        if not args.list:
            fail("nothing to do: give --copy, --scale or --fill (and an output file), or --list")
        return
    if not args.output:
        fail("the edits need an output file")
    edits = []
    for op, arg in ops:
        left, right = split_arg(arg, op)
        if op == "--copy":
            if left not in header:
                fail(f"--copy {arg}: no tensor {left}")
            if right not in header:
                fail(f"--copy {arg}: no tensor {right}")
            dst, src = header[left], header[right]
            if dst["shape"] != src["shape"] or dst["dtype"] != src["dtype"]:
                fail(f"--copy {arg}: {left} is {dst['dtype']} {dst['shape']}, {right} is {src['dtype']} {src['shape']}")
            (b0, e0), (b1, e1) = dst["data_offsets"], src["data_offsets"]
            data[b0:e0] = data[b1:e1]
        else:
            value = number(right, f"{op} {arg}")
            for name in matching(header, left, op):
                values = floats(header, data, name, f"{op} {arg}")
                if op == "--scale":
                    values = array.array("f", (v * value for v in values))
                else:
                    values = array.array("f", [value]) * len(values)
                put_floats(header, data, name, values)
        edits.append(f"{op} {arg}")
    meta = dict(meta)
    previous = meta.get("edits")
    meta["edits"] = "; ".join(([previous] if previous else []) + edits)
    meta["edited_from"] = os.path.abspath(args.input)
    save(args.output, header, meta, data)
    print(f"{args.output}: {meta['edits']}")


if __name__ == "__main__":
    main()
