"""``python -m sn40l_sim``: see :mod:`sn40l_sim.commands.cli`."""
import sys

from sn40l_sim.commands.cli import main

sys.exit(main())
