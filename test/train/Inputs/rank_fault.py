"""Runs an `mpirun` training job, waits until it has trained a few steps,
then kills (SIGKILL) or stops (SIGSTOP) one rank, and reports how the job
ended: its exit code and how many seconds after the fault.

Usage: rank_fault.py kill|stop RANK OUT_DIR STEPS_FIRST -- MPIRUN_COMMAND...

OUT_DIR is the run's --out (train.csv there says how far it got; rank 0
writes it). Prints "job ended with exit N, T s after the fault" and exits
0 when the job ended non-zero within 60 s; 1 otherwise (the job is then
killed).
"""
import os
import signal
import subprocess
import sys
import time


def rank_pid(out_dir, rank):
    """The pid of the attnc process of `rank` (its OMPI_COMM_WORLD_RANK)
    whose command line names `out_dir`."""
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            cmd = open('/proc/%s/cmdline' % pid, 'rb').read().split(b'\0')
            env = open('/proc/%s/environ' % pid, 'rb').read().split(b'\0')
        except OSError:
            continue
        if not cmd or not os.path.basename(cmd[0]).startswith(b'attnc'):
            continue
        if out_dir.encode() not in cmd:
            continue
        if ('OMPI_COMM_WORLD_RANK=%d' % rank).encode() in env:
            return int(pid)
    return None


def main():
    how, rank, out_dir, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    command = sys.argv[sys.argv.index('--') + 1:]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    csv = os.path.join(out_dir, 'train.csv')
    deadline = time.time() + 300
    while time.time() < deadline and job.poll() is None:
        try:
            if len(open(csv).read().split()) > steps:
                break
        except OSError:
            pass
        time.sleep(0.2)
    pid = rank_pid(out_dir, rank)
    if job.poll() is not None or pid is None:
        print(job.stdout.read().decode(errors='replace'))
        sys.exit('the job ended before the fault, or rank %d was not found' % rank)
    os.kill(pid, signal.SIGKILL if how == 'kill' else signal.SIGSTOP)
    fault = time.time()
    try:
        out, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        os.kill(pid, signal.SIGKILL)
        sys.exit('the job was still running 60 s after the fault')
    finally:
        if how == 'stop':
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    print(out.decode(errors='replace'))
    print('job ended with exit %d, %.0f s after the fault' % (job.returncode, time.time() - fault))
    sys.exit(0 if job.returncode != 0 else 1)


if __name__ == '__main__':
    main()
