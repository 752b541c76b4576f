"""Minimal safetensors reader/writer for the tests (no numpy needed)."""
import json
import struct

_FMT = {"F32": "f", "I32": "i"}


def write(path, tensors):
    """tensors: name -> (dtype, shape, flat list of values)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        blob = struct.pack("<%d%s" % (len(values), _FMT[dtype]), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    """Returns name -> (shape, flat list of values)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        fmt = _FMT[e["dtype"]]
        out[name] = (e["shape"], list(struct.unpack("<%d%s" % ((t - s) // 4, fmt), body[s:t])))
    return out
