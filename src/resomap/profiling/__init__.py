"""What a model costs at a resolution: profile() -> ModelProfile, and run_benchmark() for optimisation options."""

from resomap.profiling.bench import BenchEntry, BenchReport, run_benchmark, save_benchmark
from resomap.profiling.flops import OpCounts, count_flops, count_macs, count_ops
from resomap.profiling.memory import MemoryStats
from resomap.profiling.options import ALL_OPTIONS, OPTIONS, BenchOption
from resomap.profiling.profiler import ModelProfile, profile, profile_by_name
from resomap.profiling.report import load_profile, print_profiling_report, save_profile
from resomap.profiling.timing import LatencyStats

__all__ = [
    "ALL_OPTIONS",
    "OPTIONS",
    "BenchEntry",
    "BenchOption",
    "BenchReport",
    "LatencyStats",
    "MemoryStats",
    "ModelProfile",
    "OpCounts",
    "count_flops",
    "count_macs",
    "count_ops",
    "load_profile",
    "print_profiling_report",
    "profile",
    "profile_by_name",
    "run_benchmark",
    "save_benchmark",
    "save_profile",
]
