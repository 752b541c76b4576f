"""Compares two `attnc train` run directories trained for N steps.

Usage: compare_runs.py RUN_A RUN_B N TOL

Prints "losses within TOL, weights within TOL" when each step's loss in
train.csv differs by at most TOL relative, and every tensor of
ckpt-N.safetensors (weights and AdamW moments) by at most TOL of the
tensor's largest magnitude; otherwise the worst offender, exit 1.

attn.bk (the key bias) is left out: softmax is invariant to it, so its
gradient is rounding noise and its values differ between any two runs
whose arithmetic differs at all.
"""
import json
import struct
import sys


def tensors(path):
    with open(path, 'rb') as f:
        data = f.read()
    n = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == '__metadata__':
            continue
        assert t['dtype'] == 'F32', (name, t['dtype'])
        s, e = t['data_offsets']
        out[name] = struct.unpack('<%df' % ((e - s) // 4), data[8 + n + s:8 + n + e])
    return out


def losses(run):
    rows = open(run + '/train.csv').read().split()[1:]
    return [float(r.split(',')[1]) for r in rows]


def main():
    a, b, steps, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    la, lb = losses(a), losses(b)
    if len(la) != steps or len(lb) != steps:
        sys.exit('expected %d steps, found %d and %d' % (steps, len(la), len(lb)))
    worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
    if worst > tol:
        sys.exit('losses differ by %g relative' % worst)
    ta = tensors('%s/ckpt-%d.safetensors' % (a, steps))
    tb = tensors('%s/ckpt-%d.safetensors' % (b, steps))
    if ta.keys() != tb.keys():
        sys.exit('tensors differ: %s' % sorted(set(ta) ^ set(tb)))
    for name in sorted(ta):
        if name.endswith('attn.bk'):
            continue
        largest = max(abs(x) for x in ta[name]) or 1.0
        diff = max(abs(x - y) for x, y in zip(ta[name], tb[name])) / largest
        if diff > tol:
            sys.exit('%s differs by %g of its largest' % (name, diff))
    print('losses within %g, weights within %g' % (tol, tol))


if __name__ == '__main__':
    main()
