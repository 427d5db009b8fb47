"""The what-if twin: the simulator's step model fitted to a measured run (`fit`; the run read with
its run file, fitted, and its ladder: `measured`), its acceptance calibrated on the simulator's own
draws (`calibration`), the run beside the simulator's replay of it, with the verdict, what a change
gains and the one Amdahl bound of a change (`replay`; the replays themselves run in
`llmload.runner.twin_replays`), and the decision at the production rungs (`decision`, its rungs
from the measured steps and the prediction: `gains`).

May import: `llmload.core`, the rooms below it (`llmload.analysis.run`, `identity`), the
commands' analyses (`llmload.analysis.budget`) and the simulator's acceptance rule
(`llmload.sim.engine`); never gevent, Locust or tabulate.
"""
