"""One module per CLI command (``add_arguments`` + ``run``), registered in :mod:`sn40l_sim.commands.cli`."""
