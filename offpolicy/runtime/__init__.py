"""The runtime: the runner, the learner and its collector process, and the shared memory between them."""
