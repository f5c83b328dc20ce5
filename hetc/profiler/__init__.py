"""`hetc profile measure`: the runtime's own layers and collectives, timed and sized on one node.

The cost model predicts what `hetc.runtime` will do, so the profiler measures `hetc.runtime`,
never a stand-in: `layers` runs the runtime's modules, precision, optimizer and loss through
the calls `StageTrainer.train_step` makes; `collectives` times the process-group operations the
runtime's reductions use (and the link between two nodes of a CPU device over loopback);
`worker` is one rank of a tensor-parallel or network group; `points` chooses the points the
planner may use that the output file lacks; `steps` measures them, reporting to `progress`;
under torchrun on several nodes `cluster` times the links between every two nodes and
`pairs` says which pairs and where each pair's fit is filed;
`command` validates the request, runs the steps within the budget and writes the profile
(`hetc.costmodel.profile`, version 3). Only `hetc.cli` imports this package, lazily: it
imports torch.
"""
