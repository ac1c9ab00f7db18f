"""Code every learned algorithm's trainer shares.

- :mod:`.spec`: the algorithm's model contract and knobs, read from the Rust bindings
  (``_native.spec``, ``defaults``, ``dynamics``), never copied;
- :mod:`.vec`: vectorised rollouts over the simulator, in this process, in worker processes or
  on Ray, with the same transitions for a seed;
- :mod:`.ppo`: PPO for lockstep multi-flow rollouts (GAE with inactive rows, clipped loss,
  updates over several rollouts, an asymmetric critic's reward memory);
- :mod:`.checkpoint`, :mod:`.log`, :mod:`.curves`: checkpoints with their command chain,
  scalars per iteration, training curves next to the card;
- :mod:`.evaluate`: hooks into the evaluation harness (tune split only for selection);
- :mod:`.determinism`: seeding and what a result's bytes depend on;
- :mod:`.flags`: the command-line flags trainers share.
"""
