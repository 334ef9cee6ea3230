"""One module per ``reveal`` subcommand (``NAME``, ``HELP``, ``add_arguments``, ``run``)."""
