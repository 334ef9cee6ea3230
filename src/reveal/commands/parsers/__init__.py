"""The arguments of every ``reveal`` subcommand, one module each (``NAME``, ``HELP``,
``add_arguments``): light, so that ``reveal --help`` and a command's ``--help`` load no
analysis, collector or report; the command's work is in :mod:`reveal.commands.<name>`."""
