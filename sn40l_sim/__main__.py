"""``python -m sn40l_sim``: see :mod:`sn40l_sim.commands.cli`."""
import gc
import sys

from sn40l_sim.commands.cli import main

status = main()
# As it exits, Python collects garbage over every live object, more than once, and the mapper's
# memos are most of them by then (a cold `run` spent ~0.15 CPU s there); frozen objects are left
# out of collections and still freed by reference counting. The command has finished its output.
gc.freeze()
sys.exit(status)
