# -*- Python -*-
import os
import shutil
import subprocess

import lit.formats

config.name = "attnc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".attn", ".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "fuzz",
                   "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.attnc_obj_root, "test")

# Our tools first, then FileCheck/not/count from LLVM 19.
config.environment["PATH"] = os.pathsep.join(
    [config.attnc_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%attnc-src", config.attnc_src_root))
config.substitutions.append(("%attnc-obj", config.attnc_obj_root))
config.substitutions.append(("%python", config.python_executable))

# Kernels compiled by tests go to a cache inside the build tree, never the
# user's ~/.cache/attnc.
config.environment["ATTNC_CACHE_DIR"] = os.path.join(config.attnc_obj_root, "test-kernel-cache")

# The install test hides the source and build trees in a private mount
# namespace; where this process may not make one (not root), it is skipped.
if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0:
    config.available_features.add("unshare")

# Data-parallel tests (test/train/data-parallel.test) need mpirun and an
# attnc built with MPI (scripts/bootstrap.sh installs OpenMPI).
if config.attnc_have_mpi and shutil.which("mpirun"):
    config.available_features.add("mpi")
