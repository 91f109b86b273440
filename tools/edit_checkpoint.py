#!/usr/bin/python3
"""tools/edit_checkpoint.py: edit the weights of a checkpoint, to start a run from the result.

A run's RUN/init.safetensors holds the weights it started from. Edit them here and pass the new
file to `--init-from` (a run of the same model flags) to test what one part of an init does:

    # an untied output layer that starts as a copy of the embedding (the tied head's start)
    tools/edit_checkpoint.py RUN/init.safetensors head_copy.safetensors --copy head.weight=tok_emb.weight
    # every block's query weights halved; the final LayerNorm's gain set to zero
    tools/edit_checkpoint.py IN OUT --scale 'blocks.*.attn.q.weight=0.5' --fill norm.weight=0
    # a learned position embedding that starts as the sinusoidal one (another run's buffer)
    tools/edit_checkpoint.py IN OUT --copy pos_embed=SINUSOIDAL_RUN/init.safetensors:pos_embed
    # torch's start with another init's attention weights (which part of that init helps)
    tools/edit_checkpoint.py TORCH/init.safetensors OUT --take 'blocks.*.attn.*=ORTHO/init.safetensors'

Operations run in the order given: --copy DST=SRC (SRC's values into DST, the same shape; SRC
may be FILE:NAME, a tensor of another checkpoint), --take NAMES=FILE (every tensor NAMES matches
takes FILE's tensor of the same name), --scale NAMES=FACTOR and --fill NAMES=VALUE (float32
tensors). NAMES is a glob: `*` matches any run of characters, dots included. A name or glob that matches nothing is an error, so is a
shape that differs. --list prints the tensors. The edits are recorded in the file's metadata
("edits"), the output is written atomically, and nothing but the Python standard library is
needed.
"""
import argparse
import fnmatch
import os
import sys

import safetensors_file as st


def fail(msg):
    sys.exit(f"edit_checkpoint.py: {msg}")


def matching(header, pattern, what):
    names = [n for n in header if fnmatch.fnmatchcase(n, pattern)]
    if not names:
        fail(f"{what} {pattern}: no tensor matches (--list prints the names)")
    return names


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


def copy_tensor(header, data, name, src_header, src_data, src_name, what, src_text):
    """The values of src_name (in src_header/src_data) into `name`, which must match its dtype and shape."""
    if src_name not in src_header:
        fail(f"{what}: no tensor {src_text}")
    dst, src = header[name], src_header[src_name]
    if dst["shape"] != src["shape"] or dst["dtype"] != src["dtype"]:
        fail(f"{what}: {name} is {dst['dtype']} {dst['shape']}, {src_text} is {src['dtype']} {src['shape']}")
    (b0, e0), (b1, e1) = dst["data_offsets"], src["data_offsets"]
    data[b0:e0] = src_data[b1:e1]


class InOrder(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        getattr(namespace, self.dest).append((option_string, value))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output", nargs="?")
    # One list of (option, argument) for all three, so the edits run in the command line's order.
    for op, metavar in (("--copy", "DST=SRC"), ("--take", "NAMES=FILE"), ("--scale", "NAMES=FACTOR"),
                        ("--fill", "NAMES=VALUE")):
        p.add_argument(op, dest="ops", action=InOrder, default=[], metavar=metavar)
    p.add_argument("--list", action="store_true", help="print each tensor's name, dtype and shape")
    args = p.parse_args()
    try:
        header, meta, data = st.load(args.input)
    except ValueError as e:
        fail(str(e))
    if args.list:
        for name, info in header.items():
            print(f"{name:40s} {info['dtype']} {info['shape']}")
    if not args.ops:
        if not args.list:
            fail("nothing to do: give --copy, --take, --scale or --fill (and an output file), or --list")
        return
    if not args.output:
        fail("the edits need an output file")
    edits = []
    for op, arg in args.ops:
        left, right = split_arg(arg, op)
        if op == "--copy":
            src_header, src_data, src_name = header, data, right
            if ":" in right:  # FILE:NAME, from another checkpoint
                path, src_name = right.rsplit(":", 1)
                try:
                    src_header, _, src_data = st.load(path)
                except ValueError as e:
                    fail(f"--copy {arg}: {e}")
            if left not in header:
                fail(f"--copy {arg}: no tensor {left}")
            copy_tensor(header, data, left, src_header, src_data, src_name, f"--copy {arg}", right)
        elif op == "--take":
            try:
                src_header, _, src_data = st.load(right)
            except ValueError as e:
                fail(f"--take {arg}: {e}")
            for name in matching(header, left, op):
                copy_tensor(header, data, name, src_header, src_data, name, f"--take {arg}", f"{right}:{name}")
        else:
            value = number(right, f"{op} {arg}")
            for name in matching(header, left, op):
                try:
                    values = st.floats(header, data, name)
                except ValueError as e:
                    fail(f"{op} {arg}: {e}")
                st.put_floats(header, data, name, [v * value for v in values] if op == "--scale" else [value] * len(values))
        edits.append(f"{op} {arg}")
    meta = dict(meta)
    previous = meta.get("edits")
    meta["edits"] = "; ".join(([previous] if previous else []) + edits)
    meta["edited_from"] = os.path.abspath(args.input)
    st.save(args.output, header, meta, data)
    print(f"{args.output}: {meta['edits']}")


if __name__ == "__main__":
    main()
