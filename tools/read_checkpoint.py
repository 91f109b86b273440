#!/usr/bin/python3
"""tools/read_checkpoint.py: open a checkpoint of ours in PyTorch, with nothing but json and torch.

Our checkpoints are safetensors files (8-byte little-endian header length, JSON header, raw
little-endian data). The `safetensors` package reads them directly (safetensors.torch.load_file);
this script shows that plain PyTorch can too, and prints every tensor's name, shape and a summary.

    /usr/bin/python3 tools/read_checkpoint.py runs/vit/last.safetensors
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "I32": torch.int32, "F64": torch.float64, "I64": torch.int64}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n :]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tensors, meta = load(sys.argv[1])
    print(f"{sys.argv[1]}: {len(tensors)} tensors, metadata {meta}")
    for name, t in tensors.items():
        f = t.float()
        print(f"  {name:40s} {str(list(t.shape)):16s} mean {f.mean():+.4f} std {f.std() if f.numel() > 1 else 0:.4f}")


if __name__ == "__main__":
    main()
