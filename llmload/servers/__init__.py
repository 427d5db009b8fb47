"""Processes llmload starts and stops by PID: the generic managed process, the simulator launcher
and the real llama.cpp server built from PyPI packages.
"""
