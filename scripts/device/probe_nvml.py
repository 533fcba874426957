"""Run ON THE GPU: does NVML see a process that floods the GPU, under the pid this process knows it by?

GpuWatch (harness/shared/isolation.py) watches a stopped worker through NVML's per-process samples; it gives up,
and says so, where NVML does not list the worker among the compute processes. The 2026-12-07 probe on the H100
device asked 3 s after starting the child (maybe before its first matmul) and saw no process, no per-process
sample and device samples of 0: this one asks only after the child says its matmuls are running.
Usage: python3 scripts/device/probe_nvml.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
import torch

FLOOD = ("import torch,time,sys\n"
         "a=torch.randn(8192,8192,device='cuda');b=torch.randn(8192,8192,device='cuda')\n"
         "[a@b for _ in range(5)];torch.cuda.synchronize();print('running',flush=True)\n"
         "t=time.time()\n"
         "while time.time()-t<8:\n"
         "    [a@b for _ in range(50)]\n"
         "    torch.cuda.synchronize()\n")


def main() -> None:
    pynvml.nvmlInit()
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    child = subprocess.Popen([sys.executable, "-c", FLOOD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    print("child says:", child.stdout.readline().strip(), "pid", child.pid, "my pid", os.getpid(),
          "pid ns", os.readlink("/proc/self/ns/pid"))
    t0 = time.time_ns() // 1000
    time.sleep(2)
    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        print("compute procs:", [(int(p.pid), p.usedGpuMemory) for p in procs])
    except Exception as e:  # noqa: BLE001 - the probe reports whatever NVML says
        print("compute procs:", type(e).__name__, e)
    try:
        s = pynvml.nvmlDeviceGetProcessUtilization(h, t0)
        print("process samples:", [(int(x.pid), int(x.smUtil), int(x.timeStamp)) for x in s][:20])
    except Exception as e:  # noqa: BLE001
        print("process samples:", type(e).__name__, e)
    try:
        _, smp = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, t0)
        print("device samples since start:", len(smp), [int(x.sampleValue.uiVal) for x in smp][-8:])
    except Exception as e:  # noqa: BLE001
        print("device samples:", type(e).__name__, e)
    print("utilization now:", pynvml.nvmlDeviceGetUtilizationRates(h).gpu, "%")
    child.wait()


if __name__ == "__main__":
    main()
