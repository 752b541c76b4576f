"""Sets the chosen config of a tuning database's entries: the attention
tile entry gets TILE, the FFN entry CHUNK (tuning-consistency.test makes
the database's choices ones no heuristic picks, so a path that skips the
database shows). Usage: set_choices.py DB TILE CHUNK"""
import json
import sys

db, tile, chunk = sys.argv[1:4]
d = json.load(open(db))
kinds = set()
for e in d["entries"]:
    sig = e["kernel"]["signature"]
    if sig.startswith("cpu attention "):
        e["config"] = tile
        kinds.add("tile")
    elif sig.startswith("cpu ffn "):
        e["config"] = chunk
        kinds.add("chunk")
if kinds != {"tile", "chunk"}:
    sys.exit("set_choices.py: %s lacks a tile or an FFN entry (%s)" % (db, sorted(kinds)))
json.dump(d, open(db, "w"), indent=1)
