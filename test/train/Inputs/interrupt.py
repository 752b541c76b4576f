"""Runs a training command, sends it a signal once its train.csv has ROWS
rows, and prints its exit status and output.

    interrupt.py RUN_DIR ROWS SIGNAL -- COMMAND...
"""
import os
import signal
import subprocess
import sys
import time

run_dir, rows, signame = sys.argv[1], int(sys.argv[2]), sys.argv[3]
command = sys.argv[sys.argv.index("--") + 1:]
proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
csv = os.path.join(run_dir, "train.csv")
deadline = time.time() + 300
sent = False
while proc.poll() is None and time.time() < deadline:
    try:
        with open(csv) as f:
            seen = len(f.read().splitlines()) - 1  # the header
    except FileNotFoundError:
        seen = 0
    if seen >= rows:
        proc.send_signal(getattr(signal, signame))
        sent = True
        break
    time.sleep(0.01)
out, err = proc.communicate(timeout=300)
print("signal sent" if sent else "signal NOT sent (the run ended first)")
print("exit", proc.returncode)
sys.stdout.write(out)
sys.stdout.write(err)
