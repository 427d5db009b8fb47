"""Processes llmload starts and stops by PID: the generic managed process, the simulator launcher
and the real llama.cpp server built from PyPI packages; and a function of llmload run in a child
Python process (`python_child`: the first part of a large records file, for the commands).
"""
