"""The ``llmsim`` command line (``llmsim = "sim.cli:main"``, ``python -m sim``).

A module per command family, each with ``register(subparsers)`` adding its commands and a
handler per command that reads the arguments, calls the simulator and prints:

* :mod:`sim.cli.main`: the top-level parser, :func:`main`, and what goes wrong as one line and an
  exit status (2 for bad input, 1 for a failed simulation, 130 for Ctrl-C);
* :mod:`sim.cli.io`: what the commands share: ``--json -``, the workload and topology a command
  runs, the options several take;
* :mod:`sim.cli.run` (``run``), :mod:`sim.cli.calibrate` (``calibrate``), :mod:`sim.cli.memory`
  (``memory``), :mod:`sim.cli.validate` (``validate``), :mod:`sim.cli.presets` (``presets``),
  :mod:`sim.cli.collective` (``collective``), :mod:`sim.cli.compare` (``compare``),
  :mod:`sim.cli.sweep` (``sweep``), :mod:`sim.cli.whatif` (``whatif generations|nodes|power``),
  :mod:`sim.cli.inference` (``infer``, ``roofline``, ``validate-infer``, ``whatif memory``).

A command module imports the simulator inside its handler, so that ``llmsim --help`` and each
command load only what they use.
"""

from sim.cli.main import main

__all__ = ["main"]
