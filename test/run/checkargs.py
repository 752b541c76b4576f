"""The command line of the numerics checkers (check_attention.py,
check_lsh.py): ATTNC WORKDIR [--run-args "ARGS"] [--tol X] [CASE...].
ARGS go to every `attnc run` (e.g. "--target cuda-sim --dtype f16"), X
replaces the checker's tolerance."""


def parse(argv, tol):
    """Returns (attnc, workdir, run_args, tol, cases)."""
    args, run_args = argv[3:], []
    while args and args[0] in ("--run-args", "--tol"):
        if args[0] == "--run-args":
            run_args = args[1].split()
        else:
            tol = float(args[1])
        args = args[2:]
    return argv[1], argv[2], run_args, tol, args
