"""tools/safetensors_file.py: read and write our checkpoints with the Python standard library.

A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype,
shape and byte range in the data section; "__metadata__": string pairs), then the raw
little-endian data. engine/safetensors.cpp is the C++ side. Errors are ValueError with a message
that names the file and what is wrong with it.
"""
import array
import json
import os
import struct
import sys

METADATA = "__metadata__"


def load(path):
    """(header without the metadata, metadata, data section as a bytearray)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}")
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} goes past the end of the file ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8 : 8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: the header is not JSON ({e})")
    meta = header.pop(METADATA, {})
    data = bytearray(raw[8 + n :])
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: {name}'s data [{begin}, {end}) lies outside the data section ({len(data)} bytes)")
    return header, meta, data


def save(path, header, meta, data):
    """Written atomically (a temporary file, then a rename), as the C++ writer does."""
    out = dict(header)
    out[METADATA] = meta
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    os.replace(tmp, path)


def floats(header, data, name):
    """A float32 tensor's values, flat."""
    info = header[name]
    if info["dtype"] != "F32":
        raise ValueError(f"{name} is {info['dtype']}, not F32")
    begin, end = info["data_offsets"]
    values = array.array("f")
    values.frombytes(bytes(data[begin:end]))
    if sys.byteorder != "little":
        values.byteswap()
    return values


def put_floats(header, data, name, values):
    """Writes `values` (an array of floats, as many as the tensor has) into the tensor's bytes."""
    out = array.array("f", values)
    if sys.byteorder != "little":
        out.byteswap()
    begin, end = header[name]["data_offsets"]
    data[begin:end] = out.tobytes()
