"""``python -m sim.cli`` is the ``llmsim`` command."""
import sys

from sim.cli import main

sys.exit(main())
