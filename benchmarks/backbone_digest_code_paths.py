"""Which numeric code paths a backbone's weights depend on: its ``backbone_digest`` under each setting of the
CPU dispatch of MKL (``MKL_CBWR``) and of ATen (``ATEN_CPU_CAPABILITY``), on this machine.

usage: python benchmarks/backbone_digest_code_paths.py [--benchmarks Cora-GCN,Cora-GAT] [--study study/offline.yaml]

Both libraries pick their kernels by CPU model unless told otherwise, so the same seed can train other weights
on another CPU. Each setting runs in a fresh process (the variables are read at start-up), trains run s0 i0 f0
of each benchmark under the study's settings on one thread into an empty backbone cache, and prints the
digest beside the CPU model and ATen's capability. A digest that moves with a setting is a code path the weights
depend on; pinning all of them on every machine is what backbones shared across CPU models would take.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from gat_attention_speed import cpu_model  # same folder: run as a script

SETTINGS = [
    {},  # each library's own choice for this CPU
    {"MKL_CBWR": "AVX2"},
    {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    {"MKL_CBWR": "COMPATIBLE"},
    {"ATEN_CPU_CAPABILITY": "default"},
]

TRAIN = """
import dataclasses, sys, tempfile, torch
torch.set_num_threads(1)
from simcalib.experiment.plan import plan_study
from simcalib.experiment.protocol import backbone_digest, train_run_backbone
from simcalib.experiment.study import load_study
plan = plan_study(load_study(sys.argv[1]), data=False)
digests = []
for benchmark in plan.benchmarks:
    if benchmark.name in sys.argv[2:]:
        settings = dataclasses.replace(benchmark.settings, cache_dir=tempfile.mkdtemp())
        run = next(r for r in benchmark.runs if (r.split, r.init, r.fold) == (0, 0, 0))
        digests.append(f"{benchmark.name} {backbone_digest(train_run_backbone(run, settings))}")
print(torch.backends.cpu.get_cpu_capability(), *digests)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", default="Cora-GCN,Cora-GAT")
    parser.add_argument("--study", default="study/offline.yaml")
    args = parser.parse_args()
    benchmarks = args.benchmarks.split(",")
    print(f"CPU: {cpu_model()}; study {args.study}, run s0 i0 f0, one thread")
    for setting in SETTINGS:
        env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY")}
        env.update(setting, OMP_NUM_THREADS="1")
        done = subprocess.run([sys.executable, "-c", TRAIN, args.study, *benchmarks], env=env, capture_output=True,
                              text=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            return done.returncode
        label = " ".join(f"{k}={v}" for k, v in setting.items()) or "unset (each library's choice)"
        print(f"{label:<40} ATen {done.stdout.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
