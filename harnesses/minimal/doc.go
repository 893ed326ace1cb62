// Package minimal is the CPU toy harness: a robot tool-use environment (env),
// a linear "language model" with a chat template (policy), a vLLM-compatible
// model server (cmd/minimal-model), the planner harness that plays episodes
// (cmd/minimal-episode), the initial weights (cmd/minimal-init,
// weights/w0) and a dual-clip PPO trainer run with torchrun (trainer.py).
// It exercises Roundhouse's real interfaces and really learns; the tests in
// this directory run the whole loop in process to prove it.
package minimal
